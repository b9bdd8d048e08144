package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
)

// benchInputs returns a typical bootstrap_restart input (an allowed restart
// from the shared examples' shape) and the same input with its Runner state
// grown to about size bytes through a large outbox.
func benchInput(tb testing.TB, size int) []byte {
	tb.Helper()
	fixtures, err := LoadFixtures(repoTests)
	if err != nil {
		tb.Fatal(err)
	}
	var base []byte
	for _, fx := range fixtures {
		if fx.Decision == "bootstrap_restart" && fx.Name == "interrupted_bootstrap_unprepared_unrecorded__resumed" {
			base = fx.Input
		}
	}
	if base == nil {
		tb.Fatal("fixture interrupted_bootstrap_unprepared_unrecorded__resumed not found")
	}
	if size == 0 {
		return base
	}
	var doc map[string]any
	dec := json.NewDecoder(strings.NewReader(string(base)))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		tb.Fatal(err)
	}
	rs := doc["runnerState"].(map[string]any)
	var outbox []any
	payload := strings.Repeat("x", 180)
	for seq := 1; ; seq++ {
		outbox = append(outbox, map[string]any{
			"sourceSeq": seq, "priority": seq % 3, "eventType": "provider.event",
			"envelope": map[string]any{"kind": "delta", "turnId": "turn-1", "text": payload, "index": seq},
			"byteSize": 256,
		})
		if seq%512 == 0 {
			b, _ := json.Marshal(doc)
			if len(b)+seq*300 >= size {
				break
			}
		}
		if seq*300 > size {
			break
		}
	}
	rs["outbox"] = outbox
	rs["nextSourceSeq"] = len(outbox) + 1
	rs["ackedSourceSeq"] = 0
	out, err := json.Marshal(doc)
	if err != nil {
		tb.Fatal(err)
	}
	return out
}

func BenchmarkDecide(b *testing.B) {
	s := mustLoad(b, repo)
	def := s.decisions["bootstrap_restart"]
	for _, size := range []int{0, 4 << 20} {
		body := benchInput(b, size)
		label := "typical"
		if size > 0 {
			label = fmt.Sprintf("%dMiB", size>>20)
		}
		// The floor of the interpreter: a prepared query on an input that is
		// already an ast.Value.
		b.Run(label+"/prepared_eval_only", func(b *testing.B) {
			doc, err := decodeStrict(body)
			if err != nil {
				b.Fatal(err)
			}
			v, err := ast.InterfaceToValue(doc)
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := def.query.Eval(context.Background(), rego.EvalParsedInput(v)); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(label+"/decide", func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := s.Decide(context.Background(), "bootstrap_restart", body, Options{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
