package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"sync"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/server/types"
	"github.com/open-policy-agent/opa/v1/util"

	"github.com/arbiter-dev/arbiter/engine/ireval"
	"github.com/arbiter-dev/arbiter/internal/corpus"
)

// The benchmarks of docs/BENCHMARKS.md (`make bench` runs them through
// bench/e2e). Each sub-benchmark decides the same inputs a different way:
//
//	decide              Snapshot.Decide: strict decoding, schema validation,
//	                    conversion, evaluation, result validation, encoding
//	prepared_eval_only  the prepared query alone on inputs already converted
//	                    to ast.Value: the interpreter's floor
//	opa_server_path     what stock OPA's server does per Data API request,
//	                    minus HTTP: its JSON decoder (util.NewJSONDecoder
//	                    into types.DataRequestV1), ast.InterfaceToValue, the
//	                    same prepared query, encoding types.DataResponseV1
//	reference_go        the rules written by hand in Go (testdata/floor,
//	                    only with -tags benchfloor, which make bench sets):
//	                    encoding/json into typed structs, rules, encoding;
//	                    the floor no interpreter can beat
//
// Compare ratios within one run only; the machines are shared and noisy.

const (
	corpusSize = 1000
	corpusSeed = 1
)

// floorDecide, when the build has the hand-written floor (bench_floor_test.go,
// -tags benchfloor), returns its decide function.
var floorDecide func(tb testing.TB) func(decision string, body []byte) ([]byte, error)

// decidedBy keeps the generated inputs that s decides: each one then costs
// a whole decision, whatever the rules say about it.
func decidedBy(s *Snapshot) corpus.Keep {
	return func(decision string, body []byte) bool {
		_, err := s.Decide(context.Background(), decision, body, Options{})
		return err == nil
	}
}

func mustCorpus(tb testing.TB, s *Snapshot) []corpus.Input {
	tb.Helper()
	in, err := corpus.Generate(repoTests, corpusSize, corpusSeed, decidedBy(s))
	if err != nil {
		tb.Fatal(err)
	}
	return in
}

// toValue converts an input document as OPA's own tooling does: decoded
// with json.Number, then ast.InterfaceToValue.
func toValue(tb testing.TB, body []byte) ast.Value {
	tb.Helper()
	var doc any
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		tb.Fatal(err)
	}
	v, err := ast.InterfaceToValue(doc)
	if err != nil {
		tb.Fatal(err)
	}
	return v
}

// wrapData makes an OPA Data API request body of an input document.
func wrapData(body []byte) []byte {
	return append(append([]byte(`{"input":`), body...), '}')
}

// opaServerPath decides a Data API request body as OPA's server does
// (v1/server.readInputPostV1, then the evaluation and the response).
func opaServerPath(ctx context.Context, q rego.PreparedEvalQuery, body []byte) ([]byte, error) {
	var req types.DataRequestV1
	if err := util.NewJSONDecoder(bytes.NewBuffer(body)).Decode(&req); err != nil {
		return nil, err
	}
	v, err := ast.InterfaceToValue(*req.Input)
	if err != nil {
		return nil, err
	}
	rs, err := q.Eval(ctx, rego.EvalParsedInput(v))
	if err != nil {
		return nil, err
	}
	var result any = rs[0].Expressions[0].Value
	return json.Marshal(types.DataResponseV1{Result: &result})
}

// BenchmarkCorpus decides the corpus of internal/corpus (1000 distinct
// inputs, both decisions, allowed and refused, a few KB each), one input per
// iteration in rotation, every sub-benchmark on the same inputs.
func BenchmarkCorpus(b *testing.B) {
	s := mustLoad(b, repo)
	inputs := mustCorpus(b, s)
	ctx := context.Background()
	queries := make([]rego.PreparedEvalQuery, len(inputs))
	for i, in := range inputs {
		queries[i] = s.decisions[in.Decision].query
	}

	b.Run("decide", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			in := inputs[i%len(inputs)]
			i++
			if _, err := s.Decide(ctx, in.Decision, in.Body, Options{}); err != nil {
				b.Fatalf("%s: %v", in.Name, err)
			}
		}
	})
	b.Run("prepared_eval_only", func(b *testing.B) {
		values := make([]ast.Value, len(inputs))
		for i, in := range inputs {
			values[i] = toValue(b, in.Body)
		}
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			k := i % len(inputs)
			i++
			if rs, err := queries[k].Eval(ctx, rego.EvalParsedInput(values[k])); err != nil || len(rs) != 1 {
				b.Fatalf("%s: %v", inputs[k].Name, err)
			}
		}
	})
	b.Run("opa_server_path", func(b *testing.B) {
		bodies := make([][]byte, len(inputs))
		for i, in := range inputs {
			bodies[i] = wrapData(in.Body)
		}
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			k := i % len(inputs)
			i++
			if _, err := opaServerPath(ctx, queries[k], bodies[k]); err != nil {
				b.Fatalf("%s: %v", inputs[k].Name, err)
			}
		}
	})
	if floorDecide == nil {
		return
	}
	b.Run("reference_go", func(b *testing.B) {
		decide := floorDecide(b)
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			in := inputs[i%len(inputs)]
			i++
			if _, err := decide(in.Decision, in.Body); err != nil {
				b.Fatalf("%s: %v", in.Name, err)
			}
		}
	})
}

// benchSizes are the Runner state sizes of BenchmarkSize and bench/e2e.
var benchSizes = []struct {
	name  string
	bytes int
}{
	{"64KiB", 64 << 10},
	{"1MiB", 1 << 20},
	{"4MiB", 4 << 20},
	{"8MiB", 8 << 20},
	{"16MiB", 16 << 20},
}

type sized struct {
	decision string
	body     []byte
}

var sizedBodies sync.Map // size -> sized

func sizedBody(tb testing.TB, s *Snapshot, size int) sized {
	tb.Helper()
	if b, ok := sizedBodies.Load(size); ok {
		return b.(sized)
	}
	decision, body, err := corpus.Sized(repoTests, size, decidedBy(s))
	if err != nil {
		tb.Fatal(err)
	}
	sizedBodies.Store(size, sized{decision, body})
	return sized{decision, body}
}

// BenchmarkSize decides one input whose Runner outbox grows it to each size
// (corpus.Sized): the cost should grow linearly.
func BenchmarkSize(b *testing.B) {
	s := mustLoad(b, repo)
	ctx := context.Background()
	sizes := benchSizes
	if testing.Short() { // make bench-quick: that it runs, not what it measures
		sizes = sizes[:1]
	}
	for _, sz := range sizes {
		b.Run(sz.name+"/decide", func(b *testing.B) {
			in := sizedBody(b, s, sz.bytes)
			b.SetBytes(int64(len(in.body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := s.Decide(ctx, in.decision, in.body, Options{}); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(sz.name+"/prepared_eval_only", func(b *testing.B) {
			in := sizedBody(b, s, sz.bytes)
			v := toValue(b, in.body)
			q := s.decisions[in.decision].query
			b.SetBytes(int64(len(in.body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := q.Eval(ctx, rego.EvalParsedInput(v)); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(sz.name+"/opa_server_path", func(b *testing.B) {
			in := sizedBody(b, s, sz.bytes)
			body := wrapData(in.body)
			q := s.decisions[in.decision].query
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := opaServerPath(ctx, q, body); err != nil {
					b.Fatal(err)
				}
			}
		})
		if floorDecide == nil {
			continue
		}
		b.Run(sz.name+"/reference_go", func(b *testing.B) {
			in := sizedBody(b, s, sz.bytes)
			decide := floorDecide(b)
			b.SetBytes(int64(len(in.body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := decide(in.decision, in.body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkCompiled compares, on the same already-built inputs of the
// typical corpus, the compiled evaluation (engine/ireval) with the bare
// topdown prepared evaluation: the evaluator alone, without parsing,
// validation or encoding.
func BenchmarkCompiled(b *testing.B) {
	s := mustLoad(b, repo)
	inputs := mustCorpus(b, s)
	ctx := context.Background()
	values := make([]ast.Value, len(inputs))
	for i, in := range inputs {
		values[i] = toValue(b, in.Body)
	}
	b.Run("prepared_eval_only", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			k := i % len(inputs)
			i++
			if rs, err := s.decisions[inputs[k].Decision].query.Eval(ctx, rego.EvalParsedInput(values[k])); err != nil || len(rs) != 1 {
				b.Fatalf("%s: %v", inputs[k].Name, err)
			}
		}
	})
	b.Run("compiled_eval_only", func(b *testing.B) {
		progs := make([]*ireval.Program, len(inputs))
		for i, in := range inputs {
			if progs[i] = s.decisions[in.Decision].compiled.program(); progs[i] == nil {
				b.Fatalf("decision %s does not run compiled", in.Decision)
			}
		}
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			k := i % len(inputs)
			i++
			if _, err := progs[k].Eval(ctx, values[k], ireval.EvalOptions{}); err != nil {
				b.Fatalf("%s: %v", inputs[k].Name, err)
			}
		}
	})
}
