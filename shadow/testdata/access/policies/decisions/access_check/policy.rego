# METADATA
# title: Access check
# description: A decision that exists only in the shadow tests. A refusal carries an error string taken from data, as a caller would surface it.
# scope: package
# schemas:
#   - input: schema.access_check.input
package decisions.access_check

# METADATA
# title: Quota exhausted
# description: The tenant has used its whole quota.
failures contains [1, "quota_exhausted"] if input.used >= data.decisions.access_check.limit

# METADATA
# title: Tenant suspended
# description: The tenant is suspended.
failures contains [2, "tenant_suspended"] if input.suspended == true

reasons := [code | some [_, code] in sort(failures)]

decision := {"outcome": "admit", "reasons": [], "error": null} if count(reasons) == 0

decision := {"outcome": "deny", "reasons": reasons, "error": data.decisions.access_check.denied_error} if count(reasons) > 0
