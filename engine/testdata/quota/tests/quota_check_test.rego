package decisions.quota_check_test

import data.decisions.quota_check

# The limit is data: the tests follow it, as the repository's own tests
# follow max_attempts.
limit := data.decisions.quota_check.limit

test_quota_exhausted_at_limit if {
	quota_check.decision == {"allow": false, "reasons": ["quota_exhausted"]} with input as {"tenant": "t", "used": limit}
}

test_quota_within_limit if {
	quota_check.decision.allow with input as {"tenant": "t", "used": limit - 1}
}

test_fixtures_all_pass if {
	failed := {name |
		some name, fx in data.fixtures.quota_check
		fx.want_result
		quota_check.decision != fx.want_result with input as fx.input
	}
	count(failed) == 0
}
