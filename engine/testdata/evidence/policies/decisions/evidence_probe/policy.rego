# METADATA
# title: Evidence probe
# description: >-
#   A decision that exists only in engine tests: every way a reason rule can
#   read the input, for the evidence analysis (engine/evidence.go).
# scope: package
# schemas:
#   - input: schema.evidence_probe.input
package decisions.evidence_probe

import data.lib.probe
import input.account as acct

reasons := [code | some [_, code] in sort(failures)]

decision := {"allow": count(reasons) == 0, "reasons": reasons}

# A helper with two bodies: both are read, whichever decided.
overdrawn if input.account.balance < 0

overdrawn if input.account.limits.hard == true

# An else chain: every branch is read.
tier := "gold" if {
	input.account.points > 100
} else := "silver" if {
	input.account.points > 10
} else := "bronze"

# A helper that reads the set of reasons is not evidence of any reason.
summary := count(failures)

# METADATA
# title: Overdrawn
# description: The balance is negative or the hard limit is hit.
failures contains [1, "overdrawn"] if overdrawn

# METADATA
# title: Bronze tier
# description: Too few points.
failures contains [2, "bronze_tier"] if tier == "bronze"

# METADATA
# title: Region blocked
# description: A local variable bound to the input, then read below.
failures contains [3, "region_blocked"] if {
	a := input.account
	a.region in data.decisions.evidence_probe.blocked_regions
}

# METADATA
# title: Name too long
# description: A function of a library package, given an input value.
failures contains [4, "name_too_long"] if probe.too_long(input.account.name)

# METADATA
# title: Frozen
# description: An imported input reference.
failures contains [5, "frozen"] if acct.frozen

# METADATA
# title: Bad tag
# description: A reference with a variable is read up to the variable.
failures contains [6, "bad_tag"] if {
	some tag in input.account.tags
	tag == "bad"
}

# METADATA
# title: Large first payment
# description: A constant array index and a key that needs escaping.
failures contains [7, "large_first_payment"] if {
	input.account.history[0].amount > 1000
	input.account["a/b~c"] == true
}

# METADATA
# title: VIP override missing
# description: A rule of a library package that reads the input itself.
failures contains [8, "vip_override_missing"] if {
	probe.vip
	not input.override
}

# METADATA
# title: Crowded account
# description: A read of a whole object, summarised when its text is long.
failures contains [9, "crowded_account"] if count(input.account) >= 7
