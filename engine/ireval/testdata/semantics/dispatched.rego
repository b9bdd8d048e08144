package semantics.dispatched

import rego.v1

result := data.semantics.dispatch.handlers[input.handler]
