package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/arbiter-dev/arbiter/engine"
)

func cmdEval(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("eval", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f folders
	f.register(fs, false)
	name := fs.String("decision", "", "decision to evaluate (required)")
	input := fs.String("input", "", "input document file, or - for stdin (required)")
	explain := fs.Bool("explain", false, "add each reason rule's outcome, title and description")
	if err := fs.Parse(args); err != nil {
		return exitError
	}
	if *name == "" || *input == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "arbiter eval: --decision and --input are required")
		return exitError
	}
	body, err := readInput(*input, stdin)
	if err != nil {
		fmt.Fprintf(stderr, "arbiter eval: reading input: %v\n", err)
		return exitError
	}
	snap, err := engine.Load(ctx, engine.Config{Policies: f.policies, Schemas: f.schemas})
	if err != nil {
		fmt.Fprintf(stderr, "arbiter eval: %v\n", err)
		return exitError
	}
	d, err := snap.Decide(ctx, *name, body, engine.Options{Explain: *explain})
	if err != nil {
		e := engine.AsError(err)
		writeJSON(stdout, e.Document())
		if e.Err != nil {
			fmt.Fprintf(stderr, "arbiter eval: %v\n", e.Err)
		}
		if e.Code == engine.CodeMalformedJSON || e.Code == engine.CodeInputSchemaInvalid {
			return exitInput
		}
		return exitError
	}
	writeJSON(stdout, d)
	return exitOK
}

// readInput reads an input document from a file, or from stdin for "-".
func readInput(path string, stdin io.Reader) ([]byte, error) {
	if path == "-" {
		return io.ReadAll(stdin)
	}
	return os.ReadFile(path)
}

func writeJSON(w io.Writer, v any) {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}
