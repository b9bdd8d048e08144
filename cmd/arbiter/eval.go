package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/arbiter-dev/arbiter/decisionlog"
	"github.com/arbiter-dev/arbiter/engine"
	"github.com/arbiter-dev/arbiter/server"
)

// inputFlags are the flags of the commands that decide one input.
type inputFlags struct {
	folders
	decision       string
	input          string
	maxBodyBytes   int64
	maxInputValues int
}

func (f *inputFlags) register(c *command) {
	f.folders.register(c, false)
	c.StringVar(&f.decision, "decision", "", "decision to evaluate (required)")
	c.StringVar(&f.input, "input", "", "input document file, or - for stdin (required)")
	c.Int64Var(&f.maxBodyBytes, "max-body-bytes", 16<<20, "largest input read, as the server's limit: more is body_too_large")
	c.IntVar(&f.maxInputValues, "max-input-values", server.DefaultMaxInputValues, "most JSON values in one input (body_too_large past it), as the server's limit")
	c.fromEnv("max-body-bytes", "max-input-values")
}

func (f *inputFlags) check() error {
	switch {
	case f.decision == "" || f.input == "":
		return fmt.Errorf("--decision and --input are required")
	case f.maxBodyBytes <= 0:
		return fmt.Errorf("--max-body-bytes must be positive")
	case f.maxInputValues < 0:
		return fmt.Errorf("--max-input-values must not be negative")
	}
	return f.folders.missing()
}

// read reads the input: at most --max-body-bytes of it, so that a file that
// never ends (/dev/zero, a pipe) costs a bounded amount of memory.
func (f *inputFlags) read(stdin io.Reader) ([]byte, error) {
	var r io.Reader = stdin
	if f.input != "-" {
		fh, err := os.Open(f.input)
		if err != nil {
			return nil, err
		}
		defer fh.Close()
		r = fh
	}
	body, err := io.ReadAll(io.LimitReader(r, f.maxBodyBytes+1))
	if err != nil {
		return nil, err
	}
	if int64(len(body)) > f.maxBodyBytes {
		return nil, &engine.Error{Code: engine.CodeBodyTooLarge, Message: fmt.Sprintf("the input exceeds %d bytes (--max-body-bytes)", f.maxBodyBytes)}
	}
	return body, nil
}

// load reads the input and loads the folders' policies, as eval and bench
// both begin. On failure it reports it and returns no snapshot and the exit
// code: 2 with the error document for an input over the limit, as for any
// refused input, 1 when the input cannot be read or the policies not load.
func (f *inputFlags) load(ctx context.Context, name string, stdin io.Reader, stdout, stderr io.Writer) ([]byte, *engine.Snapshot, int) {
	body, err := f.read(stdin)
	if e, ok := err.(*engine.Error); ok {
		writeJSON(stdout, e.Document())
		return nil, nil, exitInput
	}
	if err != nil {
		return nil, nil, say(stderr, exitError, "arbiter %s: reading input: %v", name, err)
	}
	snap, err := engine.Load(ctx, engine.Config{Policies: f.policies, Schemas: f.schemas, MaxInputValues: f.maxInputValues})
	if err != nil {
		return nil, nil, say(stderr, exitError, "arbiter %s: %v", name, err)
	}
	return body, snap, exitOK
}

func evalCommand() *command {
	c := newCommand("eval --decision NAME --input FILE|-", "Decide one input, as the server would", `Decide one input with the policies of the folders: the answer's JSON document, or with
--format text the result on one line and, with --explain, the reason rules that fired, then
those that held, with the values each read. Exit 2 when the input is refused (the error document on stdout).`, exitError)
	var f inputFlags
	f.register(c)
	explain := c.Bool("explain", false, "add each reason rule's outcome, title and description")
	format := c.format("json", "json (the answer's document), or text: the result and, with --explain, each reason rule that fired, then each that held, with the values it read")
	c.run = func(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer) int {
		if err := f.check(); err != nil || c.NArg() > 0 {
			return say(stderr, exitError, "arbiter eval: %v", orArgs(err, c.Args()))
		}
		body, snap, code := f.load(ctx, "eval", stdin, stdout, stderr)
		if snap == nil {
			return code
		}
		d, err := snap.Decide(ctx, f.decision, body, engine.Options{Explain: *explain})
		if err != nil {
			e := engine.AsError(err)
			if *format == "text" {
				writeErrorText(stdout, e)
			} else {
				writeJSON(stdout, e.Document())
			}
			if e.Err != nil {
				fmt.Fprintf(stderr, "arbiter eval: %v\n", e.Err)
			}
			if inputRefused(e.Code) {
				return exitInput
			}
			return exitError
		}
		if *format == "text" {
			writeDecisionText(stdout, d)
		} else {
			writeJSON(stdout, d)
		}
		return exitOK
	}
	return c
}

// writeDecisionText prints a decision for people: its result on one line,
// then, when it was explained, the reason rules that fired, then those that
// held (did not fire), each with the values it read.
func writeDecisionText(w io.Writer, d *engine.Decision) {
	fmt.Fprintf(w, "%s (revision %s, decision %s): %s\n", d.Name, d.Revision, d.ID, d.Result)
	if d.Explanation == nil {
		return
	}
	fired := 0
	for _, r := range d.Explanation {
		if r.Fired {
			fired++
			writeRuleText(w, "fired", r)
		}
	}
	if fired == 0 {
		fmt.Fprintln(w, "no reason rule fired")
	}
	for _, r := range d.Explanation {
		if !r.Fired {
			writeRuleText(w, "held", r)
		}
	}
}

// writeRuleText prints one reason rule and the values it read, one a line.
func writeRuleText(w io.Writer, verb string, r engine.RuleOutcome) {
	fmt.Fprintf(w, "%s %s %s: %s  (%s:%d)\n", verb, r.Rank, r.Reason, r.Title, r.File, r.Line)
	if r.Description != "" {
		fmt.Fprintf(w, "  %s\n", r.Description)
	}
	for _, ev := range r.Read() {
		at := ev.Path
		if ev.Data != "" {
			at = "data." + ev.Data
		}
		var val string
		switch {
		case ev.Absent:
			val = "(absent)"
		case ev.Summary != "":
			val = ev.Summary
		default:
			val = string(ev.Value)
		}
		if ev.Via != "" {
			val += "  via " + ev.Via
		}
		fmt.Fprintf(w, "  %s = %s\n", at, val)
	}
}

// writeErrorText prints an error answer for people: its code and message,
// and each input violation.
func writeErrorText(w io.Writer, e *engine.Error) {
	fmt.Fprintf(w, "%s: %s\n", e.Code, e.Message)
	for _, v := range e.Violations {
		fmt.Fprintf(w, "  %s\n", decisionlog.Violation(v))
	}
}

// inputRefused reports whether code refuses the input itself (exit 2).
func inputRefused(code engine.Code) bool {
	return code == engine.CodeMalformedJSON || code == engine.CodeInputSchemaInvalid || code == engine.CodeBodyTooLarge
}

// orArgs is err, or the complaint about stray arguments.
func orArgs(err error, args []string) error {
	if err != nil {
		return err
	}
	return fmt.Errorf("unexpected arguments %q", args)
}

func writeJSON(w io.Writer, v any) {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}
