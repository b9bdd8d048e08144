package decisions.quota_check_test

import data.decisions.quota_check

test_quota_exhausted_at_limit if {
	quota_check.decision == {"allow": false, "reasons": ["quota_exhausted"]} with input as {"tenant": "t", "used": 10}
}

test_quota_within_limit if {
	quota_check.decision.allow with input as {"tenant": "t", "used": 9}
}

test_fixtures_all_pass if {
	failed := {name |
		some name, fx in data.fixtures.quota_check
		fx.want_result
		quota_check.decision != fx.want_result with input as fx.input
	}
	count(failed) == 0
}
