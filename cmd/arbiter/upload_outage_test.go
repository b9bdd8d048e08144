package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/arbiter-dev/arbiter/decisionlog"
	"github.com/arbiter-dev/arbiter/engine"
	"github.com/arbiter-dev/arbiter/internal/logsink"
	"github.com/arbiter-dev/arbiter/internal/ruleedit"
	"github.com/arbiter-dev/arbiter/internal/wait"
)

// flakyCollector is a decision-log service that answers 503 while down,
// as a collector in an outage does, and keeps events otherwise.
type flakyCollector struct {
	down    atomic.Bool
	refused atomic.Int64
	sink    *logsink.Sink
}

func (c *flakyCollector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if c.down.Load() {
		c.refused.Add(1)
		http.Error(w, "collector down", http.StatusServiceUnavailable)
		return
	}
	c.sink.ServeHTTP(w, r)
}

var recoveredLine = regexp.MustCompile(`msg="decision-log uploads recovered" retried_events=(\d+) outage=(\S+)`)

// During a collector outage the events of the batch being retried count in
// arbiter_decision_log_upload_queued_events, so the documented alert fires;
// recovery is logged once, with the events retried and the outage's
// length; and an input refused by its schema reaches the collector with
// its violations in OPA's error shape (code, message, errors), the one
// under a masked pointer masked.
func TestUploadOutageIsVisibleAndRecoveryLogged(t *testing.T) {
	ruleedit.Skip(t)
	t.Parallel()
	root := copyRepo(t)
	fixtures, err := engine.LoadFixtures(filepath.Join(root, "policy_test"))
	if err != nil {
		t.Fatal(err)
	}
	var valid engine.Fixture
	var invalid []engine.Fixture // two, violating at different pointers
	for _, fx := range fixtures {
		switch {
		case fx.WantResult != nil && valid.Decision == "":
			valid = fx
		case fx.Body == nil && fx.WantError != nil && fx.WantError.Code == engine.CodeInputSchemaInvalid && fx.WantError.ViolationAt != "" &&
			len(invalid) < 2 && (len(invalid) == 0 || invalid[0].WantError.ViolationAt != fx.WantError.ViolationAt):
			invalid = append(invalid, fx)
		}
	}
	if valid.Decision == "" || len(invalid) < 2 {
		t.Fatalf("the fixtures lack a valid input or two schema violations at different pointers")
	}
	masked := invalid[0].WantError.ViolationAt

	collector := &flakyCollector{sink: logsink.New()}
	collector.down.Store(true)
	cs := httptest.NewServer(collector)
	defer cs.Close()
	logPath := filepath.Join(t.TempDir(), "decisions.log")
	s := startServer(t, append(folderArgs(root), "--decision-log", logPath, "--decision-log-mask", masked,
		"--decision-log-service", cs.URL, "--decision-log-upload-interval", "50ms", "--decision-log-upload-max-retry-delay", "200ms")...)

	var ids []string
	for _, fx := range append([]engine.Fixture{valid}, invalid...) {
		ids = append(ids, post(t, http.DefaultClient, s.url+"/v1/decisions/"+fx.Decision, fx.RequestBody()).id)
	}
	queued := func() float64 {
		return metricValue(t, http.DefaultClient, s.url, "arbiter_decision_log_upload_queued_events")
	}
	wait.Until(t, time.Minute, "the three events waiting while uploads fail", func() bool {
		return collector.refused.Load() >= 2 && queued() == 3
	})
	if recoveredLine.MatchString(s.stderr.String()) {
		t.Fatal("recovery logged during the outage")
	}

	collector.down.Store(false)
	wait.Until(t, time.Minute, "every event at the collector", func() bool {
		for _, id := range ids {
			if _, ok := collector.sink.Event(id); !ok {
				return false
			}
		}
		return true
	})
	wait.Until(t, time.Minute, "nothing waiting", func() bool { return queued() == 0 })
	// The line follows the upload that succeeded, which the collector may
	// have answered before it is written.
	wait.Until(t, time.Minute, "the recovery line", func() bool { return recoveredLine.MatchString(s.stderr.String()) })
	m := recoveredLine.FindAllStringSubmatch(s.stderr.String(), -1)
	if len(m) != 1 || m[0][1] == "0" || m[0][2] == "0s" {
		t.Fatalf("want one recovery line with the events retried and the outage, got %q", m)
	}

	for i, fx := range invalid {
		ev, _ := collector.sink.Event(ids[1+i])
		var event struct {
			Error struct {
				Code    string `json:"code"`
				Message string `json:"message"`
				Errors  []struct {
					Code    string `json:"code"`
					Message string `json:"message"`
				} `json:"errors"`
			} `json:"error"`
		}
		if err := json.Unmarshal(ev, &event); err != nil {
			t.Fatal(err)
		}
		at := fx.WantError.ViolationAt
		found := false
		for _, e := range event.Error.Errors {
			if e.Code != string(engine.CodeInputSchemaInvalid) || !strings.HasPrefix(e.Message, at+": ") {
				continue
			}
			found = true
			if isMasked := e.Message == at+": "+decisionlog.MaskedValue; isMasked != (at == masked) {
				t.Errorf("%s: violation %q; masked %v, want %v", fx.Name, e.Message, isMasked, at == masked)
			}
		}
		if event.Error.Code != string(engine.CodeInputSchemaInvalid) || !found {
			t.Errorf("%s: the uploaded event lacks the violation at %s: %s", fx.Name, at, ev)
		}
	}
	// The local log keeps the same violations, masked the same way.
	kept := false
	for _, rec := range readDecisionLog(t, logPath) {
		if rec.DecisionID != ids[1] || rec.Error == nil {
			continue
		}
		for _, v := range rec.Error.Violations {
			if v.Path == masked {
				kept = v.Message == decisionlog.MaskedValue
			}
		}
	}
	if !kept {
		t.Errorf("the local record of %s lacks its violation at %s, masked", invalid[0].Name, masked)
	}
}
