package decisionlog

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

func TestMask(t *testing.T) {
	const input = `{"run":{"runId":"r1","token":"s3cr3t"},"runnerState":{"diagnostics":["a","b"],"nextSourceSeq":18446744073709551615,"x/y":1,"t~":2},"list":[{"k":"v0"},{"k":"v1"}],"n":1.0e2}`
	tests := []struct {
		name string
		mask []string
		want string
	}{
		{"one leaf", []string{"/run/token"},
			`{"run":{"runId":"r1","token":"**masked**"},"runnerState":{"diagnostics":["a","b"],"nextSourceSeq":18446744073709551615,"x/y":1,"t~":2},"list":[{"k":"v0"},{"k":"v1"}],"n":1.0e2}`},
		{"a whole array", []string{"/runnerState/diagnostics"},
			`{"run":{"runId":"r1","token":"s3cr3t"},"runnerState":{"diagnostics":"**masked**","nextSourceSeq":18446744073709551615,"x/y":1,"t~":2},"list":[{"k":"v0"},{"k":"v1"}],"n":1.0e2}`},
		{"escaped tokens", []string{"/runnerState/x~1y", "/runnerState/t~0"},
			`{"run":{"runId":"r1","token":"s3cr3t"},"runnerState":{"diagnostics":["a","b"],"nextSourceSeq":18446744073709551615,"x/y":"**masked**","t~":"**masked**"},"list":[{"k":"v0"},{"k":"v1"}],"n":1.0e2}`},
		{"array index", []string{"/list/1/k", "/runnerState/diagnostics/0"},
			`{"run":{"runId":"r1","token":"s3cr3t"},"runnerState":{"diagnostics":["**masked**","b"],"nextSourceSeq":18446744073709551615,"x/y":1,"t~":2},"list":[{"k":"v0"},{"k":"**masked**"}],"n":1.0e2}`},
		{"missing paths ignored", []string{"/nope", "/run/runId/deeper", "/list/7", "/list/-"}, input},
		{"whole document", []string{""}, `"**masked**"`},
		{"parent and child", []string{"/run", "/run/token"},
			`{"run":"**masked**","runnerState":{"diagnostics":["a","b"],"nextSourceSeq":18446744073709551615,"x/y":1,"t~":2},"list":[{"k":"v0"},{"k":"v1"}],"n":1.0e2}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, err := newMasker(tc.mask)
			if err != nil {
				t.Fatal(err)
			}
			got, matched, err := m.mask([]byte(input))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
			if n := strings.Count(string(got), MaskedValue); len(matched) != n {
				t.Errorf("matched %q, want one pointer per masked value (%d)", matched, n)
			}
		})
	}
}

func TestMaskRejectsBadPointer(t *testing.T) {
	if _, err := Open(Options{Path: filepath.Join(t.TempDir(), "x"), Mask: []string{"run/token"}}); err == nil {
		t.Fatal("Open accepted a mask that is not a JSON pointer")
	}
}

// sinkRecords is a sink that keeps what the pipeline hands it.
type sinkRecords struct{ recs []Record }

func (s *sinkRecords) Write(recs []Record) { s.recs = append(s.recs, recs...) }

// TestLoggerMasksInput: the pipeline masks each record once, and every sink
// (the file and another here) gets the same masked record.
func TestLoggerMasksInput(t *testing.T) {
	path := filepath.Join(t.TempDir(), "decisions.jsonl")
	other := &sinkRecords{}
	l, err := Open(Options{Path: path, Mask: []string{"/runnerState/diagnostics"}, Sinks: []Sink{other}})
	if err != nil {
		t.Fatal(err)
	}
	l.Log(Record{DecisionID: "a", Input: json.RawMessage("{\"runnerState\": {\"diagnostics\": [\"secret\"], \"n\": 18446744073709551615}, \"z\": \"<&>\"}")})
	l.Log(Record{DecisionID: "b", BodyBase64: "eyJydW5uZXJTdGF0ZSI6", Error: &RecordError{Code: "malformed_json"}})
	l.Log(Record{DecisionID: "c", Path: "/v1/data/decisions/x/decision", Input: json.RawMessage(`{"input":{"runnerState":{"diagnostics":["secret"]}}}`), Error: &RecordError{Code: "input_schema_invalid"}})
	l.Log(Record{DecisionID: "d", Path: "/v1/data/decisions/x/decision", Input: json.RawMessage(`{"runnerState":{"diagnostics":["secret"]}}`)})
	l.Log(Record{DecisionID: "e", Input: json.RawMessage("{\"runnerState\":\n {\"diagnostics\":\n [\"secret\"]}}")})
	if err := l.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	_, recs := readLines(t, path)
	if len(recs) != 5 || len(other.recs) != 5 {
		t.Fatalf("got %d records in the file and %d in the other sink, want 5", len(recs), len(other.recs))
	}
	for i, o := range other.recs {
		f := recs[i]
		if o.DecisionID != f.DecisionID || !jsonEqual(o.Input, f.Input) || fmt.Sprint(o.Masked, o.Erased) != fmt.Sprint(f.Masked, f.Erased) || o.BodyBase64 != f.BodyBase64 {
			t.Errorf("record %s: the other sink got input %s masked %v erased %v; the file %s %v %v", f.DecisionID, o.Input, o.Masked, o.Erased, f.Input, f.Masked, f.Erased)
		}
	}
	// Masked on the input as received, then made one line by the file.
	if want := `{"runnerState":{"diagnostics":"**masked**"}}`; string(recs[4].Input) != want {
		t.Errorf("masked input with line breaks %s, want %s", recs[4].Input, want)
	}
	if want := `{"input":{"runnerState":{"diagnostics":"**masked**"}}}`; string(recs[2].Input) != want {
		t.Errorf("masked Data API body %s, want %s", recs[2].Input, want)
	}
	if want := `{"runnerState":{"diagnostics":"**masked**"}}`; string(recs[3].Input) != want {
		t.Errorf("masked Data API input %s, want %s", recs[3].Input, want)
	}
	// The input is kept as received (spacing included) apart from the mask.
	if want := `{"runnerState": {"diagnostics": "**masked**", "n": 18446744073709551615}, "z": "<&>"}`; string(recs[0].Input) != want {
		t.Errorf("masked input %s, want %s", recs[0].Input, want)
	}
	if recs[1].Input != nil || recs[1].BodyBase64 != "" || fmt.Sprint(recs[1].Erased) != "[/body_base64]" {
		t.Errorf("an unmaskable body was logged: input %s body %q erased %q", recs[1].Input, recs[1].BodyBase64, recs[1].Erased)
	}
	// Each record names what was masked, from the record's root as OPA's
	// events do; replay reads that list, never the content.
	for i, want := range []string{"[/input/runnerState/diagnostics]", "[]", "[/input/input/runnerState/diagnostics]", "[/input/runnerState/diagnostics]", "[/input/runnerState/diagnostics]"} {
		if got := fmt.Sprint(recs[i].Masked); got != want {
			t.Errorf("record %s masked %s, want %s", recs[i].DecisionID, got, want)
		}
	}
	// A caller's own "**masked**" string is content, not a mask.
	if ok, why := (Record{Input: json.RawMessage(`{"a":"**masked**"}`)}).Complete(); !ok {
		t.Errorf("a record with the marker in its content is reported incomplete: %s", why)
	}
	if ok, _ := recs[0].Complete(); ok {
		t.Error("a masked record is reported complete")
	}
}

// jsonEqual compares two JSON documents, spacing aside.
func jsonEqual(a, b []byte) bool {
	var ca, cb bytes.Buffer
	return json.Compact(&ca, a) == nil && json.Compact(&cb, b) == nil && bytes.Equal(ca.Bytes(), cb.Bytes()) || len(a) == 0 && len(b) == 0
}

// A violation's message may quote the value it refuses: at or under a
// masked pointer it is masked too, in a copy (the record's error may be
// shared); others keep theirs. An input that cannot be walked is masked
// whole, and so is every violation.
func TestMaskViolations(t *testing.T) {
	path := filepath.Join(t.TempDir(), "decisions.jsonl")
	l, err := Open(Options{Path: path, Mask: []string{"/run/token", "/list/1"}})
	if err != nil {
		t.Fatal(err)
	}
	shared := &RecordError{Code: "input_schema_invalid", Message: "input does not match the schema", Violations: []Violation{
		{"/run/token", "maxLength: got 40, want 8"}, {"/run/token/x", "deeper"}, {"/run/runId", "minLength: got 0, want 1"},
		{"/list/1/k", "s3cr3t is not one of [a b]"}, {"/list/10", "kept"}, {"", "missing property"},
	}}
	l.Log(Record{DecisionID: "a", Input: json.RawMessage(`{"run":{"token":"s3cr3t","runId":""},"list":[1,{"k":"s3cr3t"}]}`), Error: shared})
	l.Log(Record{DecisionID: "b", Input: json.RawMessage(`{"run":`), Error: &RecordError{Code: "input_schema_invalid", Violations: []Violation{{"/a", "s3cr3t"}}}})
	if err := l.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	_, recs := readLines(t, path)
	got := fmt.Sprint(recs[0].Error.Violations)
	want := "[/run/token: **masked** /run/token/x: **masked** /run/runId: minLength: got 0, want 1 /list/1/k: **masked** /list/10: kept (the input): missing property]"
	if got != want {
		t.Errorf("violations %s\nwant       %s", got, want)
	}
	if shared.Violations[0].Message == MaskedValue {
		t.Error("the shared error was masked in place")
	}
	if got := fmt.Sprint(recs[1].Error.Violations); got != "[/a: **masked**]" {
		t.Errorf("an input masked whole kept its violation: %s", got)
	}
}
