package input

import (
	"bytes"
	"context"
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

var benchInputs = sync.OnceValues(func() (map[string][][]byte, error) {
	in, err := corpus.Generate(corpusDir, 500, 1)
	if err != nil {
		return nil, err
	}
	var typical [][]byte
	for _, c := range in {
		if c.Decision == "bootstrap_restart" {
			typical = append(typical, c.Body)
		}
	}
	big, err := corpus.Sized(corpusDir, 4<<20)
	if err != nil {
		return nil, err
	}
	return map[string][][]byte{"typical": typical, "4MiB": {big}, "amplifying": {amplifying(typical[0], 4<<20)}}, nil
})

// amplifying returns base with an unknown runnerState member holding empty
// objects up to size bytes: valid, and the most values per byte.
func amplifying(base []byte, size int) []byte {
	i := bytes.Index(base, []byte(`"runnerState":{`))
	if i < 0 {
		panic("base input has no runnerState object")
	}
	at := i + len(`"runnerState":{`)
	n := (size - len(base)) / 3
	var b bytes.Buffer
	b.Grow(size + 64)
	b.Write(base[:at])
	b.WriteString(`"x-junk":[`)
	b.WriteString(strings.Repeat(`{},`, n-1))
	b.WriteString(`{}],`)
	b.Write(base[at:])
	return b.Bytes()
}

func BenchmarkParse(b *testing.B) {
	inputs, err := benchInputs()
	if err != nil {
		b.Fatal(err)
	}
	s := NewSchema(repoSchema(b, "bootstrap_restart"))
	nothing := Normalize(&Projection{})
	ctx := context.Background()
	for _, kind := range []string{"typical", "4MiB", "amplifying"} {
		bodies := inputs[kind]
		total := 0
		for _, body := range bodies {
			total += len(body)
		}
		for _, mode := range []string{"build", "validate", "library"} {
			b.Run(kind+"/"+mode, func(b *testing.B) {
				b.SetBytes(int64(total / len(bodies)))
				b.ReportAllocs()
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				i := 0
				for b.Loop() {
					body := bodies[i%len(bodies)]
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
