# CallDynamicStmt: a data reference whose key is only known at run time.
package semantics.dispatch.handlers

import rego.v1

a := "handler a"

b := sprintf("handler b for %s", [input.user.name])
