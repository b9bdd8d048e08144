package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/arbiter-dev/arbiter/engine"
)

// benchCommand decides one input over and over in process, as `opa bench` does
// for a query: what a policy edit costs per decision, before it ships. The
// measuring is the standard library's (testing.Benchmark); the comparison
// with stock OPA over HTTP is `make bench`.
func benchCommand() *command {
	c := newCommand("bench --decision NAME --input FILE|-", "Decide one input over and over and measure each decision", `Decide one input over and over in process with testing.Benchmark and print ns, bytes and
allocations per decision, the way opa bench measures a query: the cost of a policy edit
before it ships.`, exitError)
	var f inputFlags
	f.register(c)
	duration := c.Duration("duration", 2*time.Second, "how long to keep deciding (the benchmark's -benchtime)")
	format := c.format("text", "output format: text or json")
	c.run = func(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer) int {
		if err := f.check(); err != nil || c.NArg() > 0 {
			return say(stderr, exitError, "arbiter bench: %v", orArgs(err, c.Args()))
		}
		if *duration <= 0 {
			return say(stderr, exitError, "arbiter bench: --duration must be positive")
		}
		body, snap, code := f.load(ctx, "bench", stdin, stdout, stderr)
		if snap == nil {
			return code
		}
		// One decision first: an input that gives an error is not worth timing.
		if _, err := snap.Decide(ctx, f.decision, body, engine.Options{}); err != nil {
			writeJSON(stdout, engine.AsError(err).Document())
			return exitInput
		}
		// testing.Benchmark reads its run time from the test flags.
		testing.Init()
		if err := flag.Set("test.benchtime", duration.String()); err != nil {
			return say(stderr, exitError, "arbiter bench: %v", err)
		}
		var failed error
		r := testing.Benchmark(func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := snap.Decide(ctx, f.decision, body, engine.Options{}); err != nil {
					failed = err
					b.SkipNow()
				}
			}
		})
		if failed != nil {
			return say(stderr, exitError, "arbiter bench: %v", failed)
		}
		res := struct {
			Decisions   int     `json:"decisions"`
			NsPerOp     int64   `json:"ns_per_op"`
			BytesPerOp  int64   `json:"bytes_per_op"`
			AllocsPerOp int64   `json:"allocs_per_op"`
			PerSecond   float64 `json:"decisions_per_second"`
			Revision    string  `json:"policy_revision"`
		}{r.N, r.NsPerOp(), r.AllocedBytesPerOp(), r.AllocsPerOp(), float64(r.N) / r.T.Seconds(), snap.Revision}
		if *format == "json" {
			writeJSON(stdout, res)
			return exitOK
		}
		fmt.Fprintf(stdout, "%s on revision %s: %d decisions in %s\n%s  %.0f decisions/s (one goroutine)\n",
			f.decision, res.Revision, r.N, r.T.Round(time.Millisecond), r.String()+"\t"+r.MemString(), res.PerSecond)
		return exitOK
	}
	return c
}
