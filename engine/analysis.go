package engine

import (
	"bytes"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/ir"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Analysis is what a static analysis of one decision of a revision (the
// semantic diff, package diff) reads: the decision's plan (the IR the
// compiled evaluator runs), the data document, and the schemas.
type Analysis struct {
	// Plan is OPA's plan of the decision's query, named Entry; nil when
	// the planner refused it (PlanError says why).
	Plan      *ir.Policy
	Entry     string
	PlanError string
	Data      ast.Value
	// InputSchema and ResultSchema are the schema documents as loaded
	// (numbers as json.Number).
	InputSchema, ResultSchema any
	// Valid reports whether an input document (JSON text) satisfies the
	// decision's input schema, by the library's compiled schema.
	Valid func(doc []byte) bool
}

// Analysis returns the analysis view of decision name, false when the
// Snapshot has no such decision.
func (s *Snapshot) Analysis(name string) (Analysis, bool) {
	def, ok := s.decisions[name]
	if !ok {
		return Analysis{}, false
	}
	data, err := ast.InterfaceToValue(s.data)
	if err != nil {
		return Analysis{}, false
	}
	valid := func(doc []byte) bool {
		v, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
		return err == nil && def.inputSchema.Validate(v) == nil
	}
	return Analysis{Plan: def.plan, Entry: "decisions/" + name + "/decision", PlanError: def.planErr, Data: data,
		InputSchema: def.inputDoc, ResultSchema: def.resultDoc, Valid: valid}, true
}
