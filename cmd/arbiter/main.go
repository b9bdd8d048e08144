// Command arbiter evaluates, checks, tests and serves Arbiter decisions.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	opaversion "github.com/open-policy-agent/opa/v1/version"
	"github.com/spf13/cobra"

	"github.com/arbiter-dev/arbiter/service"
)

// Exit codes. Each command documents which it uses.
const (
	exitOK          = 0
	exitError       = 1
	exitInput       = 2                    // eval, bench: the input was refused; replay: bad arguments or log
	exitSkipped     = 3                    // replay: nothing changed, but records or lines were skipped
	exitUnlogged    = service.ExitUnlogged // serve: stopped, but decision records were not written
	exitInterrupted = 130                  // SIGINT or SIGTERM stopped a command other than serve
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// commands builds arbiter's commands afresh, in the order of the reference
// pages (run is called many times in one test process): run dispatches on
// them and the tests walk them, so that a new command is held to what every
// command promises (-h, and a signal stops it) without a test edit.
func commands() []*command {
	return []*command{serveCommand(), evalCommand(), checkCommand(), testCommand(), buildCommand(),
		replayCommand(), decisionsCommand(), diffCommand(), benchCommand(), statusCommand(),
		reloadsCommand(), shadowCommand(), versionCommand()}
}

// rootCommand is arbiter and its commands, reading stdin and writing
// stdout and stderr (nil: the process's); byCobra finds each one's command
// of this file by its cobra command.
func rootCommand(stdin io.Reader, stdout, stderr io.Writer) (root *cobra.Command, byCobra map[*cobra.Command]*command) {
	root = &cobra.Command{
		Use:   "arbiter",
		Short: "A policy decision service: Rego policies over schema-validated input",
		Long: `arbiter: a policy decision service (Rego policies over schema-validated input).

status, reloads and shadow talk to a running arbiter serve (--server, default
http://127.0.0.1:8181; ARBITER_SERVER, ARBITER_TOKEN); an error answer prints its code and
message and exits 2. Folders default to the policies/, schemas/ and policy_test/ of the
working directory, or of the root of its git repository (ARBITER_POLICIES, ARBITER_SCHEMAS
and ARBITER_TESTS override them). A flag's [$ARBITER_...] variable sets it when the
command line does not.`,
		Version:           buildVersion() + " (opa " + opaversion.Version + ")",
		SilenceErrors:     true,
		SilenceUsage:      true,
		DisableAutoGenTag: true, // the reference pages stay the same from one day to the next
	}
	root.SetVersionTemplate("arbiter {{.Version}}\n")
	root.SetFlagErrorFunc(flagError)
	byCobra = map[*cobra.Command]*command{}
	for _, c := range commands() {
		root.AddCommand(c.Command)
		byCobra[c.Command] = c
		for _, sub := range c.subs {
			c.AddCommand(sub.Command)
			byCobra[sub.Command] = sub
		}
	}
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	// Before ExecuteC would: the reference pages show them too, and the
	// completion command takes its output when it is made.
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	return root, byCobra
}

// run runs the command line args: the entry of main and of the tests.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root, byCobra := rootCommand(stdin, stdout, stderr)
	root.SetArgs(args)
	if len(args) == 0 {
		root.SetOut(stderr)
		_ = root.Help()
		return exitError
	}
	cc, err := root.ExecuteContextC(ctx)
	c := byCobra[cc]
	if err == nil {
		if c == nil || c.run == nil { // help, completion, --version
			return exitOK
		}
		return c.code
	}
	// A mistyped command or flag: the error, what was likely meant, and
	// the command's usage line; not every flag (-h has them).
	fmt.Fprintf(stderr, "%s: %v\n", cc.CommandPath(), strings.TrimRight(err.Error(), "\n"))
	use := cc.UseLine()
	if !cc.Runnable() {
		use = cc.CommandPath() + " [command]"
	}
	fmt.Fprintf(stderr, "Usage: %s\nRun '%s --help' for more.\n", use, cc.CommandPath())
	if c == nil {
		return exitError
	}
	return c.bad
}

// say prints one line, a format and its values, on w and returns code:
// most commands end so, an error on stderr and their exit status.
func say(w io.Writer, code int, format string, a ...any) int {
	fmt.Fprintf(w, format+"\n", a...)
	return code
}
