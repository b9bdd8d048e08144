package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/arbiter-dev/arbiter/decisionstore"
	"github.com/arbiter-dev/arbiter/internal/pgtest"
)

// runStore is `go run ./bench/e2e -store`: two Arbiters on the repository's
// policies, started together with the same flags except that one also
// writes to a decision store (--decision-store), measured in turns in the
// same run: without the store, with it, and without it again (the
// control: how far two runs of the same thing differ on this machine).
// Each runs under wrk saturating it and under a paced open-loop load. For
// the runs with the store it also measures the records written a second:
// the records of the run over the time from its start until the store has
// every one (or counted it dropped). The database is -store-url, or a
// throwaway cluster (internal/pgtest: fsync off) on the same machine, so
// that PostgreSQL's work shares the cores with the server's. It prints;
// it writes nothing.
func runStore(ctx context.Context, c config) error {
	l, err := prepareLoad(ctx, c, "store")
	if err != nil {
		return err
	}
	defer os.RemoveAll(l.tmp)
	dbURL, where := c.storeURL, "-store-url"
	if dbURL == "" {
		cl, err := pgtest.New()
		if err != nil {
			return fmt.Errorf("a throwaway PostgreSQL (or pass -store-url): %w", err)
		}
		defer cl.Remove()
		// The cluster is the benchmark's alone: its default database serves.
		dbURL, where = cl.URL("postgres"), "a throwaway cluster on this machine (internal/pgtest: fsync off)"
	}

	plain, plainArgv, err := launchArbiter(ctx, "plain", filepath.Join(l.tmp, "plain.out"), filepath.Join(l.tmp, "plain.log"))
	if err != nil {
		return err
	}
	defer plain.stop()
	stored, storedArgv, err := launchArbiter(ctx, "stored", filepath.Join(l.tmp, "stored.out"), filepath.Join(l.tmp, "stored.log"),
		"--decision-store", dbURL, "--replica-id", "bench")
	if err != nil {
		return err
	}
	defer stored.stop()
	storeStats := func() (decisionstore.SinkStats, error) {
		var doc struct {
			Store decisionstore.SinkStats `json:"store"`
		}
		err := stored.getJSON(ctx, "/v1/status", &doc) // first: a return's operands have no order but the calls'
		return doc.Store, err
	}

	for _, s := range []*server{plain, stored} {
		logf("warm-up of %s, %s", s.name, c.warmup)
		if _, err := runWrk(ctx, wrkArgs(c, c.warmup, l.script, l.index, s.addr)); err != nil {
			return err
		}
	}
	type run struct {
		loadRun
		written, dropped uint64
		drain            time.Duration // after the run, until the store had every record
	}
	var runs []run
	modes := []string{"none", "store", "none (control)"}
	abs, err := abEach(c.reps, modes, func(load, mode string, rep int) (loadRun, error) {
		s := plain
		if mode == "store" {
			s = stored
		}
		before, err := storeStats()
		if err != nil {
			return loadRun{}, err
		}
		// Errors (timeouts of an overloaded machine) are reported, not
		// fatal: they are part of what a run shows.
		ab, err := abMeasure(ctx, c, s, load, mode, rep, l.script, l.index, corpusRequests(l.inputs, true), c.pace)
		if err != nil {
			return ab, err
		}
		r := run{loadRun: ab}
		ended := time.Now()
		for mode == "store" {
			after, err := storeStats()
			if err != nil {
				return ab, err
			}
			if after.Queued == 0 {
				r.drain = time.Since(ended)
				r.written, r.dropped = after.Written-before.Written, after.DroppedTotal()-before.DroppedTotal()
				break
			}
			if time.Since(ended) > 5*time.Minute {
				return ab, fmt.Errorf("the store still has %d records queued 5 minutes after the run", after.Queued)
			}
			time.Sleep(20 * time.Millisecond)
		}
		runs = append(runs, r)
		logf("%s run %d %-15s %8.0f req/s  p50 %6.2f ms  p99 %6.2f ms  written %d dropped %d drain %s",
			load, rep+1, mode, ab.res.rps(), ms(ab.res.P50US), ms(ab.res.P99US), r.written, r.dropped, r.drain.Round(time.Millisecond))
		return ab, nil
	})
	if err != nil {
		return err
	}

	w := func(format string, args ...any) { fmt.Printf(format+"\n", args...) }
	w("| load | run | decision store | req/s | errors | p50 ms | p99 ms | server CPU µs/req | records written | dropped | drain s | records/s into the store |")
	w("|---|---|---|---|---|---|---|---|---|---|---|---|")
	var sustained []float64
	for _, r := range runs {
		perSec := "-"
		if r.server == "store" {
			v := float64(r.written) / (float64(r.res.DurationUS)/1e6 + r.drain.Seconds())
			perSec = fmt.Sprintf("%.0f", v)
			if r.load == "saturated" {
				sustained = append(sustained, v)
			}
		}
		w("| %s | %d | %s | %.0f | %d | %.2f | %.2f | %.0f | %d | %d | %.2f | %s |", r.load, r.rep+1, r.server, r.res.rps(), r.res.errors(), ms(r.res.P50US), ms(r.res.P99US),
			r.cpu/float64(r.res.Requests)*1e6, r.written, r.dropped, r.drain.Seconds(), perSec)
	}
	w("")
	abRatios(w, abs, modes, c.reps, "no store")
	w("")
	w("Records per second sustained into the store under the saturated load (median): %.0f.", median(sustained))
	w("")
	w("Servers: `%s` and `%s`; the database: %s.", shellQuote(plainArgv), shellQuote(storedArgv), where)
	w("Saturated load: `%s`; paced load: %d requests a second of the same corpus, open loop, for %s.",
		shellQuote(wrkArgs(c, c.duration, "$TMP/load.lua", "$TMP/index", "127.0.0.1:PORT")), c.pace, c.duration)
	return nil
}
