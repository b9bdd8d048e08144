# METADATA
# title: Failure disposition
# description: >-
#   What to do with a run whose native session failed: retry it after a delay, or
#   fail it for good. The first matching row decides; the permanent codes and the
#   retry budget are data (data.json beside this file).
# schemas:
#   - input: schema.failure_disposition.input
package decisions.failure_disposition

import data.lib.retry_budget

# The result document of the contract, built from the first matching row.
decision := {
	"disposition": disposition,
	"code": code,
	"retryAfterSeconds": retry_after,
	"reasons": [row],
}

# Each row rule adds [rank, code]; the lowest rank is the first matching row.
# Rows 2 and 3 are complements, so some row always matches.
row := sort(rows)[0][1]

default disposition := "terminal_failure"

disposition := "retryable_failure" if row == "retry_within_budget"

default code := "native_session_interrupted"

code := input.failureCode if {
	row == "permanent_failure_code"
} else := "native_session_retry_exhausted" if {
	row == "retry_budget_exhausted"
}

default retry_after := null

retry_after := data.decisions.failure_disposition.retry_after_seconds if row == "retry_within_budget"

# METADATA
# title: Permanent failure code
# description: >-
#   The failure code is on the permanent list (data.json): retrying cannot help, so
#   the run fails with that code.
rows contains [1, "permanent_failure_code"] if {
	input.failureCode in data.decisions.failure_disposition.permanent_codes
}

# METADATA
# title: Retry budget exhausted
# description: >-
#   This was the last attempt the retry budget (max_attempts in data.json) allows,
#   so the run fails as native_session_retry_exhausted.
rows contains [2, "retry_budget_exhausted"] if retry_budget.exhausted(input.attempt)

# METADATA
# title: Retry within budget
# description: >-
#   The failure is not permanent and the retry budget is not spent, so the run is
#   retried after retry_after_seconds.
rows contains [3, "retry_within_budget"] if retry_budget.within_budget(input.attempt)
