package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

// command is one subcommand's flag set, with the flags that an environment
// variable may set (ARBITER_ + the flag name in upper case, - as _, unless
// the flag names its variable: fromEnvAs).
type command struct {
	*flag.FlagSet
	operands []string // the arguments that are not flags, in order
	synopsis string
	env      []string
	envKeys  map[string]string // flag name -> its variable, where fromEnvAs named it
}

func newCommand(name, synopsis string) *command {
	c := &command{FlagSet: flag.NewFlagSet(name, flag.ContinueOnError), synopsis: synopsis}
	c.Usage = func() {
		fmt.Fprintln(c.Output(), strings.TrimSpace("Usage: arbiter "+name+" "+synopsis))
		hasFlags := false
		c.VisitAll(func(*flag.Flag) { hasFlags = true })
		if hasFlags {
			fmt.Fprintf(c.Output(), "\nFlags:\n")
			c.PrintDefaults()
		}
		if len(c.env) > 0 {
			fmt.Fprintf(c.Output(), "\nEnvironment (the flag wins):\n")
			for _, n := range c.env {
				fmt.Fprintf(c.Output(), "  %s\tfor -%s\n", c.envKey(n), n)
			}
		}
	}
	return c
}

// flagSetWatcher is a stdout that wants to see each command's flag set,
// complete, before it is parsed: TestFlagDocs renders docs/CLI.md's flag
// tables from the flag sets themselves, so the tables cannot drift from
// the code (and no global holds a test hook).
type flagSetWatcher interface{ sawFlags(*command) }

// fromEnv marks flags that their environment variable sets.
func (c *command) fromEnv(names ...string) { c.env = append(c.env, names...) }

// fromEnvAs marks a flag that the variable key sets, when the flag's own
// name would make another: one variable for one setting across commands
// (--store of the tools reads ARBITER_DECISION_STORE, as serve's
// --decision-store does).
func (c *command) fromEnvAs(name, key string) {
	c.fromEnv(name)
	if c.envKeys == nil {
		c.envKeys = map[string]string{}
	}
	c.envKeys[name] = key
}

// envKey is the variable that sets the flag name.
func (c *command) envKey(name string) string {
	if k, ok := c.envKeys[name]; ok {
		return k
	}
	return envName(name)
}

func envName(flagName string) string {
	return "ARBITER_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// parseInterspersed parses flags wherever they stand among the operands
// (arbiter diff OLD NEW --format json), as OPA's and most CLIs do; "--"
// ends the flags, and what follows it is operands only.
func (c *command) parseInterspersed(args []string) error {
	c.operands = nil
	for {
		if err := c.Parse(args); err != nil {
			return err
		}
		rest := c.FlagSet.Args()
		if len(rest) == 0 {
			return nil
		}
		// Parse stops at the first operand, or after "--" (which it drops).
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			c.operands = append(c.operands, rest...)
			return nil
		}
		c.operands = append(c.operands, rest[0])
		args = rest[1:]
	}
}

// Args are the operands: the arguments that are not flags.
func (c *command) Args() []string { return c.operands }

// NArg is how many operands there are.
func (c *command) NArg() int { return len(c.operands) }

// Arg is the i-th operand, "" past the end.
func (c *command) Arg(i int) string {
	if i < 0 || i >= len(c.operands) {
		return ""
	}
	return c.operands[i]
}

// parse applies the environment, then the arguments (which win). A value
// the flag does not accept is an error, from the environment as from the
// command line: ARBITER_MAX_BODY_BYTES=32MiB must not silently mean the
// default. It returns done when the command should stop with code: after
// -h (usage on stdout, 0) or on a bad flag or variable (stderr, bad).
func (c *command) parse(args []string, stdout, stderr io.Writer, bad int) (done bool, code int) {
	if w, ok := stdout.(flagSetWatcher); ok {
		w.sawFlags(c)
	}
	c.SetOutput(io.Discard) // errors are printed once, below
	for _, name := range c.env {
		key := c.envKey(name)
		if v, ok := os.LookupEnv(key); ok {
			if err := c.Set(name, v); err != nil {
				fmt.Fprintf(stderr, "arbiter %s: %s=%q: %v\n", c.Name(), key, v, err)
				return true, bad
			}
		}
	}
	err := c.parseInterspersed(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		c.SetOutput(stdout)
		c.Usage()
		return true, exitOK
	case err != nil:
		fmt.Fprintf(stderr, "arbiter %s: %v\n", c.Name(), err)
		c.SetOutput(stderr)
		c.Usage()
		return true, bad
	}
	c.SetOutput(stderr)
	return false, 0
}
