package input

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/arbiter-dev/arbiter/internal/corpus"
)

// The input path's cost per body kind, with allocated bytes per input byte
// (alloc-B/in-B), the figure that says what the worst body under the size
// limit costs in memory:
//
//	typical     the benchmark corpus (states of a few KiB)
//	4MiB        a Runner state whose outbox grows it to 4 MiB
//	amplifying  a valid 4 MiB state made of empty objects under an unknown
//	            runnerState member: the most values per byte a body can hold
//
// each read three ways: build (the whole value, as for topdown), validate
// (nothing built: what a projection leaves of a member no policy reads) and
// library (encoding/json-style decode to Go values, then the library's
// Validate: the price of one authority without the walk).
//
//	go test -run '^$' -bench . -benchtime 20x ./engine/input/

const corpusDir = repoRoot + "/policy_test/fixtures"

// benchBody is one body and the schema of its decision.
type benchBody struct {
	s    *Schema
	body []byte
}

var benchInputs = sync.OnceValues(func() (map[string][]benchBody, error) {
	schemas := map[string]*Schema{}
	schemaOf := func(decision string) *Schema {
		if schemas[decision] == nil {
			schemas[decision] = NewSchema(repoSchema(nil, decision))
		}
		return schemas[decision]
	}
	valid := func(decision string, body []byte) bool {
		_, err := Parse(context.Background(), body, schemaOf(decision), Options{})
		return err == nil
	}
	in, err := corpus.Generate(corpusDir, 500, 1, valid)
	if err != nil {
		return nil, err
	}
	var typical []benchBody
	for _, c := range in {
		typical = append(typical, benchBody{schemaOf(c.Decision), c.Body})
	}
	decision, big, err := corpus.Sized(corpusDir, 4<<20, valid)
	if err != nil {
		return nil, err
	}
	s := schemaOf(decision)
	amp := amplifying(4<<20, typical)
	if amp.body == nil {
		return nil, fmt.Errorf("no corpus input has an object that takes an unknown member")
	}
	return map[string][]benchBody{"typical": typical, "4MiB": {{s, big}}, "amplifying": {amp}}, nil
})

// amplifying returns a valid body of about size bytes made mostly of empty
// objects, in an unknown member of the first object of a corpus input that
// its schema lets take one: the most values per byte a body can hold.
func amplifying(size int, inputs []benchBody) benchBody {
	for _, in := range inputs {
		for at := 1; at < len(in.body); at++ {
			if in.body[at-1] != '{' {
				continue
			}
			probe := append(append(append([]byte{}, in.body[:at]...), `"x-junk":[{}],`...), in.body[at:]...)
			if _, err := Parse(context.Background(), probe, in.s, Options{}); err != nil {
				continue
			}
			n := (size - len(in.body)) / 3
			var b bytes.Buffer
			b.Grow(size + 64)
			b.Write(in.body[:at])
			b.WriteString(`"x-junk":[`)
			b.WriteString(strings.Repeat(`{},`, n-1))
			b.WriteString(`{}],`)
			b.Write(in.body[at:])
			return benchBody{in.s, b.Bytes()}
		}
	}
	return benchBody{}
}

func BenchmarkParse(b *testing.B) {
	inputs, err := benchInputs()
	if err != nil {
		b.Fatal(err)
	}
	nothing := Normalize(&Projection{})
	ctx := context.Background()
	kinds := []string{"typical", "4MiB", "amplifying"}
	if testing.Short() { // make bench-quick: that it runs, not what it measures
		kinds = kinds[:1]
	}
	for _, kind := range kinds {
		bodies := inputs[kind]
		total := 0
		for _, in := range bodies {
			total += len(in.body)
		}
		for _, mode := range []string{"build", "validate", "library"} {
			b.Run(kind+"/"+mode, func(b *testing.B) {
				b.SetBytes(int64(total / len(bodies)))
				b.ReportAllocs()
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				i := 0
				for b.Loop() {
					in := bodies[i%len(bodies)]
					body, s := in.body, in.s
					i++
					var err error
					switch mode {
					case "build":
						_, err = Parse(ctx, body, s, Options{MaxValues: 1 << 30})
					case "validate":
						_, err = Parse(ctx, body, s, Options{MaxValues: 1 << 30, Projection: nothing})
					default:
						var doc any
						if doc, err = Decode(body); err == nil {
							err = s.Library().Validate(doc)
						}
					}
					if err != nil {
						b.Fatal(err)
					}
				}
				runtime.ReadMemStats(&after)
				per := float64(after.TotalAlloc-before.TotalAlloc) / float64(i) / float64(total/len(bodies))
				b.ReportMetric(per, "alloc-B/in-B")
			})
		}
	}
}
