package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestStockOPAAgrees decides every valid fixture with the stock `opa eval`
// binary (OPA_BIN, set by `make test`) and with the engine, and compares.
// Stock OPA decides all fixtures of a decision in one rule, each with its
// own input, so the comparison costs one process per decision. (The rule
// lives in a module: a `with` inside a comprehension of the query itself is
// not applied by opa eval 1.22.4, which would compare against empty inputs.)
func TestStockOPAAgrees(t *testing.T) {
	bin := os.Getenv("OPA_BIN")
	if bin == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("OPA_BIN is not set: run through `make test`")
		}
		t.Skip("OPA_BIN not set (make test sets it to the stock opa binary)")
	}
	s := mustLoad(t, repo)
	fixtures := repoFixtures(t)
	compared := 0
	for _, name := range s.Names() {
		dir := t.TempDir()
		module := "package parity\n\nresults[name] := r if {\n\tsome name, fx in data.fixtures." + name +
			"\n\tfx.want_result\n\tr := data.decisions." + name + ".decision with input as fx.input\n}\n"
		if err := os.WriteFile(filepath.Join(dir, "parity.rego"), []byte(module), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, "eval", "--format", "json", "-d", repo.Policies, "-d", repoTests, "-d", dir, "data.parity.results")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("opa eval: %v\n%s", err, stderr.String())
		}
		var res struct {
			Result []struct {
				Expressions []struct {
					Value map[string]json.RawMessage `json:"value"`
				} `json:"expressions"`
			} `json:"result"`
		}
		dec := json.NewDecoder(bytes.NewReader(out))
		dec.UseNumber()
		if err := dec.Decode(&res); err != nil || len(res.Result) != 1 {
			t.Fatalf("opa eval output: %v\n%s", err, out)
		}
		stock := res.Result[0].Expressions[0].Value
		for _, fx := range fixtures {
			if fx.Decision != name || fx.WantResult == nil {
				continue
			}
			want, ok := stock[fx.Name]
			if !ok {
				t.Errorf("%s/%s: stock opa left the decision undefined", name, fx.Name)
				continue
			}
			d, err := s.Decide(context.Background(), name, fx.RequestBody(), Options{})
			if err != nil {
				t.Errorf("%s/%s: engine: %v", name, fx.Name, err)
				continue
			}
			if !SameJSON(d.Result, want) {
				t.Errorf("%s/%s: engine %s, stock opa %s", name, fx.Name, d.Result, want)
			}
			compared++
		}
	}
	if compared < 100 {
		t.Errorf("compared %d fixtures, expected the repository's valid fixtures (100+)", compared)
	}
	t.Logf("engine and stock opa agree on %d fixtures", compared)
}
