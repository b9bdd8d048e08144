package input

import (
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/arbiter-dev/arbiter/internal/testfiles"
)

func TestDecodeStrict(t *testing.T) {
	deep := strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1)
	okDeep := strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth)
	tests := []struct {
		name    string
		in      string
		want    any
		wantErr string // substring of the error; "" means success
	}{
		{name: "object", in: `{"a": 1, "b": [true, false, null], "c": "x"}`, want: map[string]any{"a": json.Number("1"), "b": []any{true, false, nil}, "c": "x"}},
		{name: "u64 max kept exactly", in: `18446744073709551615`, want: json.Number("18446744073709551615")},
		{name: "beyond u64 kept exactly", in: `18446744073709551616`, want: json.Number("18446744073709551616")},
		{name: "fraction and exponent", in: `[-0.5e+10, 1E3, 0]`, want: []any{json.Number("-0.5e+10"), json.Number("1E3"), json.Number("0")}},
		{name: "escapes", in: `"a\"\\\/\b\f\n\r\t\u00e9\ud83d\ude00"`, want: "a\"\\/\b\f\n\r\té😀"},
		{name: "raw utf-8", in: `"héllo"`, want: "héllo"},
		{name: "surrounding whitespace", in: " \t\r\n{}\n", want: map[string]any{}},
		{name: "max depth accepted", in: okDeep, want: nil},
		{name: "duplicate key", in: `{"lifecycle": "ready", "lifecycle": "suspended"}`, wantErr: `duplicate object key "lifecycle"`},
		{name: "nested duplicate key", in: `{"a": {"b": 1, "b": 1}}`, wantErr: "duplicate object key"},
		{name: "trailing data", in: `{} {}`, wantErr: "trailing data"},
		{name: "trailing garbage", in: `{}x`, wantErr: "trailing data"},
		{name: "empty", in: ``, wantErr: "empty body"},
		{name: "only whitespace", in: "  \n", wantErr: "empty body"},
		{name: "byte-order mark", in: "\xEF\xBB\xBF{}", wantErr: "byte-order mark"},
		{name: "invalid utf-8", in: "\"\xff\"", wantErr: "invalid UTF-8"},
		{name: "truncated utf-8", in: "\"\xe2\x82\"", wantErr: "invalid UTF-8"},
		{name: "lone high surrogate", in: `"\ud83d"`, wantErr: "unpaired surrogate"},
		{name: "lone low surrogate", in: `"\ude00"`, wantErr: "unpaired surrogate"},
		{name: "control char", in: "\"a\x01\"", wantErr: "control character"},
		{name: "NaN", in: `NaN`, wantErr: "unexpected character"},
		{name: "Infinity", in: `[Infinity]`, wantErr: "unexpected character"},
		{name: "minus Infinity", in: `-Infinity`, wantErr: "invalid number"},
		{name: "leading zero", in: `01`, wantErr: "trailing data"},
		{name: "plus sign", in: `+1`, wantErr: "unexpected character"},
		{name: "bare dot", in: `1.`, wantErr: "digit expected"},
		{name: "bad exponent", in: `1e`, wantErr: "digit expected in exponent"},
		{name: "single quotes", in: `{'a': 1}`, wantErr: "expected a string object key"},
		{name: "trailing comma", in: `[1,]`, wantErr: "unexpected character"},
		{name: "unterminated object", in: `{"a": 1`, wantErr: "unexpected end of input"},
		{name: "unterminated string", in: `"abc`, wantErr: "unterminated string"},
		{name: "bad escape", in: `"\x"`, wantErr: "invalid escape"},
		{name: "bad literal", in: `tru`, wantErr: "invalid literal"},
		{name: "too deep", in: deep, wantErr: "nesting deeper than"},
		{name: "comment", in: `{} // x`, wantErr: "trailing data"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Decode([]byte(tt.in))
			if tt.wantErr != "" {
				var se *SyntaxError
				if err == nil || !errors.As(err, &se) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Decode(%.40q) = %v, %v; want a SyntaxError containing %q", tt.in, got, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Decode(%.40q): %v", tt.in, err)
			}
			if tt.want != nil && !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("Decode(%.40q) = %#v, want %#v", tt.in, got, tt.want)
			}
		})
	}
}

// TestDecodeAgreesWithEncodingJSON checks that on documents both accept,
// our parser and encoding/json (UseNumber) build the same value.
func TestDecodeAgreesWithEncodingJSON(t *testing.T) {
	for _, in := range []string{
		`{"a":[1,2,{"b":"c\u0041"}],"d":-1.5e-3,"e":null}`,
		`"\u00e9\t"`,
		`[[[]],{}]`,
	} {
		got, err := Decode([]byte(in))
		if err != nil {
			t.Fatal(err)
		}
		dec := json.NewDecoder(strings.NewReader(in))
		dec.UseNumber()
		var want any
		if err := dec.Decode(&want); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: got %#v, want %#v", in, got, want)
		}
	}
}

// FuzzDecode: never panics, and whatever it accepts encoding/json
// accepts too and reads as the same value (so the policy and any other
// reader of the body agree on what it says).
func FuzzDecode(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":1,"a":2}`, `[1,2]`, `"\ud83d\ude00"`, "\xEF\xBB\xBF{}", `{"x":18446744073709551616}`, `[` + strings.Repeat("[", 50),
		`[1.0e0, 1000000000000000000.0e0, 1000000000000000001.0e0, -0.0, 1E+3, 18446744073709551615.000, 1.8446744073709551615e19, 15e-1]`} {
		f.Add([]byte(s))
	}
	for _, b := range testfiles.FuzzSeeds(f, fixtureBodies(f), 64) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := Decode(data)
		if err != nil {
			return
		}
		if !json.Valid(data) {
			t.Fatalf("accepted invalid JSON %q", data)
		}
		dec := json.NewDecoder(strings.NewReader(string(data)))
		dec.UseNumber()
		var want any
		if err := dec.Decode(&want); err != nil {
			t.Fatalf("encoding/json rejects %q: %v", data, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: got %#v, encoding/json %#v", data, got, want)
		}
		lookupsAgree(t, data, got, nil)
	})
}

// lookupsAgree checks that Lookup finds, at every member path of v (the
// document data decoded, up to three members deep), what Decode built
// there, and nothing at a member v does not have.
func lookupsAgree(t *testing.T, data []byte, v any, path []string) {
	t.Helper()
	got, found, err := Lookup(data, path)
	if err != nil || !found || !reflect.DeepEqual(got, v) {
		t.Fatalf("Lookup(%q, %q) = %#v, %v, %v; want %#v", data, path, got, found, err, v)
	}
	obj, ok := v.(map[string]any)
	if !ok || len(path) == 3 {
		return
	}
	missing := append(slices.Clone(path), "\x00 not a member")
	if got, found, err := Lookup(data, missing); found || err != nil {
		t.Fatalf("Lookup(%q, %q) = %#v, %v, %v; want nothing", data, missing, got, found, err)
	}
	for k, m := range obj {
		lookupsAgree(t, data, m, append(slices.Clone(path), k))
	}
}

func TestLookup(t *testing.T) {
	doc := `{"skip": {"a": [1, {"b": "\u0041"}], "c": null}, "run\u0041": {"id": "r-1", "n": 2}, "s": "x"}`
	tests := []struct {
		path    []string
		want    any
		found   bool
		wantErr string
	}{
		{path: []string{"runA", "id"}, want: "r-1", found: true}, // an escaped key, after a member skipped
		{path: []string{"runA"}, want: map[string]any{"id": "r-1", "n": json.Number("2")}, found: true},
		{path: []string{"runA", "none"}},
		{path: []string{"s", "id"}}, // not an object on the way
		{path: []string{"none"}},
	}
	for _, tt := range tests {
		got, found, err := Lookup([]byte(doc), tt.path)
		if err != nil || found != tt.found || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("Lookup(%q) = %#v, %v, %v; want %#v, %v", tt.path, got, found, err, tt.want, tt.found)
		}
	}
	// Before the member, Decode's rules hold: a malformed value skipped is an error.
	for _, bad := range []string{`{"a": [1,], "id": 1}`, `{"a": "\x", "id": 1}`, `{"a": tru, "id": 1}`, `{"a" 1, "id": 1}`, `{"a": {` + strings.Repeat("[", MaxDepth) + `}`} {
		var se *SyntaxError
		if _, _, err := Lookup([]byte(bad), []string{"id"}); !errors.As(err, &se) {
			t.Errorf("Lookup(%.40q) = %v, want a SyntaxError", bad, err)
		}
	}
}
