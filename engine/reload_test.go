package engine

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// within fails the test when fn has not returned after a generous bound:
// the guarantees below are about never hanging, and a hung test must say so
// rather than wait for the test binary's own timeout.
func within(t *testing.T, what string, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatalf("%s did not return: it hangs", what)
	}
}

// TestLoadReadsOnlyRegularFiles: a FIFO (which blocks a reader forever) and
// a symlink to /dev/zero (which never ends) with policy extensions are
// skipped and reported; the candidate loads from the rest.
func TestLoadReadsOnlyRegularFiles(t *testing.T) {
	root := copyTree(t, quota)
	pol := filepath.Join(root, "policies")
	if err := syscall.Mkfifo(filepath.Join(pol, "blocked.rego"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/dev/zero", filepath.Join(pol, "zero.json")); err != nil {
		t.Fatal(err)
	}
	var snap *Snapshot
	var err error
	within(t, "Load with a FIFO and /dev/zero in the policies", func() { snap, err = Load(context.Background(), quotaConfig(root)) })
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, s := range snap.Skipped {
		got[filepath.Base(s.File)] = s.Reason
	}
	if len(got) != 2 || !strings.Contains(got["blocked.rego"], "not a regular file") || !strings.Contains(got["zero.json"], "not a regular file") {
		t.Errorf("skipped = %+v, want blocked.rego and zero.json as not regular files", snap.Skipped)
	}
	// arbiter check tells the engineer before it ships.
	var probs []Problem
	within(t, "Check", func() { probs = Check(context.Background(), quotaConfig(root), "") })
	if n := strings.Count(problemLines(probs), "skipped: not a regular file"); n != 2 {
		t.Errorf("check reports %d skipped files, want 2:\n%s", n, problemLines(probs))
	}
}

// problemLines joins problems one a line, for messages.
func problemLines(p []Problem) string {
	var b strings.Builder
	for _, x := range p {
		b.WriteString(x.String() + "\n")
	}
	return b.String()
}

// TestLoadCapsFileSize: a file over the cap is a problem naming it, never
// read whole and never silently left out.
func TestLoadCapsFileSize(t *testing.T) {
	root := copyTree(t, quota)
	big := filepath.Join(root, "policies", "big.json")
	if err := os.WriteFile(big, []byte(`{"pad":"`+strings.Repeat("x", 4096)+`"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := quotaConfig(root)
	cfg.MaxFileBytes = 4096
	probs := loadProblems(t, cfg)
	if len(probs) != 1 || probs[0].File != big || !strings.Contains(probs[0].Message, "over the limit of 4096 bytes") {
		t.Errorf("problems = %v, want one naming %s", probs, big)
	}
	cfg.MaxFileBytes = 8192
	mustLoad(t, cfg)
}

// blockingLoad substitutes the engine's source: each build waits for a
// release, counting calls.
type blockingLoad struct {
	mu      sync.Mutex
	calls   int
	started chan struct{}
	release chan struct{}
}

func newBlockingLoad() *blockingLoad {
	return &blockingLoad{started: make(chan struct{}, 100), release: make(chan struct{})}
}

// fakeSource is a Source whose builds run build.
type fakeSource struct {
	Source
	build func(context.Context, Config) (*Snapshot, error)
}

func (f fakeSource) candidate(ctx context.Context, cfg Config) (*Snapshot, error) {
	return f.build(ctx, cfg)
}

func (b *blockingLoad) source(real Source) Source {
	return fakeSource{real, func(ctx context.Context, cfg Config) (*Snapshot, error) {
		b.mu.Lock()
		b.calls++
		b.mu.Unlock()
		b.started <- struct{}{}
		<-b.release
		return real.candidate(ctx, cfg)
	}}
}

// TestConcurrentReloadsCoalesce: triggers that arrive while a reload runs
// share one more reload; status and the last outcome answer at once while
// it runs.
func TestConcurrentReloadsCoalesce(t *testing.T) {
	e, err := New(context.Background(), quotaConfig(quota))
	if err != nil {
		t.Fatal(err)
	}
	bl := newBlockingLoad()
	e.source = bl.source(e.source)

	first := make(chan ReloadStatus, 1)
	go func() { first <- e.Reload(context.Background(), "first") }()
	<-bl.started
	within(t, "status while a reload runs", func() {
		p, ok := e.ReloadInProgress()
		if !ok || p.Trigger != "first" {
			t.Errorf("in progress = %+v, %v; want the first reload", p, ok)
		}
		if st := e.LastReload(); st.Trigger != "start" {
			t.Errorf("last reload = %+v, want the start", st)
		}
	})

	const waiting = 20
	var wg sync.WaitGroup
	results := make(chan ReloadStatus, waiting)
	for i := 0; i < waiting; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results <- e.Reload(context.Background(), "api")
		}()
	}
	// Every trigger has joined the next reload once the token holds them all.
	within(t, "triggers joining", func() {
		for {
			e.mu.Lock()
			n := 0
			if e.next != nil {
				n = len(e.next.triggers)
			}
			e.mu.Unlock()
			if n == waiting {
				return
			}
			time.Sleep(time.Millisecond)
		}
	})
	close(bl.release)
	within(t, "the reloads", wg.Wait)
	close(results)
	if st := <-first; !st.OK || st.Coalesced != 1 {
		t.Errorf("first reload = %+v", st)
	}
	for st := range results {
		if !st.OK || st.Coalesced != waiting || st.Trigger != "api" {
			t.Errorf("coalesced reload = %+v, want one reload answering %d triggers", st, waiting)
		}
	}
	if bl.calls != 2 {
		t.Errorf("%d builds for %d triggers, want 2 (the running one and one after it)", bl.calls, waiting+1)
	}
	if _, ok := e.ReloadInProgress(); ok {
		t.Error("a reload is still reported in progress")
	}
}

// TestReloadDeadline: a build that never returns is abandoned at the
// reload deadline, reported, and does not hold up the next reload.
func TestReloadDeadline(t *testing.T) {
	cfg := quotaConfig(quota)
	cfg.ReloadTimeout = 200 * time.Millisecond
	e, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	wedged := make(chan struct{})
	t.Cleanup(func() { close(wedged) })
	folders := e.source
	e.source = fakeSource{folders, func(context.Context, Config) (*Snapshot, error) {
		<-wedged // ignores its context, as a compile does
		return nil, nil
	}}
	var st ReloadStatus
	within(t, "a reload whose build hangs", func() { st = e.Reload(context.Background(), "wedged") })
	if st.OK || len(st.Problems) != 1 || !strings.Contains(st.Problems[0].Message, "did not finish within 200ms") {
		t.Errorf("status = %+v, want the deadline named", st)
	}
	e.source = folders
	e.cfg.ReloadTimeout = time.Minute // a real build on a busy machine may take more than 200ms
	within(t, "the next reload", func() { st = e.Reload(context.Background(), "next") })
	if !st.OK {
		t.Errorf("the reload after a wedged one = %+v", st)
	}
	if ok, failed := e.ReloadCounts(); ok != 1 || failed != 1 {
		t.Errorf("reload counts ok=%d failed=%d", ok, failed)
	}
}

// TestGateUsesItsOwnTimeout: the reload gate's fixtures run under
// TestTimeout, so a request deadline too short for a busy machine (here:
// one nanosecond) cannot refuse a good candidate. The repository's own
// policies, so that each fixture's evaluation outlasts the nanosecond.
func TestGateUsesItsOwnTimeout(t *testing.T) {
	cfg := Config{Policies: "../policies", Schemas: "../schemas", Tests: repoTests, EvalTimeout: time.Nanosecond}
	snap, err := Load(context.Background(), cfg)
	if err != nil {
		t.Fatalf("the gate used the request deadline: %v", err)
	}
	if !snap.Gated {
		t.Error("a Snapshot that passed the gate is not marked Gated")
	}
	// The Snapshot itself keeps the request deadline.
	if snap.timeout != time.Nanosecond {
		t.Errorf("the Snapshot's evaluation deadline is %s, want the configured 1ns", snap.timeout)
	}
}

// TestGatedStartNeverFallsBackToUngated: a revision saved while the gate
// was off is not a last good copy for a gated start.
func TestGatedStartNeverFallsBackToUngated(t *testing.T) {
	root := copyTree(t, quota)
	ungated := quotaConfig(root)
	gated := ungated
	gated.Tests = filepath.Join(root, "tests")
	state := t.TempDir()
	if err := mustLoad(t, ungated).SaveTo(state); err != nil {
		t.Fatal(err)
	}
	if _, ok := LastGood(state, gated); ok {
		t.Fatal("a gated start may fall back to a copy saved without the gate")
	}
	if _, ok := LastGood(state, ungated); !ok {
		t.Fatal("an ungated start cannot use its own saved copy")
	}
	// The same revision saved again after passing the gate qualifies.
	if err := mustLoad(t, gated).SaveTo(state); err != nil {
		t.Fatal(err)
	}
	saved, ok := LastGood(state, gated)
	if !ok {
		t.Fatal("a gated copy is not offered to a gated start")
	}
	editFile(t, filepath.Join(root, "policies", "decisions", "quota_check", "policy.rego"), "reasons := [", "reasons := [[")
	e, err := New(context.Background(), gated, Fallback(saved))
	if err != nil || !e.Snapshot().Gated {
		t.Fatalf("fallback to the gated copy: %v", err)
	}
}
