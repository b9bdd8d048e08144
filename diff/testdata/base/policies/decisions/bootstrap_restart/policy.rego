# METADATA
# title: Bootstrap restart
# description: >-
#   May host preparation restart the interrupted bootstrap of this run? Only when
#   durable evidence proves that this run's own Runner never connected and is
#   stopped or gone. Every rule is evaluated; reasons lists the failing ones in
#   rule order.
# schemas:
#   - input: schema.bootstrap_restart.input
package decisions.bootstrap_restart

import data.lib.retry_budget

# The result document of the contract, with exactly its keys.
decision := {
	"allow": allow,
	"outcome": outcome,
	"proof": proof,
	"reasons": reasons,
	"primary": primary,
	"error": error_message,
}

# Each reason rule adds [rank, code], rank being the contract's rule number:
# sorting orders the codes by rule, and a failing rule can never be dropped.
reasons := [code | some [_, code] in sort(failures)]

default allow := false

allow if count(reasons) == 0

default outcome := "refuse"

outcome := "restart_bootstrap" if allow

default proof := null

proof := "local" if {
	allow
	input.host.localProofRecorded
} else := "sandbox" if {
	allow
}

default primary := null

primary := reasons[0]

# The first matching row of the contract's error table; the last row is the
# default.
default error_message := "runner_harness_state_mismatch: resumed_unavailable"

error_message := null if {
	allow
} else := null if {
	primary in {"claim_not_bootstrap_incomplete", "claim_run_mismatch", "lease_outcome_ineligible"}
} else := "native_session_retry_exhausted" if {
	primary == "retry_budget_exhausted"
} else := "native_runner_warm_transition_recovery_unproven" if {
	primary == "runner_state_warm_transition"
} else := null if {
	input.lease.acquisitionOutcome == "created"
} else := "runner_harness_state_mismatch: resumed_not_suspended" if {
	"provider_state_present" in reasons
	state_present
	input.runnerState.lifecycle != "suspended"
}

# Helpers (no METADATA: only reason rules carry it). Absent and null are the
# same for every optional field: a reference to a missing key is undefined, and
# so is a reference through null. Rules read input fields directly rather than
# through a helper holding an object, so that the schema-aware type checker
# reports a misspelt field at the line that reads it.

claim_present if input.claim != null

# "State present" in the contract's sense: a non-null runnerState that the
# sandbox probe confirms.
state_present if {
	input.runnerState != null
	input.sandbox.runnerStatePresent
}

# A recorded local proof stands in for rules 15 to 22.
no_local_proof if not input.host.localProofRecorded

# Rules 15 to 20 and 22 judge the Runner state, and only without a local proof.
state_present_without_local_proof if {
	no_local_proof
	state_present
}

claim_is_bootstrap_incomplete if input.claim.kind == "bootstrap_incomplete"

lease_eligible if input.lease.acquisitionOutcome in {"resumed", "created"}

in_warm_transition if input.runnerState.schema == "paperclip.runner.durable.state.warm-transition.v1"

in_warm_transition if input.runnerState.warmTransition != null

# Two counters are compared through their difference. OPA subtracts integers
# exactly, whatever their JSON form (big.Int beyond the int32 window), but it
# compares two long literals that both carry a decimal point as float64: stock
# OPA, given 1000000000000000000.0e0 and 1000000000000000001.0e0 as they arrive,
# calls them equal. Arbiter hands every number to the policy in canonical form;
# this keeps the same files exact under stock OPA too (the number_forms
# fixtures check both). For integers, ackedSourceSeq > nextSourceSeq - 1 is
# ackedSourceSeq >= nextSourceSeq.
inconsistent if input.runnerState.ackedSourceSeq - input.runnerState.nextSourceSeq >= 0

inconsistent if input.runnerState.compactedThroughControllerSeq - input.runnerState.lastControllerCommandSeq > 0

# nextSourceSeq >= 1 (schema), so nextSourceSeq - 1 stays within u64; the
# comparison has a canonical integer on one side, which OPA compares exactly.
# The boundary fixtures check it at 18446744073709551615.
inconsistent if {
	count(input.runnerState.outbox) == 0
	input.runnerState.ackedSourceSeq != input.runnerState.nextSourceSeq - 1
}

inconsistent if input.runnerState.pendingTerminalDelivery.lifecycle != input.runnerState.lifecycle

stop_proven if input.stopProof.outcome in {"stopped", "absent"}

# METADATA
# title: Claim is not bootstrap_incomplete
# description: >-
#   Only a bootstrap_incomplete recovery claim opens this recovery path; without
#   a claim, or with a claim of another kind, another recovery owns the run.
failures contains [1, "claim_not_bootstrap_incomplete"] if not claim_is_bootstrap_incomplete

# METADATA
# title: Claim belongs to another run
# description: >-
#   The recovery claim names a different run than the one host preparation
#   expects, so it cannot authorize restarting this run's bootstrap.
failures contains [2, "claim_run_mismatch"] if {
	claim_present
	input.claim.runId != input.run.runId
}

# METADATA
# title: Retry budget exhausted
# description: >-
#   The claim's provider attempt has reached the shared retry budget (max_attempts
#   in the failure_disposition data), so the run fails instead of restarting again.
failures contains [3, "retry_budget_exhausted"] if {
	claim_present
	attempt := input.claim.providerAttempt
	retry_budget.exhausted(attempt)
}

# METADATA
# title: Lease outcome not eligible
# description: >-
#   Only a created or resumed environment lease keeps this run's sandbox; a
#   replacement or unknown lease outcome says nothing about this run's Runner.
failures contains [4, "lease_outcome_ineligible"] if not lease_eligible

# METADATA
# title: Runner state absent
# description: >-
#   No runner-state.json is present in the sandbox (or the probe did not confirm
#   it), so nothing proves which Runner ran or that it never connected.
failures contains [5, "runner_state_absent"] if not state_present

# METADATA
# title: Runner state in warm transition
# description: >-
#   The Runner state records a warm transition; recovering it by restarting the
#   bootstrap is not proven safe.
failures contains [6, "runner_state_warm_transition"] if {
	state_present
	in_warm_transition
}

# METADATA
# title: Runner state inconsistent
# description: >-
#   The Runner state contradicts itself (acknowledged or compacted sequence ahead
#   of what was issued, an empty outbox with unacknowledged events, or a pending
#   terminal delivery for another lifecycle), so it cannot serve as evidence.
failures contains [7, "runner_state_inconsistent"] if {
	state_present
	inconsistent
}

# METADATA
# title: Runner state belongs to another run
# description: >-
#   The Runner state in the sandbox names a different run, so it proves nothing
#   about this run's Runner.
failures contains [8, "runner_run_mismatch"] if {
	state_present
	input.runnerState.runId != input.run.runId
}

# METADATA
# title: Runner state belongs to another Runner instance
# description: >-
#   The Runner state was written by a different Runner instance than the one host
#   preparation started for this run.
failures contains [9, "runner_instance_mismatch"] if {
	state_present
	input.runnerState.runnerInstanceId != input.run.runnerInstanceId
}

# METADATA
# title: Runner state belongs to another session
# description: >-
#   The Runner state names a different normalized session than the one this run
#   expects.
failures contains [10, "runner_session_mismatch"] if {
	state_present
	input.runnerState.normalizedSessionId != input.run.normalizedSessionId
}

# METADATA
# title: Runner is suspended
# description: >-
#   The Runner was suspended, which keeps its session for a later resume;
#   restarting the bootstrap would discard it.
failures contains [11, "runner_lifecycle_suspended"] if {
	state_present
	input.runnerState.lifecycle == "suspended"
}

# METADATA
# title: Provider state present
# description: >-
#   The sandbox holds provider state, so the provider session may be live; a new
#   bootstrap would lose or duplicate it.
failures contains [12, "provider_state_present"] if input.sandbox.providerStatePresent

# METADATA
# title: Failover backup present
# description: >-
#   The host holds a failover backup for this run, which a restarted bootstrap
#   would orphan.
failures contains [13, "failover_backup_present"] if input.host.failoverBackupPresent

# METADATA
# title: Archived rotation snapshot present
# description: >-
#   An archived rotation snapshot exists on the host or in the sandbox, so the
#   session has history that a restarted bootstrap would ignore.
failures contains [14, "archived_rotation_snapshot_present"] if {
	true in [input.host.archivedRotationSnapshotPresent, input.sandbox.archivedRotationSnapshotPresent]
}

# METADATA
# title: Runner connected
# description: >-
#   The Runner state records a connection protocol version, so the Runner reached
#   session.open at least once and this is not an interrupted bootstrap.
failures contains [15, "runner_connected"] if {
	state_present_without_local_proof
	input.runnerState.lastConnectionProtocolVersion != null
}

# METADATA
# title: Runner saw controller commands
# description: >-
#   The Runner state records a controller command sequence, so a controller
#   talked to this Runner.
failures contains [16, "runner_commands_seen"] if {
	state_present_without_local_proof
	input.runnerState.lastControllerCommandSeq != 0
}

# METADATA
# title: Runner reconnected
# description: >-
#   The Runner state counts reconnections, so the Runner was connected before.
failures contains [17, "runner_reconnected"] if {
	state_present_without_local_proof
	input.runnerState.reconnectCount != 0
}

# METADATA
# title: Runner outbox not empty
# description: >-
#   The Runner holds events in its outbox, which a restarted bootstrap would lose.
failures contains [18, "runner_outbox_not_empty"] if {
	state_present_without_local_proof
	count(input.runnerState.outbox) != 0
}

# METADATA
# title: Runner processed commands
# description: >-
#   The Runner recorded processed controller commands, so it served a session.
failures contains [19, "runner_processed_commands"] if {
	state_present_without_local_proof
	count(input.runnerState.processedCommands) != 0
}

# METADATA
# title: Runner has a pending terminal delivery
# description: >-
#   The Runner still owes the controller a suspend or shutdown delivery, so it
#   served a session.
failures contains [20, "runner_pending_terminal_delivery"] if {
	state_present_without_local_proof
	input.runnerState.pendingTerminalDelivery != null
}

# METADATA
# title: Stale Runner stop not proven
# description: >-
#   Nothing proves that this run's stale Runner is stopped or gone; restarting
#   could put two Runners on one session.
failures contains [21, "stale_runner_stop_unproven"] if {
	no_local_proof
	not stop_proven
}

# METADATA
# title: Stop proof names another Runner
# description: >-
#   The stop proof is about a different Runner instance than the one in the
#   Runner state, so it does not prove that this Runner is stopped.
failures contains [22, "stop_proof_identity_mismatch"] if {
	state_present_without_local_proof
	stop_proven
	input.stopProof.runnerInstanceId != input.runnerState.runnerInstanceId
}
