package decisions.failure_disposition_test

import data.decisions.failure_disposition

fixtures := data.fixtures.failure_disposition

u64_max := 18446744073709551615

# The thresholds are data (data.json) that reliability engineers edit: the tests
# read them, so that an edit of the budget or the delay needs no test edit (the
# fixtures pin today's values, and `arbiter test --update` re-records them).
max_attempts := failure_disposition.max_attempts

# The attempts within the budget that the tests try: the first and the last.
# Attempts count from 1; a budget of 1 leaves none.
attempts_within_budget contains attempt if {
	some attempt in {1, max_attempts - 1}
	attempt >= 1
	attempt < max_attempts
}

decide(inp) := result if {
	result := failure_disposition.decision with input as inp
}

retryable := {"disposition": "retryable_failure", "code": "native_session_interrupted", "retryAfterSeconds": failure_disposition.retry_after_seconds, "reasons": ["retry_within_budget"]}

exhausted := {"disposition": "terminal_failure", "code": "native_session_retry_exhausted", "retryAfterSeconds": null, "reasons": ["retry_budget_exhausted"]}

permanent(code) := {"disposition": "terminal_failure", "code": code, "retryAfterSeconds": null, "reasons": ["permanent_failure_code"]}

transient := "native_runner_process_exited"

# What a transient failure at attempt 1 is given, whatever the budget.
transient_first := decide({"attempt": 1, "failureCode": transient})

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
	print("failure_disposition fixtures not matching want_result:", mismatches)
	count(result_cases) >= 25
	count(mismatches) == 0
}

test_fixtures_well_formed if {
	every name, fx in fixtures {
		regex.match(`^[a-z0-9_]+$`, name)
		is_string(fx.note)
		count(object.keys(fx) & {"input", "body"}) == 1
		count(object.keys(fx) & {"want_result", "want_error"}) == 1
		has_body(fx) == wants_malformed_json(fx)
	}
	fixtures.first_attempt.want_result
	fixtures.permanent_first.want_result
}

# Reliability engineers add codes to data.json without touching tests: the
# test holds for whatever the list says (the fixtures pin today's twelve).
test_permanent_failure_code_every_listed_code if {
	count(failure_disposition.permanent_codes) > 0
	every code in failure_disposition.permanent_codes {
		decide({"attempt": 1, "failureCode": code}) == permanent(code)
	}
}

test_permanent_failure_code_before_budget if {
	decide({"attempt": max_attempts, "failureCode": "native_permission_declined"}) == permanent("native_permission_declined")
	decide({"attempt": u64_max, "failureCode": "native_event_replay_conflict"}) == permanent("native_event_replay_conflict")
}

test_permanent_failure_code_exact_match_only if {
	decide({"attempt": 1, "failureCode": "NATIVE_PROVIDER_MODEL_REJECTED"}) == transient_first
	decide({"attempt": 1, "failureCode": "native_provider_model_rejected_v2"}) == transient_first
}

test_permanent_failure_code_list_is_data if {
	decide({"attempt": 1, "failureCode": transient}) == permanent(transient) with failure_disposition.permanent_codes as [transient]
	decide({"attempt": 1, "failureCode": "native_permission_declined"}) == transient_first with failure_disposition.permanent_codes as []
}

test_retry_budget_exhausted_at_max_attempts if {
	decide({"attempt": max_attempts, "failureCode": transient}) == exhausted
	decide({"attempt": max_attempts + 1, "failureCode": transient}) == exhausted
	decide({"attempt": u64_max, "failureCode": transient}) == exhausted
}

test_retry_budget_exhausted_follows_data if {
	decide({"attempt": 4, "failureCode": transient}) == retryable with failure_disposition.max_attempts as 5
	decide({"attempt": 5, "failureCode": transient}) == exhausted with failure_disposition.max_attempts as 5
}

test_retry_budget_exhausted_fails_closed_without_budget if {
	decide({"attempt": 1, "failureCode": transient}) == exhausted with failure_disposition.max_attempts as null
}

test_retry_within_budget_below_max_attempts if {
	every attempt in attempts_within_budget {
		decide({"attempt": attempt, "failureCode": transient}) == retryable
	}
}

test_retry_within_budget_delay_is_data if {
	decide({"attempt": 1, "failureCode": transient}).retryAfterSeconds == 60 with failure_disposition.retry_after_seconds as 60
}

test_retry_within_budget_ignores_checkpoint_flags if {
	every attempt in attempts_within_budget {
		every checkpoint in [true, false] {
			every events in [true, false] {
				decide({"attempt": attempt, "failureCode": transient, "checkpointPresent": checkpoint, "providerEventsSeen": events}) == retryable
			}
		}
	}
}

test_decision_has_exactly_contract_keys if {
	every name in result_cases {
		object.keys(decide(fixtures[name].input)) == {"disposition", "code", "retryAfterSeconds", "reasons"}
	}
}
