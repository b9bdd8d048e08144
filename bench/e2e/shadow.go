package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/arbiter-dev/arbiter/engine"
	"github.com/arbiter-dev/arbiter/internal/corpus"
	"github.com/arbiter-dev/arbiter/shadow"
)

// loopingRule is a second definition of a decision's "decision" rule (the
// convention every decision follows: DESIGN.md) whose body never holds and
// never ends: evaluating the decision then runs to its deadline, whatever
// the rest of the policy says. It names no rule of the policies.
const loopingRule = `decision := "shadow benchmark: never" if {
	some i in numbers.range(1, 100000)
	some j in numbers.range(1, 100000)
	i == j + 100000
}
`

// runShadow is `go run ./bench/e2e -shadow`: one Arbiter serving the
// repository's policies, alternately with no candidate in shadow, with a
// candidate that loops until its deadline (the live revision's deadline)
// on every decision it shadows, and with none again (the control: how far
// two runs of the same thing differ on this machine), switched through
// POST and DELETE /v1/shadow between runs of the same process. Each
// combination runs under two loads: wrk saturating the server on the
// corpus, and a paced open-loop load light enough to leave the candidate
// idle time to run in. It prints the live latency of each run and the
// ratios; it writes nothing.
func runShadow(ctx context.Context, c config) error {
	l, err := prepareLoad(ctx, c, "shadow")
	if err != nil {
		return err
	}
	defer os.RemoveAll(l.tmp)
	cand := filepath.Join(l.tmp, "candidate")
	for _, dir := range []string{"policies", "schemas"} {
		if err := os.CopyFS(filepath.Join(cand, dir), os.DirFS(dir)); err != nil {
			return err
		}
	}
	for _, name := range l.snap.Names() {
		src := "package decisions." + name + "\n\n" + loopingRule
		if err := os.WriteFile(filepath.Join(cand, "policies", "decisions", name, "zz_shadow_benchmark_loop.rego"), []byte(src), 0o644); err != nil {
			return err
		}
	}

	s, argv, err := launchArbiter(ctx, "arbiter", filepath.Join(l.tmp, "arbiter.log"), filepath.Join(l.tmp, "decisions.log"), "--shadow-cpu", fmt.Sprint(c.shadowCPU))
	if err != nil {
		return err
	}
	defer s.stop()
	load, _ := json.Marshal(map[string]string{"policies": filepath.Join(cand, "policies"), "schemas": filepath.Join(cand, "schemas")})
	set := func(on bool) error {
		if !on {
			_, _, err := s.request(ctx, http.MethodDelete, "/v1/shadow", nil)
			return err
		}
		if status, body, err := s.post(ctx, "/v1/shadow", load); err != nil || status != http.StatusOK {
			return fmt.Errorf("loading the looping candidate: %d %s %v", status, body, err)
		}
		return nil
	}
	stats := func() (shadow.Stats, error) {
		var doc struct {
			Stats shadow.Stats `json:"stats"`
		}
		err := s.getJSON(ctx, "/v1/shadow", &doc) // first: a return's operands have no order but the calls'
		return doc.Stats, err
	}

	logf("warm-up, %s", c.warmup)
	if _, err := runWrk(ctx, wrkArgs(c, c.warmup, l.script, l.index, s.addr)); err != nil {
		return err
	}
	// The modes: no candidate, the looping candidate, and no candidate
	// again (abEach's control).
	type run struct {
		loadRun
		before, after shadow.Stats
	}
	var runs []run
	modes := []string{"none", "looping", "none (control)"}
	abs, err := abEach(c.reps, modes, func(load, mode string, rep int) (loadRun, error) {
		if err := set(mode == "looping"); err != nil {
			return loadRun{}, err
		}
		before, err := stats()
		if err != nil {
			return loadRun{}, err
		}
		r, err := abMeasure(ctx, c, s, load, mode, rep, l.script, l.index, corpusRequests(l.inputs, false), c.shadowPace)
		if err != nil {
			return r, err
		}
		after, err := stats()
		if err != nil {
			return r, err
		}
		if r.res.errors() > 0 {
			return r, fmt.Errorf("%s load saw %d errors", load, r.res.errors())
		}
		runs = append(runs, run{r, before, after})
		logf("%s run %d %-15s %8.0f req/s  p50 %6.2f ms  p99 %6.2f ms", load, rep+1, mode, r.res.rps(), ms(r.res.P50US), ms(r.res.P99US))
		return r, nil
	})
	if err != nil {
		return err
	}
	if err := set(false); err != nil {
		return err
	}

	w := func(format string, args ...any) { fmt.Printf(format+"\n", args...) }
	w("| load | run | candidate in shadow | req/s | p50 ms | p99 ms | server CPU µs/req | sampled | judged | dropped (queue full) | expired | candidate evaluating s | paused s |")
	w("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range runs {
		a, b := r.after, r.before
		w("| %s | %d | %s | %.0f | %.2f | %.2f | %.0f | %.0f | %.0f | %.0f | %.0f | %.1f | %.1f |", r.load, r.rep+1, r.server, r.res.rps(), ms(r.res.P50US), ms(r.res.P99US),
			r.cpu/float64(r.res.Requests)*1e6, float64(a.Sampled)-float64(b.Sampled), float64(a.Judged)-float64(b.Judged),
			float64(a.Dropped)-float64(b.Dropped), float64(a.Expired)-float64(b.Expired), a.EvaluationSeconds-b.EvaluationSeconds, a.PausedSeconds-b.PausedSeconds)
	}
	w("")
	abRatios(w, abs, modes, c.reps, "no candidate")
	w("")
	w("Server: `%s`", shellQuote(argv))
	w("Saturated load: `%s`; paced load: %d requests a second of the same corpus, each sent on time whatever the answers before it (open loop), for %s.",
		shellQuote(wrkArgs(c, c.duration, "$TMP/load.lua", "$TMP/index", "127.0.0.1:PORT")), c.shadowPace, c.duration)
	return nil
}

// pacedRequest is one request of a paced load.
type pacedRequest struct {
	path string
	body []byte
}

// corpusRequests are the corpus on Arbiter's own decision path, or (data)
// on OPA's Data API path, which both servers answer (the bytes wrk sends
// too).
func corpusRequests(inputs []corpus.Input, data bool) []pacedRequest {
	out := make([]pacedRequest, len(inputs))
	for i, in := range inputs {
		out[i] = pacedRequest{"/v1/decisions/" + in.Decision, in.Body}
		if data {
			out[i] = pacedRequest{dataPath(in.Decision), dataRequest(in.Body)}
		}
	}
	return out
}

// paced sends reqs in turn at rate requests a second for d, each on its own
// schedule whatever the answers before it (an open loop, as independent
// callers are), and returns the latencies as a wrkResult.
func paced(ctx context.Context, s *server, reqs []pacedRequest, rate int, d time.Duration) (wrkResult, error) {
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	defer client.CloseIdleConnections()
	n := int(d.Seconds() * float64(rate))
	lat := make([]time.Duration, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range n {
		if wait := time.Until(start.Add(time.Duration(i) * time.Second / time.Duration(rate))); wait > 0 {
			select {
			case <-ctx.Done():
				return wrkResult{}, ctx.Err()
			case <-time.After(wait):
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := reqs[i%len(reqs)]
			t0 := time.Now()
			resp, err := client.Post(s.url(req.path), "application/json", bytes.NewReader(req.body))
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					err = fmt.Errorf("status %d", resp.StatusCode)
				}
			}
			lat[i], errs[i] = time.Since(t0), err
		}()
	}
	wg.Wait()
	res := wrkResult{Requests: int64(n), DurationUS: time.Since(start).Microseconds()}
	for _, err := range errs {
		if err != nil {
			res.Status++
		}
	}
	slices.Sort(lat)
	res.P50US, res.P90US, res.P99US, res.MaxUS = lat[n/2].Microseconds(), lat[n*9/10].Microseconds(), lat[n*99/100].Microseconds(), lat[n-1].Microseconds()
	return res, nil
}

// load is what a load-comparing run (-shadow, -store) starts from: the
// repository's policies loaded, a freshly built bin/arbiter, the corpus
// and wrk's script over it in a temporary folder (the caller removes tmp).
type load struct {
	snap          *engine.Snapshot
	inputs        []corpus.Input
	tmp           string
	script, index string
}

// prepareLoad builds it, from the repository's root (it changes to it).
func prepareLoad(ctx context.Context, c config, name string) (*load, error) {
	if err := toRoot(); err != nil {
		return nil, err
	}
	if _, err := exec.LookPath("wrk"); err != nil {
		return nil, errors.New("wrk not found; install it from the machine's packages (apt-get install -y wrk)")
	}
	build := exec.CommandContext(ctx, "make", "--no-print-directory", "build")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return nil, err
	}
	return newLoad(ctx, c, "arbiter-"+name+"-bench-", nil)
}

// newLoad loads the policies and writes the corpus and wrk's script into a
// new temporary folder named from tmpPattern; keep, when not nil, is told
// each input the engine decides (else every such input is kept).
func newLoad(ctx context.Context, c config, tmpPattern string, keep func(snap *engine.Snapshot, decision string, d *engine.Decision) bool) (*load, error) {
	l := &load{}
	var err error
	if l.snap, err = engine.Load(ctx, engine.Config{Policies: "policies", Schemas: "schemas"}); err != nil {
		return nil, err
	}
	l.inputs, err = corpus.Generate(tests, c.corpusN, c.seed, func(decision string, body []byte) bool {
		d, err := l.snap.Decide(ctx, decision, body, engine.Options{})
		return err == nil && (keep == nil || keep(l.snap, decision, d))
	})
	if err != nil {
		return nil, err
	}
	if l.tmp, err = os.MkdirTemp("", tmpPattern); err != nil {
		return nil, err
	}
	if l.script, l.index, err = writeLoad(l.tmp, l.inputs); err != nil {
		os.RemoveAll(l.tmp)
		return nil, err
	}
	return l, nil
}
