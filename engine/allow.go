package engine

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/arbiter-dev/arbiter/internal/jsonptr"
)

// AllowKeyword is the result-schema keyword that lists the values of the
// outcome member (the member OutcomeKeyword names) which allow what the
// caller asked, for example "x-arbiter-allow": ["admit"] for an outcome
// member whose values are "admit" and "deny".
// Every other value, a result without the member, and every error refuse:
// an error is never an allowance.
//
// It is what shadow evaluation and replay read to tell a refusal that
// became an allowance (the dangerous change) from any other change. A
// decision whose result schema lacks it has no notion of allowance there:
// its changes are only ever classified as reasons, errors or other
// members changing. Nothing in Go knows which decision allows what.
const AllowKeyword = "x-arbiter-allow"

// Verdict says how to read allowance out of one decision's results.
type Verdict struct {
	// OutcomeKey is the result member that labels the outcome.
	OutcomeKey string
	// Allow lists the outcome values that allow (strings or booleans).
	Allow []any
	// Declared is false when the result schema has no AllowKeyword.
	Declared bool
}

// Verdict returns how to read allowance out of the results of the decision
// name, and false when the Snapshot has no such decision.
func (s *Snapshot) Verdict(name string) (Verdict, bool) {
	def, ok := s.decisions[name]
	if !ok {
		return Verdict{}, false
	}
	v := Verdict{OutcomeKey: def.outcomeKey}
	obj, _ := def.resultDoc.(map[string]any)
	v.Allow, v.Declared = obj[AllowKeyword].([]any)
	return v, true
}

// Outcome returns the JSON text of result's outcome member, nil when
// result is not an object or has no such member.
func (v Verdict) Outcome(result []byte) json.RawMessage {
	var obj map[string]json.RawMessage
	if json.Unmarshal(result, &obj) != nil {
		return nil
	}
	return bytes.TrimSpace(obj[v.OutcomeKey])
}

// Allows reports whether result allows: its outcome member holds one of
// the values the schema lists. Without the keyword nothing allows, and
// known is false.
func (v Verdict) Allows(result []byte) (allowed, known bool) {
	if !v.Declared {
		return false, false
	}
	var got any
	if json.Unmarshal(v.Outcome(result), &got) != nil {
		return false, true
	}
	switch got.(type) {
	case string, bool: // what checkAllow lets the list hold
		return slices.Contains(v.Allow, got), true
	}
	return false, true
}

// checkAllow is part of the gate: a misspelt allowed value would make
// every allowance look like a refusal to shadow evaluation and replay, and
// hide exactly the change they exist to show. Each listed value must be a
// string or a boolean that the outcome member's own schema (properties.KEY
// of the result schema) accepts, checked by the schema library.
func checkAllow(path string, doc any, outcomeKey string) []Problem {
	obj, _ := doc.(map[string]any)
	raw, ok := obj[AllowKeyword]
	if !ok {
		return nil
	}
	list, ok := raw.([]any)
	if !ok {
		return []Problem{{File: path, Message: fmt.Sprintf("%s must be an array of the outcome values that allow", AllowKeyword)}}
	}
	props, _ := obj["properties"].(map[string]any)
	if _, ok := props[outcomeKey]; !ok {
		return []Problem{{File: path, Message: fmt.Sprintf("%s needs the outcome member %q declared under properties", AllowKeyword, outcomeKey)}}
	}
	// The member alone, compiled from the document discover compiled whole.
	member, err := compileSchema(path, doc, "#/properties/"+pointerToken(outcomeKey))
	if err != nil {
		return []Problem{{File: path, Message: err.Error()}}
	}
	var probs []Problem
	for _, v := range list {
		switch v.(type) {
		case string, bool:
		default:
			probs = append(probs, Problem{File: path, Message: fmt.Sprintf("%s lists %v: only strings and booleans can name an outcome", AllowKeyword, v)})
			continue
		}
		if err := member.Validate(v); err != nil {
			text, _ := json.Marshal(v) // a string or a boolean: it cannot fail
			probs = append(probs, Problem{File: path, Message: fmt.Sprintf("%s lists %s, which the outcome member %q cannot hold", AllowKeyword, text, outcomeKey)})
		}
	}
	return probs
}

// pointerToken escapes a member name for a JSON pointer inside a URL
// fragment.
func pointerToken(s string) string {
	return strings.NewReplacer("%", "%25", "#", "%23", " ", "%20").Replace(jsonptr.Escape(s))
}
