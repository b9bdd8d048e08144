package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
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
// repository's policies under wrk's load on the corpus, alternately with
// no candidate in shadow and with a candidate that loops until its
// deadline (the live revision's deadline) on every decision it shadows,
// switched through POST and DELETE /v1/shadow between runs of the same
// process. It prints the live latency of each run and the ratios; it
// writes nothing.
func runShadow(ctx context.Context, c config) error {
	root, err := repoRoot()
	if err != nil {
		return err
	}
	if err := os.Chdir(root); err != nil {
		return err
	}
	if _, err := exec.LookPath("wrk"); err != nil {
		return fmt.Errorf("wrk not found; install it from the machine's packages (apt-get install -y wrk)")
	}
	build := exec.CommandContext(ctx, "go", "build", "-o", "bin/arbiter", "./cmd/arbiter")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return err
	}
	snap, err := engine.Load(ctx, engine.Config{Policies: "policies", Schemas: "schemas"})
	if err != nil {
		return err
	}
	inputs, err := corpus.Generate(tests, c.corpusN, c.seed, func(decision string, body []byte) bool {
		_, err := snap.Decide(ctx, decision, body, engine.Options{})
		return err == nil
	})
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "arbiter-shadow-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	script, index, err := writeLoad(tmp, inputs)
	if err != nil {
		return err
	}
	cand := filepath.Join(tmp, "candidate")
	for _, dir := range []string{"policies", "schemas"} {
		if err := os.CopyFS(filepath.Join(cand, dir), os.DirFS(dir)); err != nil {
			return err
		}
	}
	for _, name := range snap.Names() {
		src := "package decisions." + name + "\n\n" + loopingRule
		if err := os.WriteFile(filepath.Join(cand, "policies", "decisions", name, "zz_shadow_benchmark_loop.rego"), []byte(src), 0o644); err != nil {
			return err
		}
	}

	addr, err := freeAddr()
	if err != nil {
		return err
	}
	argv := []string{"bin/arbiter", "serve", "--addr", addr, "--policies", "policies", "--schemas", "schemas", "--tests", "",
		"--decision-log", filepath.Join(tmp, "decisions.log"), "--log-level", "error", "--shadow-cpu", fmt.Sprint(c.shadowCPU)}
	s, err := startServer("arbiter", addr, filepath.Join(tmp, "arbiter.log"), argv...)
	if err != nil {
		return err
	}
	defer s.stop()
	if err := s.waitReady(ctx, "/health", 2*time.Minute); err != nil {
		return err
	}
	load, _ := json.Marshal(map[string]string{"policies": filepath.Join(cand, "policies"), "schemas": filepath.Join(cand, "schemas")})
	set := func(on bool) error {
		if on {
			status, body, err := s.post(ctx, "/v1/shadow", load)
			if err != nil || status != http.StatusOK {
				return fmt.Errorf("loading the looping candidate: %d %s %v", status, body, err)
			}
			return nil
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodDelete, s.url("/v1/shadow"), nil)
		resp, err := s.client.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	}
	stats := func() (shadow.Stats, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.url("/v1/shadow"), nil)
		resp, err := s.client.Do(req)
		if err != nil {
			return shadow.Stats{}, err
		}
		defer resp.Body.Close()
		var doc struct {
			Stats shadow.Stats `json:"stats"`
		}
		return doc.Stats, json.NewDecoder(resp.Body).Decode(&doc)
	}

	logf("warm-up, %s", c.warmup)
	if _, err := runWrk(ctx, wrkArgs(c, c.warmup, script, index, addr)); err != nil {
		return err
	}
	// Each repetition runs three loads in a rotating order: no candidate,
	// the looping candidate, and no candidate again (the control: how far
	// two runs of the same thing differ on this machine).
	type run struct {
		rep           int
		mode          string
		res           wrkResult
		cpu           float64
		before, after shadow.Stats
	}
	modes := []string{"none", "looping", "none (control)"}
	var runs []run
	for rep := range c.reps {
		for k := range modes {
			mode := modes[(rep+k)%len(modes)]
			if err := set(mode == "looping"); err != nil {
				return err
			}
			before, err := stats()
			if err != nil {
				return err
			}
			cpu0, _ := cpuSeconds(s.pid())
			res, err := runWrk(ctx, wrkArgs(c, c.duration, script, index, addr))
			cpu1, _ := cpuSeconds(s.pid())
			if err != nil {
				return err
			}
			after, err := stats()
			if err != nil {
				return err
			}
			if res.errors() > 0 {
				return fmt.Errorf("wrk saw %d errors", res.errors())
			}
			runs = append(runs, run{rep, mode, res, cpu1 - cpu0, before, after})
			logf("run %d %-15s %8.0f req/s  p50 %6.2f ms  p99 %6.2f ms", rep+1, mode, res.rps(), ms(res.P50US), ms(res.P99US))
		}
	}
	if err := set(false); err != nil {
		return err
	}

	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	w("| run | candidate in shadow | req/s | p50 ms | p99 ms | server CPU µs/req | sampled | judged | dropped (queue full) | expired | candidate evaluating s | paused s |")
	w("|---|---|---|---|---|---|---|---|---|---|---|---|")
	byRep := map[int]map[string]wrkResult{}
	for _, r := range runs {
		d := func(f func(shadow.Stats) float64) float64 { return f(r.after) - f(r.before) }
		w("| %d | %s | %.0f | %.2f | %.2f | %.0f | %.0f | %.0f | %.0f | %.0f | %.1f | %.1f |", r.rep+1, r.mode, r.res.rps(), ms(r.res.P50US), ms(r.res.P99US),
			r.cpu/float64(r.res.Requests)*1e6,
			d(func(s shadow.Stats) float64 { return float64(s.Sampled) }),
			d(func(s shadow.Stats) float64 { return float64(s.Judged) }),
			d(func(s shadow.Stats) float64 { return float64(s.Dropped) }),
			d(func(s shadow.Stats) float64 { return float64(s.Expired) }),
			d(func(s shadow.Stats) float64 { return s.EvaluationSeconds }),
			d(func(s shadow.Stats) float64 { return s.PausedSeconds }))
		if byRep[r.rep] == nil {
			byRep[r.rep] = map[string]wrkResult{}
		}
		byRep[r.rep][r.mode] = r.res
	}
	ratios := func(mode string) (p99, p50, rps []float64) {
		for rep := range c.reps {
			on, off := byRep[rep][mode], byRep[rep]["none"]
			p99 = append(p99, float64(on.P99US)/float64(off.P99US))
			p50 = append(p50, float64(on.P50US)/float64(off.P50US))
			rps = append(rps, on.rps()/off.rps())
		}
		return
	}
	med := func(xs []float64) float64 { slices.Sort(xs); return xs[len(xs)/2] }
	w("")
	w("| against no candidate, median of %d repetitions | p99 | p50 | throughput |", c.reps)
	w("|---|---|---|---|")
	for _, mode := range []string{"looping", "none (control)"} {
		p99, p50, rps := ratios(mode)
		w("| %s | %.2fx | %.2fx | %.2fx |", mode, med(p99), med(p50), med(rps))
	}
	w("")
	w("Server: `%s`", shellQuote(argv))
	w("Load: `%s`", shellQuote(wrkArgs(c, c.duration, "$TMP/load.lua", "$TMP/index", "127.0.0.1:PORT")))
	fmt.Print(b.String())
	return nil
}
