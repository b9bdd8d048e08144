# Helpers shared by the decisions that count attempts against one retry budget:
# data.decisions.failure_disposition.max_attempts, which reliability engineers edit.
package lib.retry_budget

# within_budget holds when attempt is below the configured budget. A missing or
# non-numeric budget is never "within": both decisions then fail closed.
within_budget(attempt) if {
	max_attempts := data.decisions.failure_disposition.max_attempts
	is_number(max_attempts)
	attempt < max_attempts
}

# exhausted is the negation, spelled out so callers cannot get the polarity of
# an undefined budget wrong.
exhausted(attempt) if not within_budget(attempt)
