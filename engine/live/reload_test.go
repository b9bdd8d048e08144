package live

import (
	"context"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/arbiter-dev/arbiter/engine"
	"github.com/arbiter-dev/arbiter/internal/wait"
)

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
	build func(context.Context, engine.Config) (*engine.Snapshot, error)
}

func (f fakeSource) candidate(ctx context.Context, cfg engine.Config) (*engine.Snapshot, error) {
	return f.build(ctx, cfg)
}

// blockedEngine is an Engine of the quota policies whose reloads build
// through a blockingLoad.
func blockedEngine(t *testing.T) (*Engine, *blockingLoad) {
	t.Helper()
	e, err := New(context.Background(), quotaConfig(quota))
	if err != nil {
		t.Fatal(err)
	}
	bl := newBlockingLoad()
	e.source = bl.source(e.source)
	return e, bl
}

func (b *blockingLoad) source(real Source) Source {
	return fakeSource{real, func(ctx context.Context, cfg engine.Config) (*engine.Snapshot, error) {
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
	e, bl := blockedEngine(t)

	first := make(chan ReloadStatus, 1)
	go func() { first <- e.Reload(context.Background(), "first") }()
	<-bl.started
	wait.Within(t, "status while a reload runs", func() {
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
	wait.Within(t, "triggers joining", func() {
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
	wait.Within(t, "the reloads", wg.Wait)
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

// TestCloseWaitsForTheRunningReload: Close lets no reload start (one
// queued behind the running one is answered, not built), refuses the
// running one's activation, and returns only once it has ended, its
// outcome recorded (the stop of a server then lets go of its state
// folder, into which an activation saves).
func TestCloseWaitsForTheRunningReload(t *testing.T) {
	e, bl := blockedEngine(t)
	go e.Reload(context.Background(), "first")
	<-bl.started
	queued := make(chan ReloadStatus, 1)
	go func() { queued <- e.Reload(context.Background(), "queued") }()
	wait.Within(t, "a reload queued behind the running one", func() {
		for {
			e.mu.Lock()
			n := e.next != nil && len(e.next.triggers) == 1
			e.mu.Unlock()
			if n {
				return
			}
			time.Sleep(time.Millisecond)
		}
	})
	closed := make(chan struct{})
	go func() { e.Close(); close(closed) }()
	// Close is blocked waiting for the reload: its goroutine's stack says
	// so, or it returned, which it must not while the build runs.
	wait.Within(t, "Close waiting for the reload", func() {
		for {
			select {
			case <-closed:
				t.Error("Close returned while a reload was running")
				return
			default:
			}
			buf := make([]byte, 1<<20)
			for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") { // one goroutine each
				if strings.Contains(g, "(*WaitGroup).Wait") && strings.Contains(g, "(*Engine).Close") {
					return
				}
			}
			time.Sleep(time.Millisecond)
		}
	})
	close(bl.release)
	wait.Within(t, "Close", func() { <-closed })
	if st := e.LastReload(); st.Trigger != "first" || st.OK || len(st.Problems) != 1 || !strings.Contains(st.Problems[0].Message, "stopping") {
		t.Errorf("the reload Close waited for, built after Close began: %+v, want its activation refused", st)
	}
	if st := <-queued; st.OK || len(st.Problems) != 1 || !strings.Contains(st.Problems[0].Message, "stopping") {
		t.Errorf("the reload queued behind the running one at Close: %+v", st)
	}
	if st := e.Reload(context.Background(), "after"); st.OK || len(st.Problems) != 1 || !strings.Contains(st.Problems[0].Message, "stopping") {
		t.Errorf("a reload after Close: %+v", st)
	}
	if bl.calls != 1 {
		t.Errorf("%d builds, want the one Close waited for, not the queued one", bl.calls)
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
	e.source = fakeSource{folders, func(context.Context, engine.Config) (*engine.Snapshot, error) {
		<-wedged // ignores its context, as a compile does
		return nil, nil
	}}
	var st ReloadStatus
	wait.Within(t, "a reload whose build hangs", func() { st = e.Reload(context.Background(), "wedged") })
	if st.OK || len(st.Problems) != 1 || !strings.Contains(st.Problems[0].Message, "did not finish within 200ms") {
		t.Errorf("status = %+v, want the deadline named", st)
	}
	e.source = folders
	e.cfg.ReloadTimeout = time.Minute // a real build on a busy machine may take more than 200ms
	wait.Within(t, "the next reload", func() { st = e.Reload(context.Background(), "next") })
	if !st.OK {
		t.Errorf("the reload after a wedged one = %+v", st)
	}
	if ok, failed := e.ReloadCounts(); ok != 1 || failed != 1 {
		t.Errorf("reload counts ok=%d failed=%d", ok, failed)
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
