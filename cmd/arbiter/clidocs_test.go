package main

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
	"github.com/spf13/pflag"

	"github.com/arbiter-dev/arbiter/internal/golden"
)

var manDir = flag.String("man", "", "TestCLIDocs: also write the man pages of every command into this folder (make man)")

// TestCLIDocs: docs/cli/ holds the reference page of every command as
// cobra's doc package renders it from the command itself (its flags, their
// variables and defaults), and docs/CLI.md links each page. After changing
// a command:
//
//	go test ./cmd/arbiter -run TestCLIDocs -update
//
// and review the diff of docs/cli/. With -man DIR it writes the man pages
// there too (make man).
func TestCLIDocs(t *testing.T) {
	dir, err := filepath.Abs(filepath.Join("..", "..", "docs", "cli"))
	if err != nil {
		t.Fatal(err)
	}
	index, err := os.ReadFile(filepath.Join(dir, "..", "CLI.md"))
	if err != nil {
		t.Fatal(err)
	}
	var root *cobra.Command
	t.Run("build", func(t *testing.T) { root = docCommands(t) }) // its working directory is restored after it
	out := t.TempDir()
	if err := doc.GenMarkdownTreeCustom(root, out, func(string) string { return "" }, func(name string) string { return name }); err != nil {
		t.Fatal(err)
	}
	pages, err := os.ReadDir(out)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range pages {
		names = append(names, p.Name())
		got, err := os.ReadFile(filepath.Join(out, p.Name()))
		if err != nil {
			t.Fatal(err)
		}
		golden.Check(t, filepath.Join(dir, p.Name()), got)
		if !bytes.Contains(index, []byte("(cli/"+p.Name()+")")) {
			t.Errorf("docs/CLI.md does not link cli/%s", p.Name())
		}
	}
	committed, _ := filepath.Glob(filepath.Join(dir, "*.md"))
	for _, c := range committed {
		if !slices.Contains(names, filepath.Base(c)) {
			t.Errorf("docs/cli/%s is the page of no command: delete it", filepath.Base(c))
		}
	}
	if *manDir != "" {
		if err := os.MkdirAll(*manDir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := doc.GenManTree(root, &doc.GenManHeader{Title: "ARBITER", Section: "1", Source: "arbiter " + buildVersion()}, *manDir); err != nil {
			t.Fatal(err)
		}
		t.Logf("man pages in %s", *manDir)
	}
}

// docCommands builds the commands in a folder of their own that holds
// policies/ and schemas/, as the root of a checkout does, so that the folder
// defaults read as the relative folders whatever this machine's paths and
// the checkout's permissions; a default that is this machine's host name
// reads as such.
func docCommands(t *testing.T) *cobra.Command {
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
	root, _ := rootCommand(nil, nil, nil)
	host, _ := os.Hostname()
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.Flags().VisitAll(func(f *pflag.Flag) {
			if host != "" && f.DefValue == host {
				f.DefValue = "the host name"
			}
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	if strings.Contains(root.Long, dir) {
		t.Fatalf("the root's text names the test's folder %s", dir)
	}
	return root
}
