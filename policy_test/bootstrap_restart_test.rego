package decisions.bootstrap_restart_test

import data.decisions.bootstrap_restart

# The fixtures under fixtures/bootstrap_restart/, merged by OPA into one object:
# case name -> {note, input | body, want_result | want_error}.
fixtures := data.fixtures.bootstrap_restart

u64_max := 18446744073709551615

# The shared retry budget is data (failure_disposition/data.json) that reliability
# engineers edit: the tests read it, so that a budget edit needs no test edit (the
# fixtures pin today's value, and `arbiter test --update` re-records them).
max_attempts := data.decisions.failure_disposition.max_attempts

# The allowed baseline: clean never-connected state, stop proven, resumed lease.
base := fixtures.allowed_sandbox_proof_resumed.input

local_proof := {"host": {"localProofRecorded": true, "localControllerRootPresent": true}, "stopProof": null}

decide(inp) := result if {
	result := bootstrap_restart.decision with input as inp
}

reasons(inp) := decide(inp).reasons

# patched deep-merges patch into the baseline.
patched(patch) := object.union(base, patch)

# with_state deep-merges patch into the baseline's runnerState.
with_state(patch) := object.union(base, {"runnerState": patch})

with_state_local(patch) := object.union_n([base, local_proof, {"runnerState": patch}])

has_body(fx) := "body" in object.keys(fx)

default wants_malformed_json(_) := false

wants_malformed_json(fx) if fx.want_error.code == "malformed_json"

result_cases contains name if {
	some name, fx in fixtures
	fx.want_result
}

fixture_matches(fx) if decide(fx.input) == fx.want_result

mismatches contains name if {
	some name in result_cases
	not fixture_matches(fixtures[name])
}

test_fixtures_all_want_results_match if {
	print("bootstrap_restart fixtures not matching want_result:", mismatches)
	count(result_cases) >= 140
	count(mismatches) == 0
}

test_fixtures_well_formed if {
	every name, fx in fixtures {
		regex.match(`^[a-z0-9_]+$`, name)
		is_string(fx.note)
		count(object.keys(fx) & {"input", "body"}) == 1
		count(object.keys(fx) & {"want_result", "want_error"}) == 1
		count(object.keys(fx) - {"note", "input", "body", "want_result", "want_error"}) == 0
	}
	every fx in fixtures {
		has_body(fx) == wants_malformed_json(fx)
	}
}

test_fixtures_include_shared_examples if {
	every name in [
		"claim_is_resume_dead_runner", "combined_suspended_backup_connected_unproven",
		"interrupted_bootstrap_unprepared_connected", "interrupted_bootstrap_unprepared_unproven",
		"interrupted_bootstrap_unprepared_unrecorded__resumed", "local_proof_recorded_resumed",
		"provider_state_present_not_suspended", "runner_state_absent_session_root_present", "unknown_lifecycle",
	] {
		fixtures[name]
	}
}

test_fixtures_reach_every_reason_and_error if {
	seen_reasons := {code | some name in result_cases; some code in fixtures[name].want_result.reasons}
	count(seen_reasons) == 22
	seen_errors := {fixtures[name].want_result.error | some name in result_cases}
	seen_errors == {
		null, "native_session_retry_exhausted", "native_runner_warm_transition_recovery_unproven",
		"runner_harness_state_mismatch: resumed_not_suspended", "runner_harness_state_mismatch: resumed_unavailable",
	}
}

test_decision_allowed_sandbox_proof if {
	decide(base) == {"allow": true, "outcome": "restart_bootstrap", "proof": "sandbox", "reasons": [], "primary": null, "error": null}
}

test_decision_allowed_local_proof if {
	decide(patched(local_proof)) == {"allow": true, "outcome": "restart_bootstrap", "proof": "local", "reasons": [], "primary": null, "error": null}
}

test_decision_refusal_shape if {
	got := decide(patched({"stopProof": null}))
	got == {
		"allow": false, "outcome": "refuse", "proof": null, "reasons": ["stale_runner_stop_unproven"],
		"primary": "stale_runner_stop_unproven", "error": "runner_harness_state_mismatch: resumed_unavailable",
	}
}

test_claim_not_bootstrap_incomplete_other_kinds if {
	every kind in ["reattach_existing_runner", "reattach_remote_runner", "reconcile_remote_runner", "resume_dead_runner"] {
		reasons(patched({"claim": {"kind": kind}})) == ["claim_not_bootstrap_incomplete"]
	}
}

test_claim_not_bootstrap_incomplete_absent_or_null if {
	reasons(object.remove(base, ["claim"])) == ["claim_not_bootstrap_incomplete"]
	reasons(patched({"claim": null})) == ["claim_not_bootstrap_incomplete"]
	decide(patched({"claim": null})).error == null
}

test_claim_run_mismatch_alone if {
	got := decide(patched({"claim": {"runId": "run-0b11"}}))
	got.reasons == ["claim_run_mismatch"]
	got.error == null
}

test_retry_budget_exhausted_at_max_attempts if {
	reasons(patched({"claim": {"providerAttempt": max_attempts - 1}})) == []
	got := decide(patched({"claim": {"providerAttempt": max_attempts}}))
	got.reasons == ["retry_budget_exhausted"]
	got.error == "native_session_retry_exhausted"
}

test_retry_budget_exhausted_at_u64_max if {
	reasons(patched({"claim": {"providerAttempt": u64_max}})) == ["retry_budget_exhausted"]
}

test_retry_budget_exhausted_follows_shared_data if {
	reasons(patched({"claim": {"providerAttempt": 4}})) == [] with data.decisions.failure_disposition.max_attempts as 5
	reasons(patched({"claim": {"providerAttempt": 5}})) == ["retry_budget_exhausted"] with data.decisions.failure_disposition.max_attempts as 5
}

test_retry_budget_exhausted_fails_closed_without_budget if {
	reasons(base) == ["retry_budget_exhausted"] with data.decisions.failure_disposition.max_attempts as "3"
	reasons(base) == ["retry_budget_exhausted"] with data.decisions.failure_disposition as {}
}

test_lease_outcome_ineligible_replacement_and_null if {
	every outcome in ["replacement", null] {
		got := decide(patched({"lease": {"acquisitionOutcome": outcome}}))
		got.reasons == ["lease_outcome_ineligible"]
		got.error == null
	}
	reasons(patched({"lease": {"acquisitionOutcome": "created"}})) == []
}

test_runner_state_absent_null_absent_or_unconfirmed if {
	reasons(patched({"runnerState": null})) == ["runner_state_absent"]
	reasons(object.remove(base, ["runnerState"])) == ["runner_state_absent"]
	reasons(patched({"sandbox": {"runnerStatePresent": false}})) == ["runner_state_absent"]
}

test_runner_state_absent_hides_state_rules if {
	connected := with_state({"lifecycle": "suspended", "lastConnectionProtocolVersion": 2, "reconnectCount": 4, "runId": "run-0b11"})
	reasons(object.union(connected, {"sandbox": {"runnerStatePresent": false}})) == ["runner_state_absent"]
}

test_runner_state_warm_transition_schema_or_object if {
	got := decide(with_state({"schema": "paperclip.runner.durable.state.warm-transition.v1"}))
	got.reasons == ["runner_state_warm_transition"]
	got.error == "native_runner_warm_transition_recovery_unproven"
	reasons(with_state({"warmTransition": {}})) == ["runner_state_warm_transition"]
	reasons(with_state({"warmTransition": null})) == []
}

test_runner_state_inconsistent_each_clause if {
	reasons(with_state({"ackedSourceSeq": 1})) == ["runner_state_inconsistent"]
	reasons(with_state({"compactedThroughControllerSeq": 1})) == ["runner_state_inconsistent"]
	reasons(with_state({"nextSourceSeq": 5, "ackedSourceSeq": 3})) == ["runner_state_inconsistent"]
	reasons(with_state_local({
		"lifecycle": "stopped",
		"pendingTerminalDelivery": {"commandId": "c", "controllerSeq": 0, "commandType": "runner.suspend", "lifecycle": "suspended"},
	})) == ["runner_state_inconsistent"]
}

test_runner_state_inconsistent_consistent_states if {
	reasons(with_state({"nextSourceSeq": 5, "ackedSourceSeq": 4})) == []
	reasons(with_state({"lastControllerCommandSeq": 3, "compactedThroughControllerSeq": 3})) == ["runner_commands_seen"]
	reasons(with_state_local({"nextSourceSeq": 5, "ackedSourceSeq": 1, "outbox": [{"sourceSeq": 2, "priority": 0, "eventType": "e", "envelope": {}, "byteSize": 1}]})) == []
}

test_runner_state_inconsistent_exact_at_u64_max if {
	reasons(with_state({"nextSourceSeq": u64_max, "ackedSourceSeq": 18446744073709551614})) == []
	reasons(with_state({"nextSourceSeq": u64_max, "ackedSourceSeq": u64_max})) == ["runner_state_inconsistent"]
	reasons(with_state({"nextSourceSeq": u64_max, "ackedSourceSeq": 18446744073709551613})) == ["runner_state_inconsistent"]
	reasons(with_state({"nextSourceSeq": 9007199254740993, "ackedSourceSeq": 9007199254740991})) == ["runner_state_inconsistent"]
	reasons(with_state_local({"lastControllerCommandSeq": 18446744073709551614, "compactedThroughControllerSeq": u64_max})) == ["runner_state_inconsistent"]
}

test_runner_run_mismatch_alone if {
	reasons(with_state({"runId": "run-0b11"})) == ["runner_run_mismatch"]
}

test_runner_instance_mismatch_alone if {
	reasons(patched({"runnerState": {"runnerInstanceId": "runner-0b11"}, "stopProof": {"runnerInstanceId": "runner-0b11"}})) == ["runner_instance_mismatch"]
}

test_runner_session_mismatch_alone if {
	reasons(with_state({"normalizedSessionId": "sess-0b11"})) == ["runner_session_mismatch"]
}

test_runner_state_environment_lease_not_compared if {
	reasons(with_state({"environmentLeaseId": "lease-0b11"})) == []
}

test_runner_lifecycle_suspended_only_suspended if {
	reasons(with_state({"lifecycle": "suspended"})) == ["runner_lifecycle_suspended"]
	every lifecycle in ["connecting", "ready", "backpressure", "recoverable_failure", "unrecoverable", "stopped", "revoked"] {
		reasons(with_state({"lifecycle": lifecycle})) == []
	}
}

test_provider_state_present_error_rows if {
	provider := {"sandbox": {"providerStatePresent": true}}
	decide(patched(provider)).error == "runner_harness_state_mismatch: resumed_not_suspended"
	decide(object.union(patched(provider), {"runnerState": {"lifecycle": "suspended"}})).error == "runner_harness_state_mismatch: resumed_unavailable"
	decide(object.union(patched(provider), {"runnerState": null})).error == "runner_harness_state_mismatch: resumed_unavailable"
	decide(object.union(patched(provider), {"lease": {"acquisitionOutcome": "created"}})).error == null
}

test_failover_backup_present_alone if {
	reasons(patched({"host": {"failoverBackupPresent": true}})) == ["failover_backup_present"]
}

test_archived_rotation_snapshot_present_either_side if {
	reasons(patched({"host": {"archivedRotationSnapshotPresent": true}})) == ["archived_rotation_snapshot_present"]
	reasons(patched({"sandbox": {"archivedRotationSnapshotPresent": true}})) == ["archived_rotation_snapshot_present"]
	both := {"host": {"archivedRotationSnapshotPresent": true}, "sandbox": {"archivedRotationSnapshotPresent": true}}
	reasons(patched(both)) == ["archived_rotation_snapshot_present"]
}

test_runner_connected_protocol_versions if {
	reasons(with_state({"lastConnectionProtocolVersion": 1})) == ["runner_connected"]
	reasons(with_state({"lastConnectionProtocolVersion": 2})) == ["runner_connected"]
	reasons(with_state({"lastConnectionProtocolVersion": null})) == []
	reasons(patched({"runnerState": object.remove(base.runnerState, ["lastConnectionProtocolVersion"])})) == []
}

test_runner_commands_seen_alone if {
	reasons(with_state({"lastControllerCommandSeq": 1})) == ["runner_commands_seen"]
	reasons(with_state({"lastControllerCommandSeq": u64_max})) == ["runner_commands_seen"]
}

test_runner_reconnected_alone if {
	reasons(with_state({"reconnectCount": 1})) == ["runner_reconnected"]
	reasons(with_state({"reconnectCount": u64_max})) == ["runner_reconnected"]
}

test_runner_outbox_not_empty_alone if {
	event := {"sourceSeq": 1, "priority": 2, "eventType": "runner.log", "envelope": {}, "byteSize": 10}
	reasons(with_state({"nextSourceSeq": 2, "outbox": [event]})) == ["runner_outbox_not_empty"]
}

test_runner_processed_commands_alone if {
	command := {"commandId": "cmd-1", "controllerSeq": 0, "commandType": "runner.ping", "status": "failed"}
	reasons(with_state({"processedCommands": {"cmd-1": command}})) == ["runner_processed_commands"]
}

test_runner_pending_terminal_delivery_alone if {
	delivery := {"commandId": "cmd-2", "controllerSeq": 0, "commandType": "runner.shutdown", "lifecycle": "stopped"}
	reasons(with_state({"lifecycle": "stopped", "pendingTerminalDelivery": delivery})) == ["runner_pending_terminal_delivery"]
	reasons(patched({"runnerState": object.remove(base.runnerState, ["pendingTerminalDelivery"])})) == []
}

test_stale_runner_stop_unproven_null_absent_unproven if {
	reasons(patched({"stopProof": null})) == ["stale_runner_stop_unproven"]
	reasons(object.remove(base, ["stopProof"])) == ["stale_runner_stop_unproven"]
	reasons(patched({"stopProof": {"outcome": "unproven"}})) == ["stale_runner_stop_unproven"]
	reasons(patched({"stopProof": {"outcome": "absent"}})) == []
}

test_stop_proof_identity_mismatch_stopped_or_absent if {
	every outcome in ["stopped", "absent"] {
		reasons(patched({"stopProof": {"outcome": outcome, "runnerInstanceId": "runner-0b11"}})) == ["stop_proof_identity_mismatch"]
	}
	reasons(patched({"stopProof": {"outcome": "unproven", "runnerInstanceId": "runner-0b11"}})) == ["stale_runner_stop_unproven"]
}

test_local_proof_covers_rules_15_to_22 if {
	served := {
		"lifecycle": "stopped", "lastConnectionProtocolVersion": 2, "lastControllerCommandSeq": 4,
		"compactedThroughControllerSeq": 3, "reconnectCount": 2, "nextSourceSeq": 3, "ackedSourceSeq": 1,
		"outbox": [{"sourceSeq": 2, "priority": 1, "eventType": "e", "envelope": {}, "byteSize": 1}],
		"processedCommands": {"cmd-4": {"commandId": "cmd-4", "controllerSeq": 4, "commandType": "runner.shutdown", "status": "completed"}},
		"pendingTerminalDelivery": {"commandId": "cmd-4", "controllerSeq": 4, "commandType": "runner.shutdown", "lifecycle": "stopped"},
	}
	reasons(with_state(served)) == [
		"runner_connected", "runner_commands_seen", "runner_reconnected", "runner_outbox_not_empty",
		"runner_processed_commands", "runner_pending_terminal_delivery",
	]
	decide(with_state_local(served)).proof == "local"
	reasons(object.union(with_state_local(served), {"stopProof": {"outcome": "stopped", "runnerInstanceId": "runner-0b11"}})) == []
}

test_local_proof_keeps_rules_5_to_11 if {
	reasons(object.union(patched(local_proof), {"runnerState": null})) == ["runner_state_absent"]
	reasons(with_state_local({"runId": "run-0b11", "runnerInstanceId": "runner-0b11", "normalizedSessionId": "sess-0b11"})) == [
		"runner_run_mismatch", "runner_instance_mismatch", "runner_session_mismatch",
	]
	reasons(with_state_local({"lifecycle": "suspended"})) == ["runner_lifecycle_suspended"]
	reasons(with_state_local({"warmTransition": {}})) == ["runner_state_warm_transition"]
}

test_error_first_matching_row if {
	# claim rows outrank everything, retry outranks created, warm outranks created.
	decide(patched({"claim": {"kind": "resume_dead_runner"}, "sandbox": {"providerStatePresent": true}})).error == null
	decide(patched({"claim": {"providerAttempt": max_attempts}, "lease": {"acquisitionOutcome": "created"}})).error == "native_session_retry_exhausted"
	decide(patched({"claim": {"providerAttempt": max_attempts}, "lease": {"acquisitionOutcome": "replacement"}})).error == "native_session_retry_exhausted"
	decide(patched({"runnerState": {"warmTransition": {}}, "lease": {"acquisitionOutcome": "created"}})).error == "native_runner_warm_transition_recovery_unproven"
	decide(patched({"runnerState": {"warmTransition": {}}, "claim": {"runId": "run-0b11"}})).error == null
	decide(patched({"host": {"failoverBackupPresent": true}, "lease": {"acquisitionOutcome": "created"}})).error == null
	decide(patched({"host": {"failoverBackupPresent": true}})).error == "runner_harness_state_mismatch: resumed_unavailable"
}

test_reasons_in_rule_order if {
	fx := fixtures.combo_twenty_reasons
	got := decide(fx.input)
	count(got.reasons) == 20
	got.reasons == fx.want_result.reasons
	got.primary == "claim_not_bootstrap_incomplete"
}

test_decision_has_exactly_contract_keys if {
	every name in result_cases {
		object.keys(decide(fixtures[name].input)) == {"allow", "outcome", "proof", "reasons", "primary", "error"}
	}
}
