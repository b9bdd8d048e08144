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
  arbiter eval    --decision NAME --input FILE|- [--explain] [--policies DIR] [--schemas DIR]
  arbiter check   [--policies DIR] [--schemas DIR] [--tests DIR]
  arbiter test    [--policies DIR] [--schemas DIR] [--tests DIR] [--coverage] [--threshold N]
                  [--run REGEX] [--format text|json] [-v]
  arbiter build   [--output FILE] [--revision REV] [--signing-key KEY [--signing-alg ALG]]
                  [--policies DIR] [--schemas DIR] [--tests DIR]   (an OPA bundle of one revision)
  arbiter replay  --log FILE [--policies DIR] [--schemas DIR] [--format text|json]
  arbiter bench   --decision NAME --input FILE|- [--duration D] [--format text|json]
  arbiter version

Folders default to the policies/, schemas/ and policy_test/ of the repository
that contains the working directory (ARBITER_POLICIES, ARBITER_SCHEMAS and
ARBITER_TESTS override them).
`

// Exit codes of every command.
const (
	exitOK    = 0
	exitError = 1
	exitInput = 2 // eval: malformed input or schema violation
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
	switch cmd {
	case "serve":
		return cmdServe(ctx, rest, stdout, stderr)
	case "eval":
		return cmdEval(ctx, rest, stdin, stdout, stderr)
	case "bench":
		return cmdBench(ctx, rest, stdin, stdout, stderr)
	case "check":
		return cmdCheck(ctx, rest, stdout, stderr)
	case "test":
		return cmdTest(ctx, rest, stdout, stderr)
	case "replay":
		return cmdReplay(ctx, rest, stdout, stderr)
	case "build":
		return cmdBuild(ctx, rest, stdout, stderr)
	case "version", "--version":
		return cmdVersion(stdout)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return exitOK
	default:
		fmt.Fprintf(stderr, "arbiter: unknown command %q\n\n%s", cmd, usage)
		return exitError
	}
}
