package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/arbiter-dev/arbiter/decisionlog"
	"github.com/arbiter-dev/arbiter/decisionstore"
	"github.com/arbiter-dev/arbiter/engine"
	"github.com/arbiter-dev/arbiter/engine/live"
	"github.com/arbiter-dev/arbiter/internal/golden"
	"github.com/arbiter-dev/arbiter/internal/ruleedit"
	"github.com/arbiter-dev/arbiter/replay"
	"github.com/arbiter-dev/arbiter/server/ui"
)

var storeReplicas = []string{"replica-a", "replica-b", "replica-c"}

// exactTraffic are decisions that jsonb would store as others: its numeric
// writes 0e-400 out as 0.000… in 402 characters, past the engine's longest
// number literal, so a decision would read back as a body the engine
// refuses (and quotaTraffic's dup-key, refused for its duplicate key, as
// one it accepts). Replay from the store must decide each as the files do.
var exactTraffic = []loggedRequest{
	{"zero-exp", decisionsPath, `{"tenant": "a", "used": 0e-400}`},
	{"zero-exp-data", dataPath, `{"input": {"used": 0E-400, "tenant": "b"}}`},
}

// fleetRecords are the quota traffic of the replay tests (and the
// records replay cannot decide again, and exactTraffic) as three replicas
// logged them, at fixed times, each replica's in a log file of its own and
// through its sink into one store.
func fleetRecords(t *testing.T, url string) (logs []string) {
	t.Helper()
	var recs []decisionlog.Record
	traffic := append(slices.Clone(quotaTraffic), exactTraffic...)
	_, err := decisionlog.ReadFile(writeQuotaLog(t, traffic, append(slices.Clone(notReplayable), forged)...), func(_ int, rec decisionlog.Record) error {
		recs = append(recs, rec)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	base := time.Date(2026, 12, 3, 23, 59, 55, 0, time.UTC) // across midnight: two partitions
	byReplica := map[string][]decisionlog.Record{}
	for i, rec := range recs {
		rec.Time = base.Add(time.Duration(i) * 700 * time.Millisecond)
		byReplica[storeReplicas[i%3]] = append(byReplica[storeReplicas[i%3]], rec)
	}
	eng, err := live.New(context.Background(), engine.Config{Policies: quotaPolicies, Schemas: quotaSchemas})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, replica := range storeReplicas {
		path := filepath.Join(dir, replica+".jsonl")
		l, err := decisionlog.Open(decisionlog.Options{Path: path})
		if err != nil {
			t.Fatal(err)
		}
		for _, rec := range byReplica[replica] {
			l.Log(rec)
		}
		if err := l.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		logs = append(logs, path)
		sink, err := decisionstore.NewSink(url, decisionstore.SinkConfig{Replica: replica, OutcomeKey: ui.OutcomeKeys(eng)})
		if err != nil {
			t.Fatal(err)
		}
		sink.Write(byReplica[replica])
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err = sink.Close(ctx)
		cancel()
		if err != nil || sink.Stats().Written != uint64(len(byReplica[replica])) {
			t.Fatalf("the sink of %s: %v, %+v", replica, err, sink.Stats())
		}
	}
	return logs
}

func runCommand(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), args, strings.NewReader(""), &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// TestStoreCommands: over one store that three replicas wrote, and their
// three log files, replay from the store finds the same changes, in the
// same classes, with the same counts as replay from the files, records
// that jsonb would rewrite included (exactTraffic; the store keeps each
// line as written: decisionstore's TestSinkKeepsTheLineExactly), and
// decides every record as the files do (and any
// number of workers the same report); the filters narrow it; arbiter
// decisions lists what the store holds (golden text and JSON). ~3 s, most
// of it PostgreSQL's start.
func TestStoreCommands(t *testing.T) {
	t.Parallel()
	url := pg.DB(t)
	st, err := decisionstore.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	logs := fleetRecords(t, url)
	limit5 := quotaCopy(t, `{"limit": 5}`)
	pol := []string{"--policies", limit5, "--schemas", quotaSchemas, "--format", "json"}

	replayJSON := func(t *testing.T, args ...string) (int, replay.Report) {
		t.Helper()
		code, stdout, stderr := runCommand(t, append(append([]string{"replay"}, args...), pol...)...)
		var rep replay.Report
		if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
			t.Fatalf("exit %d: %v\n%s\n%s", code, err, stdout, stderr)
		}
		return code, rep
	}
	var fileArgs []string
	for _, l := range logs {
		fileArgs = append(fileArgs, "--log", l)
	}
	fromFiles := func(t *testing.T, workers string) (int, replay.Report) {
		return replayJSON(t, append(slices.Clone(fileArgs), "--workers", workers)...)
	}
	type judged struct{ id, class string }
	changes := func(rep replay.Report) []judged {
		var out []judged
		for _, c := range rep.Changed {
			out = append(out, judged{c.DecisionID, string(c.Class)})
		}
		slices.SortFunc(out, func(a, b judged) int { return strings.Compare(a.id, b.id) })
		return out
	}
	impact := func(rep replay.Report) string {
		var b strings.Builder
		rep.Impact.WriteText(&b)
		return b.String()
	}

	t.Run("replay from the store finds what replay from the files finds", func(t *testing.T) {
		codeF, files := fromFiles(t, "1")
		codeS, store := replayJSON(t, "--store", url, "--since", "2026-12-01", "--workers", "3")
		if codeF != exitError || codeS != codeF {
			t.Fatalf("exit %d from files, %d from the store; want %d", codeF, codeS, exitError)
		}
		if got, want := changes(store), changes(files); len(want) == 0 || !slices.Equal(got, want) {
			t.Errorf("changes from the store %v\nfrom the files %v", got, want)
		}
		fs, ss := files.Summary, store.Summary
		if fs.Replayed != ss.Replayed || fs.Changed != ss.Changed || fs.Unchanged != ss.Unchanged || fs.Skipped != ss.Skipped || fs.Promotions != ss.Promotions || !ss.Store {
			t.Errorf("summary from the store %+v\nfrom the files %+v", ss, fs)
		}
		var fc, sc []string
		for _, c := range files.Impact.Classes {
			fc = append(fc, fmt.Sprintf("%s %d", c.Class, c.Count))
		}
		for _, c := range store.Impact.Classes {
			sc = append(sc, fmt.Sprintf("%s %d", c.Class, c.Count))
		}
		if !slices.Equal(fc, sc) {
			t.Errorf("impact from the store %v, from the files %v", sc, fc)
		}
		for _, c := range store.Changed {
			if c.Replica == "" || c.File != "" {
				t.Errorf("a change from the store names no replica: %+v", c)
			}
		}
		if len(store.Warnings) != len(files.Warnings) {
			t.Errorf("%d warnings from the store, %d from the files:\n%q\n%q", len(store.Warnings), len(files.Warnings), store.Warnings, files.Warnings)
		}
	})

	t.Run("any number of workers makes the same report", func(t *testing.T) {
		_, one := fromFiles(t, "1")
		_, four := fromFiles(t, "4")
		a, _ := json.Marshal(one)
		b, _ := json.Marshal(four)
		if !bytes.Equal(a, b) || impact(one) != impact(four) {
			t.Errorf("1 worker:\n%s\n4 workers:\n%s", a, b)
		}
	})

	t.Run("filters narrow the replay", func(t *testing.T) {
		_, all := replayJSON(t, "--store", url)
		_, one := replayJSON(t, "--store", url, "--replica", storeReplicas[1])
		_, none := replayJSON(t, "--store", url, "--until", "2026-12-01")
		if one.Summary.Replayed == 0 || one.Summary.Replayed >= all.Summary.Replayed || none.Summary.Replayed != 0 {
			t.Errorf("replayed %d of one replica, %d of all, %d before any", one.Summary.Replayed, all.Summary.Replayed, none.Summary.Replayed)
		}
		for _, c := range one.Changed {
			if c.Replica != storeReplicas[1] {
				t.Errorf("the replica filter replayed %s of %s", c.DecisionID, c.Replica)
			}
		}
	})

	// The tools read serve's variable: one names the store for the fleet
	// and for them.
	t.Run("ARBITER_DECISION_STORE names the store", func(t *testing.T) {
		for _, args := range [][]string{{"decisions", "--limit", "1"}, append([]string{"replay"}, pol...)} {
			cmd := exec.Command(binPath, args...)
			cmd.Env = append(os.Environ(), "ARBITER_DECISION_STORE="+url)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			_ = cmd.Run()
			want := exitOK
			if args[0] == "replay" {
				want = exitError // changes found
			}
			if code := cmd.ProcessState.ExitCode(); code != want || stdout.Len() == 0 {
				t.Errorf("ARBITER_DECISION_STORE=URL arbiter %s: exit %d, want %d\n%s%s", args[0], code, want, stdout.String(), strings.ReplaceAll(stderr.String(), url, "URL"))
			}
		}
	})

	t.Run("decisions", func(t *testing.T) {
		var out bytes.Buffer
		for _, args := range [][]string{
			{"--store", url},
			{"--store", url, "--limit", "4"},
			{"--store", url, "--replica", storeReplicas[2], "--input", "/tenant = b"},
			{"--store", url, "--outcome", decisionlog.OutcomeError, "--format", "json", "--limit", "2"},
			{"--store", url, "--until", "2026-12-01"},
			{"--store", url, "--input", "/tenant/0 = a"},
			{"--store", url, "--input", "/attempt = 1e999999"},
			{"--store", url, "--since", "yesterday"},
		} {
			code, stdout, stderr := runCommand(t, append([]string{"decisions"}, args...)...)
			shown := strings.ReplaceAll(strings.Join(args, " "), url, "URL")
			stderr = strings.ReplaceAll(stderr, url, "URL")
			if i := strings.Index(stderr, "\nUsage:"); i >= 0 {
				stderr = stderr[:i+1] // the usage is the flags' (CLI.md)
			}
			fmt.Fprintf(&out, "$ arbiter decisions %s\n%s%s(exit %d)\n\n", shown, stdout, stderr, code)
		}
		golden.Check(t, "testdata/golden/decisions.golden", out.Bytes())
	})
}

// TestReplayProgressOnlyOnATerminal: the real binary shows its progress
// line on a terminal (script(1) gives it one) and not when stderr is a
// pipe, whose reader wants the report only.
func TestReplayProgressOnlyOnATerminal(t *testing.T) {
	ruleedit.Skip(t)
	t.Parallel()
	log := writeQuotaLog(t, quotaTraffic)
	args := []string{binPath, "replay", "--log", log, "--policies", quotaPolicies, "--schemas", quotaSchemas}
	quoted := make([]string, len(args))
	for i, a := range args {
		quoted[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	tty, err := exec.Command("script", "-qec", strings.Join(quoted, " "), "/dev/null").CombinedOutput()
	if !strings.Contains(string(tty), "records replayed") {
		t.Errorf("on a terminal (%v), no progress line:\n%s", err, tty)
	}
	var stderr bytes.Buffer
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stderr = &stderr
	_ = cmd.Run()
	if strings.Contains(stderr.String(), "records replayed") {
		t.Errorf("stderr a pipe, a progress line:\n%s", stderr.String())
	}
}

// TestStoreReadersSurviveAnUnreadableRow: a row whose record is not JSON
// (written by hand: no replica writes one) costs the real binary's
// readers nothing but itself. arbiter decisions lists it from its columns
// (the text needs no record); with --format json it shows the row's
// columns, the record's size and first bytes, and says on stderr that a
// record could not be read; arbiter replay --store skips it with a
// warning, as replay from files skips a line that is not a record.
// Before, each exited 2: "is not a decision record".
func TestStoreReadersSurviveAnUnreadableRow(t *testing.T) {
	t.Parallel()
	url := pg.DB(t)
	st, err := decisionstore.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	fleetRecords(t, url)
	if _, err := st.Pool().Exec(context.Background(), `INSERT INTO arbiter_store.records (time, decision_id, kind, replica, decision, path, record)
		VALUES ('2026-12-04T00:00:07Z', 'not-json', 'decision', 'replica-z', 'quota_check', '/v1/decisions/quota_check', 'this is not {JSON')`); err != nil {
		t.Fatal(err)
	}
	arbiter := func(args ...string) (int, string, string) {
		cmd := exec.Command(binPath, args...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		_ = cmd.Run()
		return cmd.ProcessState.ExitCode(), stdout.String(), strings.ReplaceAll(stderr.String(), url, "URL")
	}
	code, stdout, stderr := arbiter("decisions", "--store", url, "--limit", "3")
	if code != exitOK || !strings.Contains(stdout, "not-json") {
		t.Errorf("arbiter decisions: exit %d, want %d listing not-json:\n%s%s", code, exitOK, stdout, stderr)
	}
	code, stdout, stderr = arbiter("decisions", "--store", url, "--limit", "3", "--format", "json")
	if code != exitOK || !strings.Contains(stdout, `"decision_id": "not-json"`) || !strings.Contains(stdout, `"head": "this is not {JSON"`) ||
		!strings.Contains(stderr, "the stored record of not-json (replica-z) is shown in part") {
		t.Errorf("arbiter decisions --format json: exit %d, want %d with not-json's columns and first bytes, and a note on stderr:\n%s%s", code, exitOK, stdout, stderr)
	}
	code, stdout, stderr = arbiter("replay", "--store", url, "--policies", quotaPolicies, "--schemas", quotaSchemas)
	if code == exitInput || !strings.Contains(stderr, "decision not-json skipped") {
		t.Errorf("arbiter replay --store: exit %d, want a warning that not-json was skipped:\n%s%s", code, stdout, stderr)
	}
}

// TestStoredTextIsEscapedOnTheTerminal: every value a command prints from
// a decision log or a decision store came from a request or a row, so it
// reaches the terminal escaped (decisionlog.Shown): a replica, decision
// id, decision name, revision, reason, error code or masked pointer with
// an escape sequence, a bidirectional control or a line break shows its
// escapes, and forges no line of the report.
func TestStoredTextIsEscapedOnTheTerminal(t *testing.T) {
	t.Parallel()
	const forged = "\nchanged forged "
	hostile := func(what string) string { return what + "\x1b[2J\u202e" + forged + what }
	result := json.RawMessage(`{"allow":true,"reasons":[]}`)
	log := writeQuotaLog(t, []loggedRequest{{hostile("id"), decisionsPath, `{"tenant": "a", "used": 7}`}},
		decisionlog.Record{DecisionID: "revision", Decision: "quota_check", Path: decisionsPath, Revision: hostile("rev"), Input: json.RawMessage(`{"tenant":"a","used":8}`), Result: result},
		decisionlog.Record{DecisionID: "decision", Decision: hostile("name"), Path: decisionsPath, Input: json.RawMessage(`{"tenant":"a","used":1}`), Result: result},
		decisionlog.Record{DecisionID: "reasons", Decision: "quota_check", Path: decisionsPath, Input: json.RawMessage(`{"tenant":"a","used":1}`), Result: json.RawMessage(`{"allow":false,"reasons":["` + "over\u202e\u0085quota" + `"]}`)},
		decisionlog.Record{DecisionID: "code", Decision: "quota_check", Path: decisionsPath, Input: json.RawMessage(`{}`), Error: &decisionlog.RecordError{Code: hostile("code"), Message: "no"}},
		decisionlog.Record{DecisionID: "masked", Decision: "quota_check", Path: decisionsPath, Input: json.RawMessage(`{}`), Result: result, Masked: []string{hostile("/mask")}},
	)
	var recs []decisionlog.Record
	if _, err := decisionlog.ReadFile(log, func(_ int, rec decisionlog.Record) error {
		rec.Caller = hostile("caller")
		recs = append(recs, rec)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	url := pg.DB(t)
	st, err := decisionstore.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	sink, err := decisionstore.NewSink(url, decisionstore.SinkConfig{Replica: "replica-a"})
	if err != nil {
		t.Fatal(err)
	}
	sink.Write(recs)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := sink.Close(ctx); err != nil || sink.Stats().Written != uint64(len(recs)) {
		t.Fatalf("the sink: %v, %+v", err, sink.Stats())
	}
	// A replica name as anyone who can write the database may leave it.
	if _, err := st.Pool().Exec(ctx, "UPDATE arbiter_store.records SET replica = $1", hostile("replica")); err != nil {
		t.Fatal(err)
	}

	limit5 := quotaCopy(t, `{"limit": 5}`)
	pol := []string{"--policies", limit5, "--schemas", quotaSchemas}
	for _, args := range [][]string{
		append([]string{"replay", "--log", log}, pol...),
		append([]string{"replay", "--store", url}, pol...),
		{"decisions", "--store", url},
	} {
		t.Run(strings.Join(args[:2], " "), func(t *testing.T) {
			code, stdout, stderr := runCommand(t, args...)
			out := stdout + stderr
			if code == exitInput || !strings.Contains(out, `\x1b`) {
				t.Fatalf("exit %d; the hostile values are not shown escaped:\n%s", code, out)
			}
			for i, line := range strings.Split(out, "\n") {
				if strings.HasPrefix(line, "changed forged") {
					t.Errorf("line %d is forged: %q", i+1, line)
				}
				if j := strings.IndexFunc(line, func(r rune) bool { return !unicode.IsPrint(r) }); j >= 0 {
					t.Errorf("line %d holds %q raw: %q", i+1, []rune(line[j:])[0], line)
				}
			}
		})
	}
}
