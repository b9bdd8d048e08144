// Command arbiter evaluates, checks, tests and serves Arbiter decisions.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

const usage = `arbiter: a policy decision service (Rego policies over schema-validated input)

Usage:
  arbiter serve   [--addr HOST:PORT] [--policies DIR] [--schemas DIR] [--tests DIR]
                  [--decision-log PATH|-] [--max-body-bytes N] [--eval-timeout D]
                  [--auth-token-file F] [--tls-cert-file F --tls-key-file F [--tls-client-ca-file F]]
                  [--insecure-listen]   (see arbiter serve -h for every flag)
  arbiter eval    --decision NAME --input FILE|- [--explain] [--max-body-bytes N] [--policies DIR] [--schemas DIR]
  arbiter check   [--policies DIR] [--schemas DIR] [--tests DIR]
  arbiter test    [--policies DIR] [--schemas DIR] [--tests DIR] [--coverage] [--threshold N]
                  [--run REGEX] [--format text|json] [-v]
  arbiter build   [--output FILE] [--revision REV] [--signing-key KEY [--signing-alg ALG]]
                  [--policies DIR] [--schemas DIR] [--tests DIR]   (an OPA bundle of one revision)
  arbiter replay  --log FILE|DIR [--log ...] [FILE|DIR ...] [--policies DIR] [--schemas DIR] [--format text|json]
  arbiter bench   --decision NAME --input FILE|- [--duration D] [--max-body-bytes N] [--format text|json]
  arbiter version

Every command takes -h. Folders default to the policies/, schemas/ and
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

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitError
	}
	cmd, rest := args[0], args[1:]
	var fn func() int
	switch cmd {
	case "serve":
		// serve stops itself on a signal: it finishes the requests in
		// flight and drains the decision log first.
		return cmdServe(ctx, rest, stdout, stderr)
	case "eval":
		fn = func() int { return cmdEval(ctx, rest, stdin, stdout, stderr) }
	case "bench":
		fn = func() int { return cmdBench(ctx, rest, stdin, stdout, stderr) }
	case "check":
		fn = func() int { return cmdCheck(ctx, rest, stdout, stderr) }
	case "test":
		fn = func() int { return cmdTest(ctx, rest, stdout, stderr) }
	case "replay":
		fn = func() int { return cmdReplay(ctx, rest, stdout, stderr) }
	case "build":
		fn = func() int { return cmdBuild(ctx, rest, stdout, stderr) }
	case "version", "--version":
		return cmdVersion(stdout)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return exitOK
	default:
		fmt.Fprintf(stderr, "arbiter: unknown command %q\n\n%s", cmd, usage)
		return exitError
	}
	// The other commands hold nothing that needs a clean stop, and may be
	// blocked in a read that never ends (a FIFO, a terminal): a signal
	// stops them at once, whatever they are doing.
	done := make(chan int, 1)
	go func() { done <- fn() }()
	select {
	case code := <-done:
		return code
	case <-ctx.Done():
		fmt.Fprintf(stderr, "arbiter %s: interrupted\n", cmd)
		return exitInterrupted
	}
}
