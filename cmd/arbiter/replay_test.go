package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/arbiter-dev/arbiter/decisionlog"
	"github.com/arbiter-dev/arbiter/engine"
	"github.com/arbiter-dev/arbiter/replay"
)

const (
	quotaPolicies = "../../engine/testdata/quota/policies"
	quotaSchemas  = "../../engine/testdata/quota/schemas"
)

// loggedRequest is one request to log: its body, the path it came on, and
// the id to log it under.
type loggedRequest struct {
	id, path, body string
}

// writeQuotaLog decides each request with the quota test policies, as the
// server does, and writes the records through a decisionlog.Logger.
func writeQuotaLog(t *testing.T, reqs []loggedRequest, extra ...decisionlog.Record) string {
	t.Helper()
	return writeLogWith(t, quotaPolicies, reqs, extra...)
}

func writeLogWith(t *testing.T, policies string, reqs []loggedRequest, extra ...decisionlog.Record) string {
	t.Helper()
	ctx := context.Background()
	snap, err := engine.Load(ctx, engine.Config{Policies: policies, Schemas: quotaSchemas})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "decisions.jsonl")
	l, err := decisionlog.Open(decisionlog.Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range reqs {
		wrapped := strings.HasPrefix(r.path, "/v1/data/")
		rec := decisionlog.Record{DecisionID: r.id, Time: time.Now().UTC(), Decision: "quota_check", Path: r.path, Revision: snap.Revision}
		d, err := snap.Decide(ctx, "quota_check", []byte(r.body), engine.Options{DataAPIBody: wrapped})
		if err != nil {
			e := engine.AsError(err)
			rec.Error = &decisionlog.RecordError{Code: string(e.Code), Message: e.Message}
			if json.Valid([]byte(r.body)) {
				rec.Input = json.RawMessage(r.body)
			} else {
				rec.BodyBase64 = base64.StdEncoding.EncodeToString([]byte(r.body))
			}
		} else {
			rec.Input, rec.Result, rec.DurationNS = d.Input, d.Result, int64(1000)
		}
		l.Log(rec)
	}
	for _, rec := range extra {
		l.Log(rec)
	}
	if err := l.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if l.Written() != uint64(len(reqs)+len(extra)) {
		t.Fatalf("the log holds %d records, want %d", l.Written(), len(reqs)+len(extra))
	}
	return path
}

const (
	decisionsPath = "/v1/decisions/quota_check"
	dataPath      = "/v1/data/decisions/quota_check/decision"
)

// quotaTraffic is decided under limit 10; with limit 5, exactly used7,
// used5 and data-used8 change.
var quotaTraffic = []loggedRequest{
	{"used3", decisionsPath, `{"tenant": "a", "used": 3}`},
	{"used7", decisionsPath, `{"tenant": "a", "used": 7}`},
	{"used5", decisionsPath, "{\n  \"tenant\": \"b\",\n  \"used\": 5\n}\n"},
	{"used12", decisionsPath, `{"tenant": "a", "used": 12}`},
	{"suspended", decisionsPath, `{"tenant": "a", "used": 1, "suspended": true}`},
	{"u64max", decisionsPath, `{"tenant": "a", "used": 18446744073709551615}`},
	{"dup-key", decisionsPath, `{"tenant": "a", "used": 1, "used": 99}`},
	{"torn-body", decisionsPath, `{"tenant": "a", "us`},
	{"schema", decisionsPath, `{"tenant": ""}`},
	{"data-used8", dataPath, `{"input": {"tenant": "a", "used": 8}}`},
	{"data-no-input", dataPath, `{"inpt": {"tenant": "a", "used": 8}}`},
}

var notReplayable = []decisionlog.Record{
	{DecisionID: "masked", Decision: "quota_check", Path: decisionsPath, Input: json.RawMessage(`{"tenant":"**masked**","used":7}`), Result: json.RawMessage(`{"allow":true,"reasons":[]}`), Masked: []string{"/input/tenant"}},
	{DecisionID: "unauthorized", Decision: "quota_check", Path: decisionsPath, Input: json.RawMessage(`{"tenant":"a","used":7}`), Error: &decisionlog.RecordError{Code: "unauthorized", Message: "no"}},
	{DecisionID: "too-large", Decision: "quota_check", Path: decisionsPath, Error: &decisionlog.RecordError{Code: "body_too_large", Message: "no"}},
}

// forged carries the mask marker in its own content: a caller cannot hide
// its record from replay that way (replay reads the record's masked list).
var forged = decisionlog.Record{DecisionID: "forged", Decision: "quota_check", Path: decisionsPath, Input: json.RawMessage(`{"tenant":"**masked**","used":7}`), Result: json.RawMessage(`{"allow":true,"reasons":[]}`)}

// quotaCopy copies the quota policies, with limit as the quota.
func quotaCopy(t *testing.T, dataJSON string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "policies")
	if err := os.CopyFS(dir, os.DirFS(quotaPolicies)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "decisions/quota_check/data.json"), []byte(dataJSON), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

func runReplay(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), append([]string{"replay"}, args...), strings.NewReader(""), &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func TestReplay(t *testing.T) {
	t.Parallel()
	log := writeQuotaLog(t, quotaTraffic, append(notReplayable, forged)...)
	limit5 := quotaCopy(t, `{"limit": 5}`)

	tornLog := filepath.Join(t.TempDir(), "torn.jsonl")
	data, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(data), "\n")
	torn := strings.Join(lines[:3], "") + "not a record\n" + strings.Join(lines[3:], "") + `{"decision_id":"cut","time":"2025-`
	if err := os.WriteFile(tornLog, []byte(torn), 0o600); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name         string
		log          string
		policies     string
		wantCode     int
		wantChanged  []string
		wantSummary  string
		wantWarnings []string // substrings, one per expected warning
	}{
		{
			name: "same policies", log: log, policies: quotaPolicies, wantCode: exitSkipped,
			wantSummary:  "replayed 15 decisions from 1 files: 0 changed, 12 unchanged, 3 skipped",
			wantWarnings: []string{"decision masked skipped: its input was masked when logged: /input/tenant", "decision unauthorized skipped: error unauthorized", "decision too-large skipped: error body_too_large"},
		},
		{
			name: "limit lowered to 5", log: log, policies: limit5, wantCode: exitError,
			wantChanged:  []string{"used7", "used5", "data-used8", "forged"},
			wantSummary:  "replayed 15 decisions from 1 files: 4 changed, 8 unchanged, 3 skipped",
			wantWarnings: []string{"masked", "unauthorized", "too-large"},
		},
		{
			name: "torn last line and corrupt middle line", log: tornLog, policies: quotaPolicies, wantCode: exitSkipped,
			wantSummary:  "replayed 17 decisions from 1 files: 0 changed, 12 unchanged, 5 skipped",
			wantWarnings: []string{"masked", "unauthorized", "too-large", tornLog + ":4: line skipped", tornLog + ":17: torn last line"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runReplay(t, "--log", tc.log, "--policies", tc.policies, "--schemas", quotaSchemas)
			if code != tc.wantCode {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tc.wantCode, stdout, stderr)
			}
			var changed []string
			for _, line := range strings.Split(strings.TrimSpace(stdout), "\n") {
				if rest, ok := strings.CutPrefix(line, "changed "); ok {
					changed = append(changed, strings.Fields(rest)[0])
				}
			}
			if !slices.Equal(changed, tc.wantChanged) {
				t.Errorf("changed %q, want %q\n%s", changed, tc.wantChanged, stdout)
			}
			if !strings.Contains(stdout, tc.wantSummary) {
				t.Errorf("stdout lacks %q:\n%s", tc.wantSummary, stdout)
			}
			if n := strings.Count(stderr, "warning: "); n != len(tc.wantWarnings) {
				t.Errorf("%d warnings, want %d:\n%s", n, len(tc.wantWarnings), stderr)
			}
			for _, w := range tc.wantWarnings {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr lacks warning %q:\n%s", w, stderr)
				}
			}
		})
	}
}

func TestReplayJSON(t *testing.T) {
	t.Parallel()
	log := writeQuotaLog(t, quotaTraffic)
	limit5 := quotaCopy(t, `{"limit": 5}`)
	old, err := engine.Load(context.Background(), engine.Config{Policies: quotaPolicies, Schemas: quotaSchemas})
	if err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runReplay(t, "--log", log, "--policies", limit5, "--schemas", quotaSchemas, "--format", "json")
	if code != exitError {
		t.Fatalf("exit %d, want 1\n%s\n%s", code, stdout, stderr)
	}
	var rep replay.Report
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("%v:\n%s", err, stdout)
	}
	byID := map[string]replay.Change{}
	for _, c := range rep.Changed {
		byID[c.DecisionID] = c
	}
	if len(byID) != 3 || len(rep.Changed) != 3 {
		t.Fatalf("changed %+v, want used7, used5 and data-used8", rep.Changed)
	}
	c, ok := byID["used7"]
	if !ok {
		t.Fatalf("used7 not among the changes: %+v", rep.Changed)
	}
	if c.Line != 2 || c.Decision != "quota_check" || !engine.SameJSON(c.Old.Reasons, []byte(`[]`)) || !engine.SameJSON(c.New.Reasons, []byte(`["quota_exhausted"]`)) ||
		c.Old.Revision != old.Revision || c.New.Revision == old.Revision || c.New.Revision != rep.Summary.NewRevision {
		t.Errorf("used7 change %+v (%s -> %s), want line 2, [] -> [quota_exhausted], revision %s -> another", c, c.Old.Reasons, c.New.Reasons, old.Revision)
	}
	want := replay.Summary{Replayed: 11, Changed: 3, Unchanged: 8, OldRevisions: []string{old.Revision}, NewRevision: rep.Summary.NewRevision}
	if !slices.Equal(rep.Summary.OldRevisions, want.OldRevisions) || rep.Summary.Replayed != want.Replayed || rep.Summary.Changed != want.Changed || rep.Summary.Unchanged != want.Unchanged || rep.Summary.Skipped != 0 {
		t.Errorf("summary %+v, want %+v", rep.Summary, want)
	}
	if rep.Warnings == nil || len(rep.Warnings) != 0 {
		t.Errorf("warnings %#v, want an empty list", rep.Warnings)
	}
}

// An error is an outcome like any other: a policy edit that turns results
// into errors is a change, and so is one that turns errors into results.
func TestReplayErrorsAreOutcomes(t *testing.T) {
	t.Parallel()
	// A result member the result schema does not allow: every decision
	// becomes a policy_error.
	broken := quotaCopy(t, `{"limit": 10}`)
	rego := filepath.Join(broken, "decisions/quota_check/policy.rego")
	src, err := os.ReadFile(rego)
	if err != nil {
		t.Fatal(err)
	}
	edited := strings.Replace(string(src), `decision := {"allow": count(reasons) == 0, "reasons": reasons}`, `decision := {"allow": count(reasons) == 0, "reasons": reasons, "extra": 1}`, 1)
	if edited == string(src) {
		t.Fatal("the policy no longer has the expected decision rule")
	}
	if err := os.WriteFile(rego, []byte(edited), 0o600); err != nil {
		t.Fatal(err)
	}
	reqs := []loggedRequest{
		{"used3", decisionsPath, `{"tenant": "a", "used": 3}`},
		{"data-used12", dataPath, `{"input": {"tenant": "a", "used": 12}}`},
	}

	good := writeQuotaLog(t, reqs)
	code, stdout, stderr := runReplay(t, "--log", good, "--policies", broken, "--schemas", quotaSchemas)
	if code != exitError || strings.Count(stdout, "-> error policy_error") != 2 {
		t.Errorf("results to errors: exit %d, want 1 with both decisions now policy_error:\n%s\n%s", code, stdout, stderr)
	}

	// Logged as failed requests, the Data API body is the {"input": ...}
	// wrapper as received: replayed as such, it is decided again.
	bad := writeLogWith(t, broken, reqs)
	code, stdout, stderr = runReplay(t, "--log", bad, "--policies", quotaPolicies, "--schemas", quotaSchemas)
	if code != exitError ||
		!strings.Contains(stdout, "changed used3 quota_check ("+bad+":1): ") || !strings.Contains(stdout, ": error policy_error -> reasons []\n") ||
		!strings.Contains(stdout, "changed data-used12 quota_check ("+bad+":2): ") || !strings.Contains(stdout, `: error policy_error -> reasons ["quota_exhausted"]`) {
		t.Errorf("errors to results: exit %d, want 1 with both decisions now decided:\n%s\n%s", code, stdout, stderr)
	}
}

func TestReplayBadInput(t *testing.T) {
	t.Parallel()
	log := writeQuotaLog(t, quotaTraffic[:1])
	brokenPolicies := quotaCopy(t, `{"limit": `)
	tests := []struct {
		name       string
		args       []string
		wantStderr string
	}{
		{"missing log file", []string{"--log", filepath.Join(t.TempDir(), "nope.jsonl")}, "no such file"},
		{"no --log", nil, "--log FILE|DIR is required"},
		{"unknown flag", []string{"--log", log, "--bogus"}, "unknown flag: --bogus"},
		{"bad format", []string{"--log", log, "--format", "yaml"}, `invalid argument "yaml" for "--format" flag: want text or json`},
		{"policies that fail to load", []string{"--log", log, "--policies", brokenPolicies}, "data.json"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// The folders are given: outside a git checkout (the rule
			// edit's copy) the default policies/ is not found, and that
			// error comes first. A later --policies wins.
			code, stdout, stderr := runReplay(t, append([]string{"--policies", quotaPolicies, "--schemas", quotaSchemas}, tc.args...)...)
			if code != exitInput {
				t.Errorf("exit %d, want 2\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
			}
			if !strings.Contains(stderr, tc.wantStderr) {
				t.Errorf("stderr lacks %q:\n%s", tc.wantStderr, stderr)
			}
		})
	}
}

// TestReplayReadsRotatedFiles: a folder is every log file in it, rotated
// backups (timestamped names, oldest first) before the file
// being written; several files or folders may be given.
func TestReplayReadsRotatedFiles(t *testing.T) {
	t.Parallel()
	one := writeQuotaLog(t, quotaTraffic)
	data, err := os.ReadFile(one)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(data), "\n")
	dir := t.TempDir()
	backup := filepath.Join(dir, "decisions-2026-01-02T03-04-05.678.log")
	current := filepath.Join(dir, "decisions.log")
	if err := os.WriteFile(backup, []byte(strings.Join(lines[:5], "")), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(current, []byte(strings.Join(lines[5:], "")), 0o600); err != nil {
		t.Fatal(err)
	}
	limit5 := quotaCopy(t, `{"limit": 5}`)
	for name, args := range map[string][]string{
		"a folder":             {"--log", dir},
		"two --log":            {"--log", backup, "--log", current},
		"files as arguments":   {backup, current},
		"--log and a file too": {"--log", backup, current},
	} {
		t.Run(name, func(t *testing.T) {
			code, stdout, stderr := runReplay(t, append([]string{"--policies", limit5, "--schemas", quotaSchemas, "--format", "json"}, args...)...)
			var rep replay.Report
			if code != exitError || json.Unmarshal([]byte(stdout), &rep) != nil {
				t.Fatalf("exit %d, want 1\n%s%s", code, stdout, stderr)
			}
			if !slices.Equal(rep.Summary.Files, []string{backup, current}) || rep.Summary.Replayed != 11 || rep.Summary.Changed != 3 {
				t.Errorf("summary %+v, want 11 decisions from the backup then the current file, 3 changed", rep.Summary)
			}
			files := map[string]int{}
			for _, c := range rep.Changed {
				files[filepath.Base(c.File)]++
			}
			if files[filepath.Base(backup)] != 2 || files["decisions.log"] != 1 {
				t.Errorf("changes by file %v, want used7 and used5 in the backup, data-used8 in the current file", files)
			}
		})
	}
}
