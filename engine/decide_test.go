package engine

import (
	"context"
	"errors"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func decideErr(t *testing.T, s *Snapshot, name, body string, opts Options) *Error {
	t.Helper()
	d, err := s.Decide(context.Background(), name, []byte(body), opts)
	if err == nil {
		t.Fatalf("Decide(%s) = %s, want an error", body, d.Result)
	}
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("Decide returned %T, want *Error", err)
	}
	return e
}

func TestDecideInputErrors(t *testing.T) {
	s := mustLoad(t, quotaConfig(quota))
	tests := []struct {
		name      string
		body      string
		wrapped   bool
		decision  string
		wantCode  Code
		wantPaths []string
	}{
		{name: "duplicate key", body: `{"tenant":"t","used":1,"used":2}`, wantCode: CodeMalformedJSON},
		{name: "trailing data", body: `{"tenant":"t","used":1} x`, wantCode: CodeMalformedJSON},
		{name: "not an object", body: `[1]`, wantCode: CodeInputSchemaInvalid, wantPaths: []string{""}},
		{name: "string document", body: `"x"`, wantCode: CodeInputSchemaInvalid, wantPaths: []string{""}},
		{name: "every leaf reported", body: `{"used":-1,"extra":true,"suspended":"yes"}`, wantCode: CodeInputSchemaInvalid, wantPaths: []string{"/extra", "/suspended", "/tenant", "/used"}},
		{name: "above u64", body: `{"tenant":"t","used":18446744073709551616}`, wantCode: CodeInputSchemaInvalid, wantPaths: []string{"/used"}},
		{name: "fraction", body: `{"tenant":"t","used":1.5}`, wantCode: CodeInputSchemaInvalid, wantPaths: []string{"/used"}},
		{name: "unknown decision", decision: "nope", body: `{}`, wantCode: CodeUnknownDecision},
		{name: "wrapped without input", wrapped: true, body: `{"inputs":{}}`, wantCode: CodeInputSchemaInvalid, wantPaths: []string{""}},
		{name: "wrapped not an object", wrapped: true, body: `[]`, wantCode: CodeInputSchemaInvalid, wantPaths: []string{""}},
		{name: "wrapped input not an object", wrapped: true, body: `{"input": 3}`, wantCode: CodeInputSchemaInvalid, wantPaths: []string{""}},
		{name: "wrapped pointers relative to input", wrapped: true, body: `{"input":{"tenant":"t","used":-1}}`, wantCode: CodeInputSchemaInvalid, wantPaths: []string{"/used"}},
		{name: "wrapped duplicate key", wrapped: true, body: `{"input":{},"input":{}}`, wantCode: CodeMalformedJSON},
		// Valid JSON beyond the numbers the engine represents: one code,
		// at the number, whatever its length and wherever it is.
		{name: "400 fraction digits", body: `{"tenant":"t","used":0.` + strings.Repeat("3", 400) + `}`, wantCode: CodeInputSchemaInvalid, wantPaths: []string{"/used"}},
		{name: "10,000 digits", body: `{"tenant":"t","used":` + strings.Repeat("3", 10_000) + `}`, wantCode: CodeInputSchemaInvalid, wantPaths: []string{"/used"}},
		{name: "exponent of 9 digits, wrapped", wrapped: true, body: `{"input":{"tenant":"t","used":1e999999999}}`, wantCode: CodeInputSchemaInvalid, wantPaths: []string{"/used"}},
	}
	for _, evaluator := range []string{"compiled", "topdown"} {
		if evaluator == "topdown" {
			for _, def := range s.decisions {
				if def.compiled != nil {
					why := "test: topdown"
					def.compiled.off.Store(&why)
				}
			}
		}
		for _, tt := range tests {
			t.Run(evaluator+"/"+tt.name, func(t *testing.T) {
				name := tt.decision
				if name == "" {
					name = "quota_check"
				}
				e := decideErr(t, s, name, tt.body, Options{DataAPIBody: tt.wrapped})
				if e.Code != tt.wantCode {
					t.Fatalf("code = %s (%s), want %s", e.Code, e.Message, tt.wantCode)
				}
				if tt.wantPaths != nil {
					var got []string
					for _, v := range e.Violations {
						got = append(got, v.Path)
					}
					if strings.Join(got, ",") != strings.Join(tt.wantPaths, ",") {
						t.Errorf("violation paths = %q, want %q (%+v)", got, tt.wantPaths, e.Violations)
					}
				}
			})
		}
	}
}

// TestU64ComparedExactly: through float64 both numbers would be
// 1.8446744073709552e19 and compare equal.
func TestU64ComparedExactly(t *testing.T) {
	root := copyTree(t, quota)
	editFile(t, filepath.Join(root, "policies", "decisions", "quota_check", "data.json"), "10", "18446744073709551615")
	s := mustLoad(t, quotaConfig(root))
	for body, want := range map[string]string{
		`{"tenant":"t","used":18446744073709551614}`: `{"allow":true,"reasons":[]}`,
		`{"tenant":"t","used":18446744073709551615}`: `{"allow":false,"reasons":["quota_exhausted"]}`,
	} {
		for _, wrapped := range []bool{false, true} {
			b := body
			if wrapped {
				b = `{"input":` + body + `}`
			}
			d, err := s.Decide(context.Background(), "quota_check", []byte(b), Options{DataAPIBody: wrapped})
			if err != nil {
				t.Fatal(err)
			}
			if !SameJSON(d.Result, []byte(want)) {
				t.Errorf("%s (wrapped %v) = %s, want %s", body, wrapped, d.Result, want)
			}
			if string(d.Input) != body {
				t.Errorf("input as received = %q, want %q", d.Input, body)
			}
		}
	}
}

func TestDecideFailsClosedOnPolicyFaults(t *testing.T) {
	policy := filepath.Join("policies", "decisions", "quota_check", "policy.rego")
	tests := []struct {
		name     string
		old, new string
		timeout  time.Duration
		wantCode Code
		wantMsg  string
	}{
		{
			name:     "result violating its schema",
			old:      `decision := {"allow": count(reasons) == 0, "reasons": reasons}`,
			new:      `decision := {"allow": "yes", "reasons": reasons}`,
			wantCode: CodePolicyError, wantMsg: "does not match the result schema",
		},
		{
			name:     "unknown reason code in the result",
			old:      `[2, "tenant_suspended"]`,
			new:      `[2, "tenant_suspendd"]`,
			wantCode: CodePolicyError, wantMsg: "does not match the result schema",
		},
		{
			name:     "undefined decision",
			old:      `decision := {"allow"`,
			new:      "decision := {\"allow\": count(reasons) == 0, \"reasons\": reasons} if input.used > 100\n\nunused_old := {\"allow\"",
			wantCode: CodePolicyError, wantMsg: "undefined",
		},
		{
			name: "policy that runs away is cut off",
			old:  `reasons := [`,
			new: "slow if {\n\tcount({i | some i in numbers.range(1, 100000); some j in numbers.range(1, 100000); i * j == -1}) == 0\n}\n\n" +
				"failures contains [3, \"slow\"] if slow\n\nreasons := [",
			timeout:  50 * time.Millisecond,
			wantCode: CodePolicyTimeout, wantMsg: "exceeded 50ms",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := copyTree(t, quota)
			editFile(t, filepath.Join(root, policy), tt.old, tt.new)
			cfg := quotaConfig(root)
			cfg.EvalTimeout = tt.timeout
			s := mustLoad(t, cfg)
			for range 2 { // the same fault again: a refused result is never taken as checked
				e := decideErr(t, s, "quota_check", `{"tenant":"t","used":1,"suspended":true}`, Options{})
				if e.Code != tt.wantCode || !strings.Contains(e.Message, tt.wantMsg) {
					t.Fatalf("got %s: %s; want %s containing %q", e.Code, e.Message, tt.wantCode, tt.wantMsg)
				}
			}
			if m := s.decisions["quota_check"].valid.seen.Load(); m != nil {
				t.Errorf("results kept as checked after a fault: %v", *m)
			}
		})
	}
}

func TestExplainIsOptIn(t *testing.T) {
	s := mustLoad(t, quotaConfig(quota))
	d, err := s.Decide(context.Background(), "quota_check", []byte(`{"tenant":"t","used":1}`), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if d.Explanation != nil || d.ID == "" || d.Revision != s.Revision || d.Name != "quota_check" {
		t.Errorf("decision = %+v", d)
	}
	if len(d.Reasons) != 0 {
		t.Errorf("reasons = %v", d.Reasons)
	}
}

// A result that passed its schema is kept by its encoding and not
// validated again; one too large, or past the bound, is validated each
// time.
func TestValidResultsKeepWhatPassed(t *testing.T) {
	s := mustLoad(t, quotaConfig(quota))
	def := s.decisions["quota_check"]
	d, err := s.Decide(context.Background(), "quota_check", []byte(`{"tenant":"t","used":1}`), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !def.valid.has(d.Result) {
		t.Fatalf("the result %s that passed is not kept", d.Result)
	}
	var v validResults
	big := []byte(`"` + strings.Repeat("x", maxValidResultBytes) + `"`)
	v.add(big)
	for i := range maxValidResults + 1 {
		v.add([]byte(strconv.Itoa(i)))
	}
	if v.has(big) || !v.has([]byte("0")) || !v.has([]byte(strconv.Itoa(maxValidResults-1))) || v.has([]byte(strconv.Itoa(maxValidResults))) {
		t.Errorf("kept %d results: want the first %d of at most %d bytes", len(*v.seen.Load()), maxValidResults, maxValidResultBytes)
	}
}
