package input

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/big"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
)

func TestCanonicalNumber(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"0", "0"}, {"-0", "0"}, {"0.000", "0"}, {"-0.0e-5", "0"}, {"0e999", "0"},
		{"1000", "1000"}, {"1e3", "1000"}, {"1000.0", "1000"}, {"1.000E+3", "1000"}, {"10000e-1", "1000"},
		{"1.000000000000000001E+18", "1000000000000000001"},
		{"18446744073709551615.000", "18446744073709551615"},
		{"1.8446744073709551615e19", "18446744073709551615"},
		{"1000000000000000000.0e0", "1000000000000000000"},
		{"-12.50", "-125e-1"}, {"1.5", "15e-1"}, {"0.001", "1e-3"}, {"123.456e1", "123456e-2"},
		{"1e39", "1000000000000000000000000000000000000000"},
		{"1e40", "1e40"}, {"1e300", "1e300"}, {"-2.5e300", "-25e299"}, {"1e-999", "1e-999"},
		{"12345678901234567890123456789012345678901", "12345678901234567890123456789012345678901"[:41]},
	} {
		got, ok := CanonicalNumber(tc.in)
		want := tc.want
		if len(want) == 41 { // 41 digits: past MaxPlainDigits, so digits and an exponent
			want = want + "e0"
		}
		if !ok || got != want {
			t.Errorf("CanonicalNumber(%s) = %q, %v; want %q", tc.in, got, ok, want)
		}
	}
	for _, bad := range []string{"", "01", "+1", "1.", ".5", "1e", "NaN", "1e1000", "0x10", "1 "} {
		if got, ok := CanonicalNumber(bad); ok {
			t.Errorf("CanonicalNumber(%q) = %q; want a refusal", bad, got)
		}
	}
}

// literal writes the value digits*10^exp (digits without sign) in a random
// JSON form: plain, with a fraction, with an exponent, with padding zeros.
func literal(r *rand.Rand, neg bool, digits string, exp int) string {
	// Move the decimal point: value = digits * 10^exp = d.ddd * 10^(exp+len-1), etc.
	shift := r.IntN(len(digits)+3) - 1 // where the point goes within the digits
	if shift > len(digits) {
		shift = len(digits)
	}
	if shift < 0 {
		shift = 0
	}
	intPart, frac := digits[:shift], digits[shift:]
	e := exp + len(frac)
	if intPart == "" {
		intPart = "0"
	}
	intPart = strings.TrimLeft(intPart, "0")
	if intPart == "" {
		intPart = "0"
	}
	pad := strings.Repeat("0", r.IntN(3))
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	b.WriteString(intPart)
	if frac != "" || r.IntN(3) == 0 {
		b.WriteString("." + frac + pad)
		if frac == "" && pad == "" {
			b.WriteString("0")
		}
	}
	if e != 0 || r.IntN(3) == 0 {
		b.WriteString([]string{"e", "E"}[r.IntN(2)])
		switch {
		case e < 0:
			b.WriteString(fmt.Sprint(e))
		case r.IntN(2) == 0:
			b.WriteString("+" + fmt.Sprint(e))
		default:
			b.WriteString(fmt.Sprint(e))
		}
	}
	return b.String()
}

// randomValue returns the digits and exponent of a random value, mostly
// integers up to and past u64, some non-integers, with ties common.
func randomValue(r *rand.Rand) (string, int) {
	bases := []string{"18446744073709551615", "18446744073709551616", "1000000000000000000", "1000000000000000001",
		"9007199254740993", "9007199254740992", "3", "2", "1", "0", "5", "123456789012345678901234567890"}
	d := bases[r.IntN(len(bases))]
	if r.IntN(4) == 0 {
		d = fmt.Sprint(r.Uint64())
	}
	exp := 0
	switch r.IntN(6) {
	case 0:
		exp = -r.IntN(4) // a fraction
	case 1:
		exp = r.IntN(3)
	}
	return d, exp
}

// TestNumberOrderIsExact orders random pairs of literals (any JSON form, up
// to u64 and beyond) with the comparison a policy gets (OPA's, on the values
// Parse builds) and with big.Rat, and finds no difference. Before numbers
// were made canonical, OPA ordered 1000000000000000000.0e0 and
// 1000000000000000001.0e0 as equal.
func TestNumberOrderIsExact(t *testing.T) {
	r := rand.New(rand.NewPCG(8, 8))
	s := NewSchema(compileDoc(t, "any.json", map[string]any{"type": "object"}))
	n := 20000
	if testing.Short() {
		n = 2000
	}
	for i := 0; i < n; i++ {
		d1, e1 := randomValue(r)
		d2, e2 := d1, e1
		switch r.IntN(3) {
		case 0: // a neighbour: float64 cannot tell the two apart
			n, _ := new(big.Int).SetString(d1, 10)
			d2 = n.Add(n, big.NewInt(1)).String()
		case 1:
			d2, e2 = randomValue(r)
		}
		neg1, neg2 := r.IntN(5) == 0, r.IntN(5) == 0
		a, b := literal(r, neg1, d1, e1), literal(r, neg2, d2, e2)
		in, err := Parse(context.Background(), []byte(`{"a":`+a+`,"b":`+b+`}`), s, Options{})
		if err != nil {
			t.Fatalf("%s, %s: %v", a, b, err)
		}
		obj := in.Value.(ast.Object)
		got := ast.Compare(obj.Get(ast.StringTerm("a")), obj.Get(ast.StringTerm("b")))
		ra, _ := new(big.Rat).SetString(a)
		rb, _ := new(big.Rat).SetString(b)
		if want := ra.Cmp(rb); sign(got) != want {
			t.Fatalf("OPA orders %s and %s (canonical %v, %v) as %d; exactly they are %d", a, b,
				obj.Get(ast.StringTerm("a")), obj.Get(ast.StringTerm("b")), got, want)
		}
		if ra.Cmp(rb) == 0 && obj.Get(ast.StringTerm("a")).Hash() != obj.Get(ast.StringTerm("b")).Hash() {
			t.Fatalf("%s and %s are equal but hash differently", a, b)
		}
	}
}

func sign(c int) int {
	switch {
	case c < 0:
		return -1
	case c > 0:
		return 1
	}
	return 0
}

// TestCanonicalNumbersInRego evaluates what policies do with numbers (Rego
// comparison, equality, set membership, array indexes, arithmetic) on
// values Parse builds from non-canonical literals, with OPA itself.
func TestCanonicalNumbersInRego(t *testing.T) {
	s := NewSchema(compileDoc(t, "any.json", map[string]any{"type": "object"}))
	body := `{"big": 1000000000000000001.0e0, "bigger": 1.000000000000000002E+18, "three": 30e-1, "idx": 1.0e0,
	"u64": 18446744073709551615.000, "half": 0.50, "arr": ["a", "b"]}`
	in, err := Parse(context.Background(), []byte(body), s, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`input.big < input.bigger`,
		`input.bigger > input.big`,
		`input.big != input.bigger`,
		`input.three == 3`,
		`3 in {input.three}`,
		`{input.three: true}[3]`,
		`input.arr[input.idx] == "b"`,
		`input.u64 == 18446744073709551615`,
		`input.u64 - 1 == 18446744073709551614`,
		`input.half * 2 == 1`,
		`input.half < 1`,
		`input.half > 0.4999999999999999999999`,
	} {
		rs, err := rego.New(rego.Query(q), rego.ParsedInput(in.Value)).Eval(context.Background())
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		if !rs.Allowed() {
			t.Errorf("%s does not hold on %s (built %v)", q, body, in.Value)
		}
	}
}

// TestNumbersBeyondTheEngine: a number literal beyond MaxNumberLength or
// MaxExponentDigits is valid JSON that the engine does not represent. In
// every place, typed by the schema or free-form, on the streamed path and
// the library's, in a Data API body too, it is one violation at the
// number's pointer, whatever its length; a number within the limits is
// judged by the schema alone. Before, 400 fraction digits were
// malformed_json while 300 were a schema violation.
func TestNumbersBeyondTheEngine(t *testing.T) {
	props := map[string]any{
		"count": map[string]any{"type": "integer", "minimum": 0},
		"ratio": map[string]any{"type": "number"},
		"state": map[string]any{"type": "object"}, // free-form
	}
	streamed := NewSchema(compileDoc(t, "n.json", map[string]any{"type": "object", "properties": props, "additionalProperties": false}))
	libProps := maps.Clone(props)
	libProps["kids"] = map[string]any{"type": "array", "items": map[string]any{"$dynamicRef": "#node"}}
	library := NewSchema(compileDoc(t, "n-lib.json", map[string]any{
		"$schema": "https://json-schema.org/draft/2020-12/schema", "$dynamicAnchor": "node",
		"type": "object", "properties": libProps, "additionalProperties": false,
	}))
	if ok, _ := streamed.Streaming(); !ok {
		t.Fatal("the streamed schema is left to the library")
	}
	if ok, _ := library.Streaming(); ok {
		t.Fatal("the library's schema is streamed")
	}
	places := map[string]func(lit string) string{ // pointer -> body
		"/count":        func(l string) string { return `{"count": ` + l + `}` },
		"/ratio":        func(l string) string { return `{"ratio": ` + l + `, "count": 1}` },
		"/state/deep/x": func(l string) string { return `{"state": {"deep": {"x": ` + l + `}}}` },
		"/state/list/1": func(l string) string { return `{"state": {"list": [0, ` + l + `]}}` },
		"/state/a~1b~0": func(l string) string { return `{"state": {"a/b~": ` + l + `}}` },
	}
	tests := []struct {
		name, lit string
		beyond    bool
	}{
		{"300 fraction digits", "0." + strings.Repeat("1", 300), false},
		{"400 characters", "1" + strings.Repeat("0", 399), false},
		{"exponent of 3 digits", "1e999", false},
		{"400 fraction digits", "0." + strings.Repeat("1", 400), true},
		{"401 characters", "1" + strings.Repeat("0", 400), true},
		{"10,000 digits", strings.Repeat("7", 10_000), true},
		{"10,000 fraction digits, negative", "-1." + strings.Repeat("3", 10_000), true},
		{"exponent of 9 digits", "1e999999999", true},
		{"exponent of 4 digits, negative", "-2.5E-1000", true},
	}
	for _, tc := range tests {
		for place, body := range places {
			for sname, s := range map[string]*Schema{"streamed": streamed, "library": library} {
				for _, wrapped := range []bool{false, true} {
					b := body(tc.lit)
					if wrapped {
						b = `{"input": ` + b + `}`
					}
					_, err := Parse(context.Background(), []byte(b), s, Options{DataAPIBody: wrapped})
					var inv *InvalidError
					errors.As(err, &inv)
					limit := inv != nil && slices.ContainsFunc(inv.Violations, func(v Violation) bool { return v.Message == numberLimitMessage })
					switch {
					case tc.beyond && (inv == nil || len(inv.Violations) != 1 || inv.Violations[0] != Violation{Path: place, Message: numberLimitMessage}):
						t.Errorf("%s at %s (%s, data API %v): %v; want one violation at %s: %s", tc.name, place, sname, wrapped, err, place, numberLimitMessage)
					case !tc.beyond && limit:
						t.Errorf("%s at %s (%s, data API %v): %v; within the limits", tc.name, place, sname, wrapped, err)
					case !tc.beyond && place != "/count" && err != nil:
						t.Errorf("%s at %s (%s, data API %v): %v; want it accepted", tc.name, place, sname, wrapped, err)
					}
				}
			}
		}
	}
	// The body is still read to its end: a syntax error after the number
	// is malformed JSON.
	for _, s := range []*Schema{streamed, library} {
		var syn *SyntaxError
		if _, err := Parse(context.Background(), []byte(`{"state": {"x": 1e99999, "x": 1}}`), s, Options{}); !errors.As(err, &syn) {
			t.Errorf("a duplicate key after a number beyond the limits: %v; want a syntax error", err)
		}
	}
}
