# METADATA
# title: Quota check
# description: A decision that exists only in engine tests, to prove that a decision is added with files alone.
# scope: package
# schemas:
#   - input: schema.quota_check.input
package decisions.quota_check

# METADATA
# title: Quota exhausted
# description: The tenant has used its whole quota.
failures contains [1, "quota_exhausted"] if input.used >= data.decisions.quota_check.limit

# METADATA
# title: Tenant suspended
# description: The tenant is suspended.
failures contains [2, "tenant_suspended"] if input.suspended == true

reasons := [code | some [_, code] in sort(failures)]

decision := {"allow": count(reasons) == 0, "reasons": reasons}
