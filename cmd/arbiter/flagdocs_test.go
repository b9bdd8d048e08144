package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/arbiter-dev/arbiter/internal/golden"
)

const (
	flagsBegin = "<!-- BEGIN FLAGS -->\n"
	flagsEnd   = "<!-- END FLAGS -->\n"
)

// TestFlagDocs: docs/CLI.md's flag tables are what the flag sets of the
// command table render: every flag of every command, its environment
// variable, default and usage string. After changing a flag:
//
//	go test ./cmd/arbiter -run TestFlagDocs -update
//
// and review the diff of docs/CLI.md.
func TestFlagDocs(t *testing.T) {
	path := filepath.Join("..", "..", "docs", "CLI.md")
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	before, rest, ok := bytes.Cut(doc, []byte(flagsBegin))
	_, after, ok2 := bytes.Cut(rest, []byte(flagsEnd))
	if !ok || !ok2 {
		t.Fatalf("%s lacks the markers %q and %q around the flag tables", path, flagsBegin, flagsEnd)
	}
	var tables []byte
	t.Run("render", func(t *testing.T) { tables = renderFlagDocs(t) }) // its working directory is restored after it
	got := slices.Concat(before, []byte(flagsBegin), tables, []byte(flagsEnd), after)
	golden.Check(t, path, got)
}

// renderFlagDocs runs every command of the command table with -h and
// renders the flag set each one parsed. It runs them in a folder of its own
// that holds policies/ and schemas/, as the root of a checkout does, so that
// the folder defaults read as the relative folders whatever this machine's
// paths and the checkout's permissions; a default that is this machine's
// host name reads as such.
func renderFlagDocs(t *testing.T) []byte {
	dir := t.TempDir()
	for _, sub := range []string{"policies", "schemas"} {
		if err := os.Mkdir(filepath.Join(dir, sub), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	host, _ := os.Hostname()
	var b bytes.Buffer
	for _, sub := range commands {
		out := &flagSets{}
		if code := sub.run(context.Background(), []string{"-h"}, strings.NewReader(""), out, io.Discard); code != exitOK {
			t.Fatalf("arbiter %s -h: exit %d", sub.name, code)
		}
		seen := out.seen
		if seen == nil {
			t.Fatalf("arbiter %s -h parsed no flag set", sub.name)
		}
		fmt.Fprintf(&b, "### `arbiter %s`\n\n", sub.name)
		var rows []string
		seen.VisitAll(func(f *flag.Flag) {
			env := ""
			if slices.Contains(seen.env, f.Name) {
				env = "`" + seen.envKey(f.Name) + "`"
			}
			def := flagDefault(f)
			if host != "" && f.DefValue == host {
				def = "the host name"
			}
			dash := "--"
			if len(f.Name) == 1 {
				dash = "-"
			}
			rows = append(rows, fmt.Sprintf("| `%s%s` | %s | %s | %s |", dash, f.Name, env, def, cell(f.Usage)))
		})
		if len(rows) == 0 {
			b.WriteString("No flags.\n\n")
			continue
		}
		b.WriteString("| flag | environment | default | |\n|---|---|---|---|\n")
		b.WriteString(strings.Join(rows, "\n"))
		b.WriteString("\n\n")
	}
	return b.Bytes()
}

// flagSets is a stdout that keeps the flag set its command parsed.
type flagSets struct {
	bytes.Buffer
	seen *command
}

func (f *flagSets) sawFlags(c *command) { f.seen = c }

// flagDefault is a flag's default as a table cell: the flag package's own
// text, with byte counts that are whole MiB or GiB also in those units.
func flagDefault(f *flag.Flag) string {
	v := f.DefValue
	if v == "" {
		return ""
	}
	s := "`" + cell(v) + "`"
	if n, err := strconv.ParseInt(v, 10, 64); err == nil && (strings.Contains(f.Name, "bytes") || strings.Contains(f.Name, "memory")) {
		switch {
		case n >= 1<<30 && n%(1<<30) == 0:
			s += fmt.Sprintf(" (%d GiB)", n>>30)
		case n >= 1<<20 && n%(1<<20) == 0:
			s += fmt.Sprintf(" (%d MiB)", n>>20)
		}
	}
	return s
}

func cell(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "|", `\|`), "\n", " ")
}
