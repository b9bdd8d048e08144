package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"runtime"
	"time"

	"github.com/arbiter-dev/arbiter/engine"
)

// cmdBench decides one input over and over in process, as `opa bench` does
// for a query: what a policy edit costs per decision, before it ships. The
// comparison with stock OPA over HTTP is `make bench`.
func cmdBench(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f folders
	f.register(fs, false)
	name := fs.String("decision", "", "decision to evaluate (required)")
	input := fs.String("input", "", "input document file, or - for stdin (required)")
	duration := fs.Duration("duration", 2*time.Second, "how long to keep deciding")
	format := fs.String("format", "text", "output format: text or json")
	if err := fs.Parse(args); err != nil {
		return exitError
	}
	if *name == "" || *input == "" || fs.NArg() > 0 || *duration <= 0 || (*format != "text" && *format != "json") {
		fmt.Fprintln(stderr, "arbiter bench: --decision and --input are required; --duration must be positive; --format text or json")
		return exitError
	}
	body, err := readInput(*input, stdin)
	if err != nil {
		fmt.Fprintf(stderr, "arbiter bench: reading input: %v\n", err)
		return exitError
	}
	snap, err := engine.Load(ctx, engine.Config{Policies: f.policies, Schemas: f.schemas})
	if err != nil {
		fmt.Fprintf(stderr, "arbiter bench: %v\n", err)
		return exitError
	}
	// One decision first: an input that gives an error is not worth timing.
	if _, err := snap.Decide(ctx, *name, body, engine.Options{}); err != nil {
		e := engine.AsError(err)
		writeJSON(stdout, e.Document())
		return exitInput
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	start := time.Now()
	n := 0
	for time.Since(start) < *duration && ctx.Err() == nil {
		if _, err := snap.Decide(ctx, *name, body, engine.Options{}); err != nil {
			fmt.Fprintf(stderr, "arbiter bench: %v\n", err)
			return exitError
		}
		n++
	}
	elapsed := time.Since(start)
	runtime.ReadMemStats(&after)
	res := struct {
		Decisions   int     `json:"decisions"`
		NsPerOp     int64   `json:"ns_per_op"`
		BytesPerOp  uint64  `json:"bytes_per_op"`
		AllocsPerOp uint64  `json:"allocs_per_op"`
		PerSecond   float64 `json:"decisions_per_second"`
		Revision    string  `json:"policy_revision"`
	}{n, elapsed.Nanoseconds() / int64(n), (after.TotalAlloc - before.TotalAlloc) / uint64(n),
		(after.Mallocs - before.Mallocs) / uint64(n), float64(n) / elapsed.Seconds(), snap.Revision}
	if *format == "json" {
		writeJSON(stdout, res)
		return exitOK
	}
	fmt.Fprintf(stdout, "%s on revision %s: %d decisions in %s\n%d ns/op  %d B/op  %d allocs/op  %.0f decisions/s (one goroutine)\n",
		*name, res.Revision, n, elapsed.Round(time.Millisecond), res.NsPerOp, res.BytesPerOp, res.AllocsPerOp, res.PerSecond)
	return exitOK
}
