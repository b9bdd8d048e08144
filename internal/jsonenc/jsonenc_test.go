package jsonenc

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
)

// TestAppendValueAgreesWithEncodingJSON: the bytes are what encoding/json
// writes for OPA's own conversion of the value (ast.JSON), sets as arrays.
func TestAppendValueAgreesWithEncodingJSON(t *testing.T) {
	for _, src := range []string{
		`{"b": 1, "a": [true, null, "x\"y\u2028"], "c": {"z": 1.5e3, "y": {}}}`,
		`{"allow": false, "reasons": ["z", "a"], "error": null}`,
		`{"s": {3, 1, 2}, "n": -0, "big": 18446744073709551616}`,
		`"é\u0001"`,
		`[]`,
	} {
		v := ast.MustParseTerm(src).Value
		got, err := AppendValue(nil, v)
		if err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		doc, err := ast.JSON(v)
		if err != nil {
			t.Fatal(err)
		}
		want, err := json.Marshal(doc)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Errorf("%s:\n got  %s\n want %s", src, got, want)
		}
	}
}

func TestAppendValueRefusesWhatJSONLacks(t *testing.T) {
	for _, src := range []string{`{1: "a"}`, `{"a": {["k"]: 1}}`} {
		if out, err := AppendValue(nil, ast.MustParseTerm(src).Value); err == nil {
			t.Errorf("%s encoded as %s; want an error", src, out)
		}
	}
	if out, err := AppendValue(nil, ast.Number("1.")); err == nil {
		t.Errorf("the number 1. encoded as %s; want an error", out)
	}
}

// TestAppendString: what encoding/json writes with HTML escaping off, for
// quotes, control characters, invalid UTF-8 and the JavaScript line
// separators.
func TestAppendString(t *testing.T) {
	for _, s := range []string{"", "plain", `q"uote`, `back\slash`, "ctl\x00\x01\n\t\r\x1f", "é漢字🙂", "bad\xffutf8\xc3", "<html>&", "ls\u2028ps\u2029"} {
		var want bytes.Buffer
		enc := json.NewEncoder(&want)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(s); err != nil {
			t.Fatal(err)
		}
		if got := AppendString(nil, s); string(got) != strings.TrimSuffix(want.String(), "\n") {
			t.Errorf("%q:\n got  %s\n want %s", s, got, want.String())
		}
	}
}

func TestCompact(t *testing.T) {
	for in, want := range map[string]string{
		"{ \"a\" : [1, 2.50] }\n": `{"a":[1,2.50]}`,
		"not json { ":             "not json { ",
	} {
		if got := Compact([]byte(in)); got != want {
			t.Errorf("Compact(%q) = %q, want %q", in, got, want)
		}
	}
}
