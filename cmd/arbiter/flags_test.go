package main

import (
	"context"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/arbiter-dev/arbiter/decisionlog"
)

// TestFlagsAmongOperands: a command's flags may stand before, between or
// after its operands (arbiter diff OLD NEW --format json, arbiter replay
// var/ --format json), and "--" makes what follows operands only.
func TestFlagsAmongOperands(t *testing.T) {
	for _, tc := range []struct {
		args     []string
		format   string
		operands []string
	}{
		{[]string{"--format", "json", "old", "new"}, "json", []string{"old", "new"}},
		{[]string{"old", "new", "--format", "json"}, "json", []string{"old", "new"}},
		{[]string{"old", "--format=json", "new"}, "json", []string{"old", "new"}},
		{[]string{"old", "-", "new"}, "text", []string{"old", "-", "new"}},
		{[]string{"old", "--", "--format", "json"}, "text", []string{"old", "--format", "json"}},
		{[]string{"--", "--format"}, "text", []string{"--format"}},
		{nil, "text", nil},
	} {
		c := diffCommand()
		if err := c.ParseFlags(tc.args); err != nil {
			t.Fatalf("%q: %v", tc.args, err)
		}
		format, _ := c.GetString("format")
		if format != tc.format || !slices.Equal(c.Args(), tc.operands) || c.NArg() != len(tc.operands) {
			t.Errorf("%q: --format %q, operands %q; want %q, %q", tc.args, format, c.Args(), tc.format, tc.operands)
		}
	}
}

// TestMistypedCommandLine: a mistyped command or flag is refused with the
// command's exit status for bad arguments, what was likely meant and the
// command's usage line, not every flag; -h has those. Go's flag package
// took one dash before a long flag, pflag takes two: -format suggests
// --format.
func TestMistypedCommandLine(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want []string
	}{
		{[]string{"serv"}, exitError, []string{`unknown command "serv"`, "serve", "Usage: arbiter [command]"}},
		{[]string{"diff", "old", "new", "--fromat", "json"}, exitInput, []string{"unknown flag: --fromat", "--format", "Usage: arbiter diff OLD NEW [flags]"}},
		{[]string{"eval", "-format", "text"}, exitError, []string{"--format", "Usage: arbiter eval --decision NAME --input FILE|- [flags]"}},
		{[]string{"shadow", "promot"}, exitError, []string{"did you mean promote?"}},
		{[]string{"test", "--verbos"}, exitError, []string{"--verbose"}},
	} {
		var stdout, stderr strings.Builder
		code := run(context.Background(), tc.args, strings.NewReader(""), &stdout, &stderr)
		if code != tc.code || stdout.Len() > 0 {
			t.Errorf("arbiter %q: exit %d, stdout %q; want exit %d, nothing on stdout", tc.args, code, stdout.String(), tc.code)
		}
		for _, w := range tc.want {
			if !strings.Contains(stderr.String(), w) {
				t.Errorf("arbiter %q: stderr lacks %q:\n%s", tc.args, w, stderr.String())
			}
		}
		if lines := strings.Count(stderr.String(), "\n"); lines > 8 {
			t.Errorf("arbiter %q: %d lines on stderr, want the usage line, not every flag:\n%s", tc.args, lines, stderr.String())
		}
	}
}

// TestFormatIsTextOrJSON: every command with --format refuses any other
// value the same way, before it runs: the flag's error, the command's usage
// line and its exit status for a bad flag, nothing on stdout.
func TestFormatIsTextOrJSON(t *testing.T) {
	root, byCobra := rootCommand(nil, nil, nil)
	var seen int
	for _, cc := range root.Commands() {
		for _, cc := range append([]*cobra.Command{cc}, cc.Commands()...) {
			c := byCobra[cc]
			if c == nil || cc.Flags().Lookup("format") == nil {
				continue
			}
			seen++
			args := append(strings.Fields(strings.TrimPrefix(cc.CommandPath(), "arbiter ")), "--format", "yaml")
			var stdout, stderr strings.Builder
			code := run(context.Background(), args, strings.NewReader(""), &stdout, &stderr)
			want := `invalid argument "yaml" for "--format" flag: want text or json`
			if code != c.bad || stdout.Len() > 0 || !strings.Contains(stderr.String(), want) || !strings.Contains(stderr.String(), "Usage: ") {
				t.Errorf("arbiter %q: exit %d (want %d), stdout %q, stderr:\n%s", args, code, c.bad, stdout.String(), stderr.String())
			}
		}
	}
	if seen < 7 {
		t.Errorf("%d commands have --format, want the 7 known and more", seen)
	}
}

// TestCompletion: arbiter completion writes cobra's completion script for
// each shell, naming the commands.
func TestCompletion(t *testing.T) {
	for _, shell := range []string{"bash", "zsh", "fish"} {
		var stdout, stderr strings.Builder
		if code := run(context.Background(), []string{"completion", shell}, strings.NewReader(""), &stdout, &stderr); code != exitOK || !strings.Contains(stdout.String(), "arbiter") {
			t.Errorf("arbiter completion %s: exit %d, %d bytes\n%s", shell, code, stdout.Len(), stderr.String())
		}
	}
	var stdout strings.Builder
	if code := run(context.Background(), []string{"__complete", "sha"}, strings.NewReader(""), &stdout, io.Discard); code != exitOK || !strings.Contains(stdout.String(), "shadow") {
		t.Errorf("completing arbiter sha: exit %d %q", code, stdout.String())
	}
}

// TestReplicaIDIsBounded: a replica's id is a stored name (the decision
// store indexes it), so serve refuses one past decisionlog.MaxNameBytes.
func TestReplicaIDIsBounded(t *testing.T) {
	long := strings.Repeat("r", decisionlog.MaxNameBytes+1)
	if err := validateServe(t, "--replica-id", long); err == nil || !strings.Contains(err.Error(), "--replica-id") {
		t.Errorf("a %d-byte --replica-id: %v; want it refused", len(long), err)
	}
	if err := validateServe(t, "--replica-id", "replica-1"); err != nil {
		t.Errorf("--replica-id replica-1: %v", err)
	}
}

// TestMissingFolderNamesItsFlag: every command that loads the folders says,
// of a policy folder that does not exist, which flag or variable sets it.
func TestMissingFolderNamesItsFlag(t *testing.T) {
	t.Chdir(t.TempDir())
	for _, args := range [][]string{
		{"eval", "--decision", "d", "--input", "-"}, {"bench", "--decision", "d", "--input", "-"},
		{"check"}, {"test"}, {"build"}, {"replay", "--log", "var"},
	} {
		var stdout, stderr strings.Builder
		code := run(context.Background(), args, strings.NewReader("{}"), &stdout, &stderr)
		if code == exitOK || !strings.Contains(stderr.String(), "set it with --policies or ARBITER_POLICIES") {
			t.Errorf("arbiter %q in an empty folder: exit %d\n%s", args, code, stderr.String())
		}
	}
}

// TestServeNamesTheFirstNonPositiveFlag: of serve's flags that must be
// positive, a wrong one is named, and of two wrong the first in the list,
// the same one every run (they were checked in a map's random order).
func TestServeNamesTheFirstNonPositiveFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--test-timeout", "0"}, "--test-timeout must be positive"},
		{[]string{"--test-timeout", "0", "--max-body-bytes", "0", "--idle-timeout", "0"}, "--max-body-bytes must be positive"},
	} {
		for range 20 {
			if err := validateServe(t, tc.args...); err == nil || err.Error() != tc.want {
				t.Fatalf("serve %q: %v, want %q", tc.args, err, tc.want)
			}
		}
	}
}

// TestServeBundleFlagsNeedABundle: the bundle flags are checked for the
// shadow's bundle as for the live one (they verify and poll both). The
// polling flags are refused when no bundle is polled; the verification key
// and the size limits are not, and are checked then too: they verify and
// bound the bundle files POST /v1/shadow {"bundle"} (arbiter shadow load
// BUNDLE) reads, with no URL as with one, and --bundle-name names the
// revision in the uploaded events.
func TestServeBundleFlagsNeedABundle(t *testing.T) {
	_, public := writeKeyPair(t, t.TempDir())
	for _, tc := range []struct {
		args []string
		want string // "" accepted
	}{
		{[]string{"--bundle-verification-key-file", public}, ""},
		{[]string{"--bundle-verification-key-file", "/nonexistent/key.pem"}, "--bundle-verification-key-file: "},
		{[]string{"--bundle-verification-key-id", "k1"}, "--bundle-verification-key-file: "},
		{[]string{"--bundle-max-files", "0"}, "--bundle-max-bytes, "},
		{[]string{"--bundle-max-files", "10", "--bundle-poll-min-delay", "30s"}, "--bundle-poll-min-delay needs --bundle-url or --shadow-bundle-url"},
		{[]string{"--bundle-download-timeout", "5s"}, "--bundle-download-timeout needs --bundle-url or --shadow-bundle-url"},
		{[]string{"--decision-log-service", "http://logs", "--bundle-name", "live"}, ""},
		{[]string{"--shadow-bundle-url", "http://b/x.tar.gz", "--bundle-poll-min-delay", "0s"}, "--bundle-poll-min-delay must be at least 1s"},
		{[]string{"--shadow-bundle-url", "http://b/x.tar.gz", "--bundle-max-bytes", "0"}, "--bundle-max-bytes, "},
		{[]string{"--shadow-bundle-url", "http://b/x.tar.gz", "--bundle-verification-key-file", "/nonexistent/key.pem"}, "--bundle-verification-key-file: "},
		{[]string{"--bundle-url", "http://b/x.tar.gz", "--bundle-poll-min-delay", "0s"}, "--bundle-poll-min-delay must be at least 1s"},
		{[]string{"--shadow-bundle-url", "http://b/x.tar.gz", "--bundle-poll-min-delay", "30s", "--bundle-poll-max-delay", "60s"}, ""},
		{[]string{"--bundle-url", "http://b/x.tar.gz", "--bundle-name", "live"}, ""},
		{nil, ""},
	} {
		err := validateServe(t, tc.args...)
		if (tc.want == "") != (err == nil) || err != nil && !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("serve %q: %v, want %q", tc.args, err, tc.want)
		}
	}
}

// validateServe is what serve's validation says of the command line args.
func validateServe(t *testing.T, args ...string) error {
	t.Helper()
	fs := newCommand("serve", "", "", exitError)
	c := registerServe(fs)
	if err := fs.ParseFlags(args); err != nil {
		t.Fatal(err)
	}
	return c.validate(fs)
}
