package decisionstore

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/arbiter-dev/arbiter/engine/input"
	"github.com/arbiter-dev/arbiter/internal/jsonenc"
	"github.com/arbiter-dev/arbiter/internal/jsonptr"
)

// Filter selects stored records; an empty field matches everything. It is
// the /ui pages' filter, plus what only a store of every replica has.
type Filter struct {
	Decision string
	Outcome  string
	Reason   string // among the record's reasons, or its error code
	Revision string // a prefix of the policy revision
	Caller   string
	Replica  string
	Path     string    // the request path, exactly
	Since    time.Time // at or after
	Until    time.Time // before
	// Input are input fields that must hold a value, all of them.
	Input []InputMatch
	// Kinds are the kinds of record (KindDecision, KindShadow,
	// KindPromotion); nil means decisions only.
	Kinds []string
	// AnyInput, when set, selects the records of which at least one
	// holds: the decision is AnyInput[i].Decision and its input holds
	// AnyInput[i].Match. A run's decisions are this: each decision names
	// its run id at a pointer of its own (its input schema's
	// x-arbiter-run-id), and a run spans decisions. Each match is a
	// containment of the input, which the GIN index answers.
	AnyInput []DecisionInput
}

// DecisionInput is an input match within one decision's inputs.
type DecisionInput struct {
	Decision string
	Match    InputMatch
}

// MatchesAny reports whether a record of decision with that input passes
// AnyInput (true when AnyInput is empty), as the store's query does.
func (f Filter) MatchesAny(decision string, input []byte) bool {
	return len(f.AnyInput) == 0 || slices.ContainsFunc(f.AnyInput, func(m DecisionInput) bool {
		return m.Decision == decision && m.Match.Match(input)
	})
}

// InputMatch is one input field and the value it must hold: the filter
// "/run/runId = run-7f3a". It is read as containment in the input
// (input @> '{"run":{"runId":"run-7f3a"}}', which the GIN index answers),
// so the value is a scalar and the pointer names object members only: an
// array index cannot be said as containment without matching any element.
type InputMatch struct {
	Pointer string          // as typed, RFC 6901
	Tokens  []string        // its object members, unescaped
	Value   json.RawMessage // a JSON scalar
}

// ParseInputMatch reads "POINTER = VALUE" (spaces around "=" optional; the
// first "=" ends the pointer, so a member named with "=" cannot be
// filtered on). The value is JSON when it is a JSON scalar (42, true, null,
// "42" with its quotes) and a string otherwise: run-7f3a is the string
// "run-7f3a", 42 is the number; quote it ("42") for the string. Objects
// and arrays are refused, and so are pointers with an array index (a
// token of digits, or "-"), a "~" not followed by 0 or 1, or no token. A
// number beyond what the engine represents (input.CanonicalNumber: 400
// characters, 3 exponent digits) is refused too: those bounds lie inside
// what PostgreSQL's numeric takes (an exponent of at most 1000), so a
// filter never reaches the database as one it cannot compare (1e999999
// was a database error).
func ParseInputMatch(s string) (InputMatch, error) {
	ptr, val, ok := strings.Cut(s, "=")
	if !ok {
		return InputMatch{}, fmt.Errorf("input filter %q: want POINTER = VALUE, as /run/runId = run-7f3a", s)
	}
	ptr, val = strings.TrimSpace(ptr), strings.TrimSpace(val)
	toks, err := jsonptr.Split(ptr)
	if err != nil {
		return InputMatch{}, fmt.Errorf("input filter: %w", err)
	}
	if len(toks) == 0 {
		return InputMatch{}, fmt.Errorf("input filter %q: the pointer must name a field, as /run/runId", s)
	}
	for _, t := range toks {
		if t == "-" || isIndex(t) {
			return InputMatch{}, fmt.Errorf("input filter %q: %q is an array index; a filter names object members only", s, t)
		}
	}
	m := InputMatch{Pointer: ptr, Tokens: toks}
	switch v := []byte(val); {
	case json.Valid(v) && isNumber(v):
		if _, ok := input.CanonicalNumber(val); !ok {
			return InputMatch{}, fmt.Errorf("input filter %q: a number beyond what a filter compares: at most %d characters, with at most %d exponent digits", s, input.MaxNumberLength, input.MaxExponentDigits)
		}
		m.Value = json.RawMessage(val)
	case json.Valid(v) && len(v) > 0 && v[0] != '{' && v[0] != '[':
		m.Value = json.RawMessage(jsonenc.Compact(v))
	case json.Valid(v):
		return InputMatch{}, fmt.Errorf("input filter %q: the value must be a string, number, true, false or null", s)
	default:
		m.Value = jsonenc.AppendString(nil, val)
	}
	return m, nil
}

// isNumber reports whether valid JSON v is a number.
func isNumber(v []byte) bool { return v[0] == '-' || v[0] >= '0' && v[0] <= '9' }

// isIndex reports whether a token reads as an array index.
func isIndex(t string) bool { return t != "" && strings.Trim(t, "0123456789") == "" }

// String is the filter as ParseInputMatch reads it back.
func (m InputMatch) String() string { return m.Pointer + " = " + string(m.Value) }

// document is the JSON the input must contain: the value nested in the
// pointer's members.
func (m InputMatch) document() []byte {
	var b bytes.Buffer
	for _, t := range m.Tokens {
		b.WriteByte('{')
		b.Write(jsonenc.AppendString(nil, t))
		b.WriteByte(':')
	}
	b.Write(m.Value)
	b.WriteString(strings.Repeat("}", len(m.Tokens)))
	return b.Bytes()
}

// Match reports whether input holds the value at the pointer, as the
// store's containment test does: each token an object member, the value
// equal (numbers by value: 42 is 42.0). The ring of a server without a
// store filters with it, so that a filter means the same on both.
func (m InputMatch) Match(in []byte) bool {
	var doc any
	dec := json.NewDecoder(bytes.NewReader(in))
	dec.UseNumber()
	if dec.Decode(&doc) != nil {
		return false
	}
	for _, t := range m.Tokens {
		obj, ok := doc.(map[string]any)
		if !ok {
			return false
		}
		if doc, ok = obj[t]; !ok {
			return false
		}
	}
	var want any
	dec = json.NewDecoder(bytes.NewReader(m.Value))
	dec.UseNumber()
	if dec.Decode(&want) != nil {
		return false
	}
	if a, ok := doc.(json.Number); ok {
		b, ok := want.(json.Number)
		if !ok {
			return false
		}
		x, okx := input.CanonicalNumber(string(a))
		y, oky := input.CanonicalNumber(string(b))
		return okx && oky && x == y // exact, as numeric is
	}
	return doc == want
}
