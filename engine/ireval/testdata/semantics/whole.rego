package semantics.whole

import rego.v1

limits := data.semantics.limits
