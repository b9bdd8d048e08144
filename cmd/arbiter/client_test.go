package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/arbiter-dev/arbiter/decisionlog"

	"github.com/arbiter-dev/arbiter/internal/golden"
	"github.com/arbiter-dev/arbiter/internal/ruleedit"
	"github.com/arbiter-dev/arbiter/internal/wait"
	"github.com/arbiter-dev/arbiter/policybundle"
)

var (
	timeRE = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z`)
	addrRE = regexp.MustCompile(`127\.0\.0\.1:\d+`)
	upRE   = regexp.MustCompile(`(?m)^uptime .*$`)
	// What a run measures, the memory budgets this machine's cgroup sizes
	// and the binary's version: not the golden file's (the JSON check
	// holds them).
	measuredRE = regexp.MustCompile(`(?m)\(in [^,)]+|^time  .*$|^memory/.*\n|^version  .*$`)
)

// TestClientCommandsGolden: what arbiter status, reloads and shadow print
// against the real binary serving the shadow tests' decision, through a
// candidate's life: none, refused by the gate, loaded, judged, refused by
// the promotion gate (exit 2, its code, message and refusals), promoted
// by force, and the history that leaves; as
// testdata/golden/client_commands.golden records it (times, addresses,
// decision ids, revisions and the temporary folders masked). After an
// intended change: go test ./cmd/arbiter/ -run TestClientCommandsGolden -update
func TestClientCommandsGolden(t *testing.T) {
	t.Parallel()
	live, cand := copyAccess(t), mixedCandidate(t)
	broken := copyAccess(t)
	replaceAll(t, broken, "policies/decisions/access_check/policy.rego", "reasons := [", "reasons := [[")
	bundleDir := t.TempDir()
	s := startServer(t, accessArgs(live)...)
	revisions := map[string]string{}
	var out bytes.Buffer
	run := func(args ...string) {
		stdout, stderr, code := runCLI(t, nil, append(args, "--server", s.url)...)
		fmt.Fprintf(&out, "### arbiter %s\nexit %d\n%s%s\n", strings.Join(args, " "), code, stdout, stderr)
		if code != exitOK || args[0] == "shadow" && args[1] != "status" {
			return // not a read: asked again, it would answer otherwise
		}
		js, stderr, code := runCLI(t, nil, append(args, "--server", s.url, "--format", "json")...)
		var doc any
		if err := json.Unmarshal([]byte(js), &doc); code != exitOK || err != nil {
			t.Fatalf("arbiter %s --format json: exit %d, %v\n%s", strings.Join(args, " "), code, err, stderr)
		}
		textHasJSON(t, strings.Join(args, " "), stdout, "", doc)
	}
	mask := func() []byte {
		text := upRE.ReplaceAllString(out.String(), "uptime     <uptime>")
		text = measuredRE.ReplaceAllStringFunc(text, func(m string) string {
			switch {
			case strings.HasPrefix(m, "(in "):
				return "(in <duration>"
			case strings.HasPrefix(m, "time"):
				return "time       <measured>"
			case strings.HasPrefix(m, "version"):
				return "version    <version>"
			}
			return ""
		})
		text = timeRE.ReplaceAllString(text, "<time>")
		text = addrRE.ReplaceAllString(text, "<addr>")
		for rev, name := range revisions {
			text = strings.ReplaceAll(text, rev, name)
		}
		for dir, name := range map[string]string{live: "$LIVE", cand: "$CANDIDATE", broken: "$BROKEN", bundleDir: "$BUNDLES"} {
			text = strings.ReplaceAll(text, dir, name)
		}
		return golden.Mask([]byte(text), "")
	}
	_, st := getJSON(t, s.url+"/v1/status")
	revisions[st["policy_revision"].(string)] = "<live>"

	run("status")
	run("shadow", "status")
	run("shadow", "promote")
	run("shadow", "load", filepath.Join(broken, "policies"), "--schemas", filepath.Join(broken, "schemas"), "--tests", filepath.Join(broken, "tests"))
	run("shadow", "load", filepath.Join(cand, "policies"), "--schemas", filepath.Join(cand, "schemas"), "--tests", filepath.Join(cand, "tests"))
	_, sh := getJSON(t, s.url+"/v1/shadow")
	revisions[sh["candidate"].(map[string]any)["policy_revision"].(string)] = "<candidate>"

	bodies := []string{`{"tenant":"a","used":3}`, `{"tenant":"b","used":10}`, `{"tenant":"c","used":50}`, `{"tenant":"z","used":1}`, `{"tenant":"e","used":-1}`}
	for _, b := range bodies {
		post(t, http.DefaultClient, s.url+"/v1/decisions/access_check", []byte(b))
	}
	wait.Until(t, time.Minute, "every decision judged", func() bool {
		_, raw := getJSON(t, s.url+"/v1/shadow")
		st, _ := raw["stats"].(map[string]any)
		return st != nil && st["judged"] == float64(len(bodies)) && st["queued"] == float64(0)
	})
	run("shadow", "status")
	run("shadow", "promote")
	run("shadow", "promote", "--force")
	run("shadow", "clear")
	raw, _, err := policybundle.Build(context.Background(), policybundle.BuildOptions{
		Policies: filepath.Join(cand, "policies"), Schemas: filepath.Join(cand, "schemas"), Tests: filepath.Join(cand, "tests"), Revision: "cand-bundle-1",
	})
	if err != nil {
		t.Fatal(err)
	}
	run("shadow", "load", writeFile(t, bundleDir, "candidate.tar.gz", raw))
	run("shadow", "clear")
	run("reloads")
	run("shadow", "bogus")
	golden.Check(t, "testdata/golden/client_commands.golden", mask())
}

// textHasJSON: every string and number of the JSON answer doc (at the
// pointer at) is in the text the same command printed: what --format json
// shows, --format text shows too. A time is looked for to the second, as
// RFC 3339; the members named in shownOtherwise are in the text in
// another form.
func textHasJSON(t *testing.T, cmd, text, at string, doc any) {
	t.Helper()
	shownOtherwise := map[string]string{
		"uptime_seconds": "a duration in seconds (uptime 3s)",
		"duration_ns":    "a duration (in 499.6ms)",
		"seconds":        "how long one run took: the text and the JSON are two runs (arbiter diff)",
	}
	switch v := doc.(type) {
	case map[string]any:
		for k, e := range v {
			if _, ok := shownOtherwise[k]; !ok {
				textHasJSON(t, cmd, text, at+"/"+k, e)
			}
		}
	case []any:
		for i, e := range v {
			textHasJSON(t, cmd, text, fmt.Sprintf("%s/%d", at, i), e)
		}
	case string:
		want := v
		if tm, err := time.Parse(time.RFC3339Nano, v); err == nil {
			want = tm.UTC().Format(time.RFC3339)[:len("2006-01-02T15:04:05")]
		}
		if !strings.Contains(text, want) && !strings.Contains(text, decisionlog.Shown(v)) {
			t.Errorf("arbiter %s: --format json has %s = %q, the text lacks it:\n%s", cmd, at, v, text)
		}
	case float64:
		if want := strconv.FormatFloat(v, 'f', -1, 64); !strings.Contains(text, want) {
			t.Errorf("arbiter %s: --format json has %s = %s, the text lacks it:\n%s", cmd, at, want, text)
		}
	}
}

// The commands for a running server send ARBITER_TOKEN as the bearer
// token; a wrong one is answered unauthorized, printed as its code and
// message, exit 2.
func TestClientCommandsToken(t *testing.T) {
	ruleedit.Skip(t)
	t.Parallel()
	const secret = "s3cret-ops-cli-5e1d"
	args, _ := quickArgs(t)
	tokenFile := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokenFile, []byte("ops "+secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, append(args, "--auth-token-file", tokenFile)...)
	for _, tc := range []struct {
		token string
		code  int
		want  string
	}{
		{secret, exitOK, "revision "},
		{"wrong", exitRefused, "arbiter reloads: unauthorized: "},
		{"", exitRefused, "arbiter reloads: unauthorized: "},
	} {
		cmd := exec.Command(binPath, "reloads", "--server", s.url)
		if tc.token == secret {
			cmd = exec.Command(binPath, "status", "--server", s.url)
		}
		cmd.Env = append(os.Environ(), "ARBITER_TOKEN="+tc.token)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		_ = cmd.Run()
		if code := cmd.ProcessState.ExitCode(); code != tc.code || !strings.Contains(stdout.String()+stderr.String(), tc.want) {
			t.Errorf("token %q: exit %d\n%s%s\nwant exit %d and %q", tc.token, code, stdout.String(), stderr.String(), tc.code, tc.want)
		}
	}
}
