package main

import "context"

// An A/B comparison (-shadow, -store) measures one server setting against
// a baseline under two loads: wrk saturating the server on the corpus, and
// a paced open-loop load. Each repetition runs every mode once, in an order
// that rotates with the repetition; the first mode is the baseline and the
// last is its control (the baseline again: how far two runs of one thing
// differ on this machine).
var abLoads = []string{"saturated", "paced"}

// abEach calls fn for every load, repetition and mode, in that rotating
// order, and returns the runs fn measured.
func abEach(reps int, modes []string, fn func(load, mode string, rep int) (loadRun, error)) ([]loadRun, error) {
	var runs []loadRun
	for _, load := range abLoads {
		err := rotate(reps, modes, func(rep int, mode string) error {
			r, err := fn(load, mode, rep)
			runs = append(runs, r)
			return err
		})
		if err != nil {
			return nil, err
		}
	}
	return runs, nil
}

// abMeasure runs load against s (at s.addr; paced: reqs at pace a second)
// for c.duration and returns the run with the server's CPU over it.
func abMeasure(ctx context.Context, c config, s *server, load, mode string, rep int, script, index string, reqs []pacedRequest, pace int) (loadRun, error) {
	cpu0, _ := cpuSeconds(s.pid())
	var res wrkResult
	var err error
	if load == "saturated" {
		res, err = runWrk(ctx, wrkArgs(c, c.duration, script, index, s.addr))
	} else {
		res, err = paced(ctx, s, reqs, pace, c.duration)
	}
	cpu1, _ := cpuSeconds(s.pid())
	return loadRun{load: load, server: mode, rep: rep, res: res, cpu: cpu1 - cpu0}, err
}

// abRatios writes, for each load and each mode but the baseline, the
// medians over the repetitions of its p99, p50 and throughput against the
// baseline's of the same repetition.
func abRatios(w func(string, ...any), runs []loadRun, modes []string, reps int, against string) {
	res := map[[3]any]wrkResult{}
	for _, r := range runs {
		res[[3]any{r.load, r.rep, r.server}] = r.res
	}
	w("| load | against %s, median of %d repetitions | p99 | p50 | throughput |", against, reps)
	w("|---|---|---|---|---|")
	for _, load := range abLoads {
		for _, mode := range modes[1:] {
			var p99, p50, rps []float64
			for rep := range reps {
				on, off := res[[3]any{load, rep, mode}], res[[3]any{load, rep, modes[0]}]
				p99 = append(p99, float64(on.P99US)/float64(off.P99US))
				p50 = append(p50, float64(on.P50US)/float64(off.P50US))
				rps = append(rps, on.rps()/off.rps())
			}
			w("| %s | %s | %.2fx | %.2fx | %.2fx |", load, mode, median(p99), median(p50), median(rps))
		}
	}
}
