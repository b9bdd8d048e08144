package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/agnivade/levenshtein"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// command is one arbiter command: its cobra command with its flag set at
// hand (c.StringVar, c.Args), the exit status of a bad flag, variable or
// argument, and what it runs once its flags and variables are parsed.
type command struct {
	*cobra.Command
	*pflag.FlagSet
	bad int
	// stopsItself: the command handles a signal on its own (serve finishes
	// the requests in flight and drains the decision log first); any other
	// command is stopped at once.
	stopsItself bool
	run         func(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer) int
	code        int        // what run returned
	subs        []*command // shadow's load, status, promote, clear
}

// newCommand is a command of the line use ("diff OLD NEW"), described by
// short (one line) and long (more, or ""), whose bad flags, variables and
// arguments exit bad. Its flags may stand anywhere among its operands
// (arbiter diff OLD NEW --format json), and "--" ends them.
func newCommand(use, short, long string, bad int) *command {
	c := &command{Command: &cobra.Command{Use: use, Short: short, Long: long}, bad: bad}
	c.FlagSet = c.Command.Flags()
	c.RunE = func(cc *cobra.Command, _ []string) error {
		c.code = c.execute(cc)
		return nil
	}
	return c
}

// Args are the operands: the arguments that are not flags, in order.
func (c *command) Args() []string { return c.FlagSet.Args() }

// execute applies the environment to the flags the command line left
// unset, then runs the command. Every command but one that stops itself
// is stopped at once by a signal, whatever it is doing: they hold nothing
// that needs a clean stop, and may be blocked in a read that never ends (a
// FIFO, a terminal).
func (c *command) execute(cc *cobra.Command) int {
	stdin, stdout, stderr := cc.InOrStdin(), cc.OutOrStdout(), cc.ErrOrStderr()
	if err := applyEnv(cc.Flags()); err != nil {
		return say(stderr, c.bad, "%s: %v", cc.CommandPath(), err)
	}
	ctx := cc.Context()
	if c.stopsItself {
		return c.run(ctx, stdin, stdout, stderr)
	}
	done := make(chan int, 1)
	go func() { done <- c.run(ctx, stdin, stdout, stderr) }()
	select {
	case code := <-done:
		// A run the signal cut short (its request cancelled) may end
		// first: it was interrupted all the same.
		if ctx.Err() == nil {
			return code
		}
	case <-ctx.Done():
	}
	return say(stderr, exitInterrupted, "%s: interrupted", cc.CommandPath())
}

// format registers --format: text or json, def when unset. Any other
// value is refused as the flag is parsed, from the command line or from
// its variable, as every bad flag is: the command's usage and its exit
// status for a bad flag.
func (c *command) format(def, usage string) *string {
	v := formatValue(def)
	c.Var(&v, "format", usage)
	return (*string)(&v)
}

// formatValue is --format's value, "string" in the usage as before.
type formatValue string

func (f *formatValue) String() string { return string(*f) }
func (f *formatValue) Type() string   { return "string" }
func (f *formatValue) Set(s string) error {
	if s != "text" && s != "json" {
		return fmt.Errorf("want text or json")
	}
	*f = formatValue(s)
	return nil
}

// envAnnotation is the annotation of a flag that names its variable.
const envAnnotation = "arbiter_env"

// fromEnv marks flags that their environment variable sets: ARBITER_ and
// the flag's name in upper case, - as _.
func (c *command) fromEnv(names ...string) {
	for _, n := range names {
		c.fromEnvAs(n, "ARBITER_"+strings.ToUpper(strings.ReplaceAll(n, "-", "_")))
	}
}

// fromEnvAll marks every flag registered so far that no variable sets
// yet, as fromEnv does.
func (c *command) fromEnvAll() {
	c.VisitAll(func(f *pflag.Flag) {
		if _, ok := f.Annotations[envAnnotation]; !ok {
			c.fromEnv(f.Name)
		}
	})
}

// fromEnvAs marks a flag that the variable key sets, when the flag's own
// name would make another: one variable for one setting across commands
// (--store of the tools reads ARBITER_DECISION_STORE, as serve's
// --decision-store does). The usage string names the variable, so that
// -h, the reference pages and the man pages show it.
func (c *command) fromEnvAs(name, key string) {
	f := c.Lookup(name)
	if f == nil {
		panic("fromEnv: no flag --" + name)
	}
	_ = c.SetAnnotation(name, envAnnotation, []string{key})
	f.Usage += " [$" + key + "]"
}

// applyEnv sets each flag that the command line left unset from its
// variable, as the command line would: a value the flag does not accept is
// an error naming the variable (ARBITER_MAX_BODY_BYTES=32MiB must not
// silently mean the default).
func applyEnv(fs *pflag.FlagSet) error {
	var err error
	fs.VisitAll(func(f *pflag.Flag) {
		key := f.Annotations[envAnnotation]
		if err != nil || f.Changed || len(key) == 0 {
			return
		}
		if v, ok := os.LookupEnv(key[0]); ok {
			if e := fs.Set(f.Name, v); e != nil {
				err = fmt.Errorf("%s=%q: %v", key[0], v, e)
			}
		}
	})
	return err
}

// flagError adds to an unknown flag the likeliest one meant, as cobra does
// for a command: "did you mean --format?" after --fromat, and after
// -format (Go's flag package took one dash before a long name; pflag,
// cobra's, takes two).
func flagError(cc *cobra.Command, err error) error {
	msg := err.Error()
	var typed string
	if name, ok := strings.CutPrefix(msg, "unknown flag: --"); ok {
		typed = name
	} else if _, word, ok := strings.Cut(msg, "' in -"); ok && strings.HasPrefix(msg, "unknown shorthand flag: ") {
		typed = word
	}
	typed, _, _ = strings.Cut(typed, "=")
	if typed == "" {
		return err
	}
	best, bestDist := "", 3 // at most two edits away, or a prefix
	cc.Flags().VisitAll(func(f *pflag.Flag) {
		d := levenshtein.ComputeDistance(typed, f.Name)
		if strings.HasPrefix(f.Name, typed) && len(typed) > 1 {
			d = min(d, 1)
		}
		if d < bestDist {
			best, bestDist = f.Name, d
		}
	})
	if best == "" {
		return err
	}
	return fmt.Errorf("%w\n\nDid you mean this?\n\t--%s", err, best)
}
