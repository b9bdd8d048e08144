// Command arbiter evaluates, checks, tests and serves Arbiter decisions.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"syscall"
)

const usage = `arbiter: a policy decision service (Rego policies over schema-validated input)

Usage:
  arbiter serve   [--addr HOST:PORT] [--policies DIR] [--schemas DIR] [--tests DIR]
                  [--decision-log PATH|-] [--max-body-bytes N] [--eval-timeout D]
                  [--auth-token-file F] [--tls-cert-file F --tls-key-file F [--tls-client-ca-file F]]
                  [--insecure-listen]   (see arbiter serve -h for every flag)
  arbiter eval    --decision NAME --input FILE|- [--explain] [--format json|text] [--max-body-bytes N]
                  [--max-input-values N] [--policies DIR] [--schemas DIR]
  arbiter check   [--policies DIR] [--schemas DIR] [--tests DIR]
  arbiter test    [--policies DIR] [--schemas DIR] [--tests DIR] [--coverage] [--threshold N]
                  [--run REGEX] [--format text|json] [-v] [--update]
  arbiter build   [--output FILE] [--revision REV] [--signing-key KEY [--signing-alg ALG] [--signing-key-id ID]]
                  [--claims-file FILE] [--no-gate] [--diff-against PREVIOUS [--diff-budget D]] [--policies DIR] [--schemas DIR]
                  [--tests DIR]   (an OPA bundle of one revision, with its diff against PREVIOUS)
  arbiter replay  --log FILE|DIR [--log ...] [FILE|DIR ...] | --store URL [--since D] [--until D] [filters]
                  [--workers N] [--examples N] [--policies DIR] [--schemas DIR] [--format text|json]
                  filters: [--decision NAME] [--outcome O] [--reason R] [--revision PREFIX] [--caller C]
                  [--replica ID] [--path P] [--input "/run/runId = run-7f3a" ...]
  arbiter decisions --store URL [--since D] [--until D] [filters] [--limit N] [--before CURSOR]
                  [--format text|json]   (every replica's stored decisions, newest first)
                  filters: [--decision NAME] [--outcome O] [--reason R] [--revision PREFIX] [--caller C]
                  [--replica ID] [--path P] [--input "/run/runId = run-7f3a" ...]
  arbiter diff    OLD NEW [--format text|json] [--schemas DIR] [--tests DIR] [--solver z3,cvc5] [--budget D]
                  (does an edit open an allowance? proved absent, or an example)
  arbiter bench   --decision NAME --input FILE|- [--duration D] [--max-body-bytes N] [--max-input-values N]
                  [--policies DIR] [--schemas DIR] [--format text|json]
  arbiter status  [--server URL] [--token T] [--tls-ca-file F] [--format text|json]
                  (the running server's revision, last reload and bundles)
  arbiter reloads [--server URL] [--token T] [--tls-ca-file F] [--format text|json]
                  (its reload history, newest first)
  arbiter shadow  load DIR|BUNDLE [--schemas DIR] [--tests DIR] | status | promote [--force] [--revision REV]
                  | clear  [--server URL] [--token T] [--tls-ca-file F] [--format text|json]
  arbiter version

Every command takes -h. status, reloads and shadow talk to a running arbiter serve
(--server, default http://127.0.0.1:8181; ARBITER_SERVER, ARBITER_TOKEN); an error
answer prints its code and message and exits 2. Folders default to the policies/, schemas/ and
policy_test/ of the working directory, or of the root of its git repository
(ARBITER_POLICIES, ARBITER_SCHEMAS and ARBITER_TESTS override them).
`

// Exit codes. Each command documents which it uses.
const (
	exitOK          = 0
	exitError       = 1
	exitInput       = 2   // eval, bench: the input was refused; replay: bad arguments or log
	exitSkipped     = 3   // replay: nothing changed, but records or lines were skipped
	exitUnlogged    = 3   // serve: stopped, but decision records were not written
	exitInterrupted = 130 // SIGINT or SIGTERM stopped a command other than serve
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// subcommand is one entry of the command table.
type subcommand struct {
	name string
	run  func(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int
	// stopsItself: the command handles a signal on its own (serve finishes
	// the requests in flight and drains the decision log first); any other
	// command is stopped at once by run.
	stopsItself bool
}

// commands is every command of arbiter, in the order of the usage text: run
// dispatches on it and the tests walk it, so that a new command is held to
// what every command promises (-h, and a signal stops it) without a test edit.
var commands = []subcommand{
	{"serve", func(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) int {
		return cmdServe(ctx, args, stdout, stderr)
	}, true},
	{"eval", cmdEval, false},
	{"check", func(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) int {
		return cmdCheck(ctx, args, stdout, stderr)
	}, false},
	{"test", func(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) int {
		return cmdTest(ctx, args, stdout, stderr)
	}, false},
	{"build", func(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) int {
		return cmdBuild(ctx, args, stdout, stderr)
	}, false},
	{"replay", func(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) int {
		return cmdReplay(ctx, args, stdout, stderr)
	}, false},
	{"decisions", func(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) int {
		return cmdDecisions(ctx, args, stdout, stderr)
	}, false},
	{"diff", func(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) int {
		return cmdDiff(ctx, args, stdout, stderr)
	}, false},
	{"bench", cmdBench, false},
	{"status", cmdStatus, false},
	{"reloads", cmdReloads, false},
	{"shadow", cmdShadow, false},
	{"version", func(_ context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) int {
		return cmdVersion(args, stdout, stderr)
	}, false},
}

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitError
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "--version":
		cmd = "version"
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return exitOK
	}
	i := slices.IndexFunc(commands, func(c subcommand) bool { return c.name == cmd })
	if i < 0 {
		fmt.Fprintf(stderr, "arbiter: unknown command %q\n\n%s", cmd, usage)
		return exitError
	}
	c := commands[i]
	if c.stopsItself {
		return c.run(ctx, rest, stdin, stdout, stderr)
	}
	// The other commands hold nothing that needs a clean stop, and may be
	// blocked in a read that never ends (a FIFO, a terminal): a signal
	// stops them at once, whatever they are doing.
	done := make(chan int, 1)
	go func() { done <- c.run(ctx, rest, stdin, stdout, stderr) }()
	select {
	case code := <-done:
		return code
	case <-ctx.Done():
		fmt.Fprintf(stderr, "arbiter %s: interrupted\n", cmd)
		return exitInterrupted
	}
}
