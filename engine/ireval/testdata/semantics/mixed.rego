# ObjectMergeStmt: a package whose extent mixes base documents (data.json)
# and rules.
package semantics.limits

import rego.v1

computed := input.user.points * 2
