package engine

import (
	"bytes"
	"encoding/json"
	"regexp"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/ir"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/arbiter-dev/arbiter/engine/input"
)

// Snapshot is everything needed to decide, compiled once and never mutated:
// requests hold on to the Snapshot they started with while a reload builds
// the next one.
type Snapshot struct {
	Revision string    // content hash of every policy, data and schema file, or a bundle's manifest revision
	Hash     string    // content hash of every policy, data and schema file
	Files    []string  // the files it was built from
	LoadedAt time.Time // when it was built
	Origin   string    // where it came from (its live.Source), set as it is built
	// Skipped lists the files with a policy extension that were not read.
	Skipped []SkippedFile
	// Gated is true when the policy tests and fixtures of a test folder
	// passed against this Snapshot before it was returned.
	Gated bool

	decisions map[string]*decisionDef
	names     []string
	timeout   time.Duration
	// testTimeout replaces timeout while the gate runs fixtures.
	testTimeout time.Duration
	maxValues   int
	selfCheck   func(Recheck) // Config.SelfCheck (engine/compiled.go)

	// The data document, for Analysis.
	data map[string]any
	// carriedDiff is the diff report its bundle carried (FileSet.Diff).
	carriedDiff []byte

	// The bytes it was built from, for SaveTo: policies, schemas, and the
	// tests that gated it (when a test folder was configured).
	policySrc, schemaSrc, testSrc []sourceFile
}

// decisionDef is one decision of a Snapshot.
type decisionDef struct {
	name        string
	title       string
	description string
	inputSchema *jsonschema.Schema
	input       *input.Schema // the input schema, prepared for the one-pass walk
	result      *jsonschema.Schema
	valid       validResults // results that passed result, by their encoding
	inputDoc    any          // the input schema as loaded, for GET /v1/decisions
	resultDoc   any
	outcomeKey  string   // result member that labels metrics, see OutcomeKeyword
	runID       []string // members that lead to the run id in the input, see RunIDKeyword
	query       rego.PreparedEvalQuery
	rules       []RuleInfo
	reads       []ruleEvidence    // per rule, what it reads of the input (evidence.go)
	compiled    *compiledDecision // engine/compiled.go
	// plan is the decision's plan (OPA's IR), for Analysis; nil when the
	// planner refused it, planErr says why.
	plan    *ir.Policy
	planErr string
}

// RuleInfo describes one reason rule of a decision, taken from its METADATA.
type RuleInfo struct {
	Rank        json.Number `json:"rank"`
	Reason      string      `json:"reason"`
	Title       string      `json:"title"`
	Description string      `json:"description,omitempty"`
	File        string      `json:"file"`
	Line        int         `json:"line"`
}

// DecisionInfo is the public description of one decision.
type DecisionInfo struct {
	Name         string     `json:"name"`
	Title        string     `json:"title,omitempty"`
	Description  string     `json:"description,omitempty"`
	Path         string     `json:"path"`
	InputSchema  any        `json:"input_schema"`
	ResultSchema any        `json:"result_schema"`
	Rules        []RuleInfo `json:"rules"`
}

// Decisions lists the decisions of the Snapshot, sorted by name.
func (s *Snapshot) Decisions() []DecisionInfo {
	out := make([]DecisionInfo, 0, len(s.names))
	for _, n := range s.names {
		d := s.decisions[n]
		out = append(out, DecisionInfo{
			Name: n, Title: d.title, Description: d.description,
			Path:        "/v1/data/decisions/" + n + "/decision",
			InputSchema: d.inputDoc, ResultSchema: d.resultDoc, Rules: d.rules,
		})
	}
	return out
}

// CarriedDiff is the report of the semantic diff of this revision against
// another that its bundle carried (`arbiter build --diff-against`), nil
// when none: package diff reads it.
func (s *Snapshot) CarriedDiff() []byte { return s.carriedDiff }

// Names lists the decision names, sorted.
func (s *Snapshot) Names() []string { return append([]string(nil), s.names...) }

// OutcomeKeyword is the result-schema keyword naming the result member that
// labels a decision's outcome in metrics (default "outcome").
const OutcomeKeyword = "x-arbiter-outcome"

var decisionName = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

// Has reports whether the Snapshot serves a decision of that name.
func (s *Snapshot) Has(name string) bool {
	_, ok := s.decisions[name]
	return ok
}

// sourceFile is one file read into memory: everything of a Snapshot is built
// from one read of each file, so the revision names exactly what is compiled.
type sourceFile struct {
	path string // as shown to users: the configured folder joined with rel
	rel  string // slash-separated, relative to the folder
	data []byte
}

// SkippedFile is a file with a policy extension that was not read because it
// is not a regular file (a FIFO, a device, a socket, a symlink to one of
// them): reading one can block forever or never end.
type SkippedFile struct {
	File   string `json:"file"`
	Reason string `json:"reason"`
}

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
