// Command e2e is `make bench`: it measures Arbiter against stock OPA on the
// same policies and the same inputs, in process (go test -bench), end to end
// over loopback (wrk, with a null HTTP server as the machine's ceiling) and
// across Runner state sizes, then prints a markdown report and writes it to
// docs/BENCHMARKS.md.
//
//	go run ./bench/e2e           # the full run (needs wrk: apt-get install -y wrk)
//	go run ./bench/e2e -quick    # a smoke run: 1 s loads, no warm-up (skipped without wrk), small sizes, no file written
//	go run ./bench/e2e -shadow   # live latency with and without a looping candidate in shadow (shadow.go)
//	go run ./bench/e2e -store    # latency, throughput and records/s with and without --decision-store (store.go)
//
// All traffic stays on loopback; every run is bounded in time; the servers
// are stopped on exit, on error and on Ctrl-C (and die with the driver if it
// is killed outright).
package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"time"

	"github.com/arbiter-dev/arbiter/engine"
	"github.com/arbiter-dev/arbiter/internal/corpus"
	"github.com/arbiter-dev/arbiter/shadow"
)

type config struct {
	quick      bool
	out        string
	duration   time.Duration
	warmup     time.Duration
	reps       int
	conns      int
	threads    int
	corpusN    int
	seed       int64
	sizes      []sizeSpec
	inprocess  bool
	benchtime  string
	count      int
	limit      time.Duration
	shadow     bool    // -shadow: the shadow benchmark alone (shadow.go)
	shadowCPU  float64 // its --shadow-cpu
	shadowPace int     // requests a second of its paced load
	pace       int     // requests a second of the fixed-rate latency runs
	store      bool    // -store: the decision store benchmark alone (store.go)
	storeURL   string  // its database; "" starts a throwaway cluster
}

type sizeSpec struct {
	name     string
	bytes    int
	requests int // sequential requests per server
}

var fullSizes = []sizeSpec{
	{"64KiB", 64 << 10, 50},
	{"1MiB", 1 << 20, 20},
	{"4MiB", 4 << 20, 8},
	{"8MiB", 8 << 20, 8},
	{"16MiB", 16 << 20, 8},
}

var quickSizes = []sizeSpec{
	{"64KiB", 64 << 10, 5},
	{"256KiB", 256 << 10, 3},
}

// The fixtures the corpus is derived from, relative to the repository.
const tests = "policy_test"

func main() {
	if len(os.Args) == 3 && os.Args[1] == "-null-server" {
		if err := nullServer(os.Args[2]); err != nil {
			fmt.Fprintln(os.Stderr, "null server:", err)
			os.Exit(1)
		}
		return
	}
	var c config
	flag.BoolVar(&c.quick, "quick", false, "smoke run: 1 s loads once each, no warm-up (skipped without wrk), 64 and 256 KiB sizes, no in-process benchmarks, nothing written")
	flag.StringVar(&c.out, "out", "docs/BENCHMARKS.md", "report file to rewrite ('' to only print)")
	flag.DurationVar(&c.duration, "duration", 10*time.Second, "length of one wrk run")
	flag.DurationVar(&c.warmup, "warmup", 3*time.Second, "unrecorded wrk run per server before the measured ones (0: none)")
	flag.IntVar(&c.reps, "reps", 3, "measured wrk runs per server, alternating servers")
	flag.IntVar(&c.conns, "connections", 32, "wrk connections")
	flag.IntVar(&c.threads, "threads", 2, "wrk threads")
	flag.IntVar(&c.corpusN, "corpus", 1000, "distinct corpus inputs")
	flag.Int64Var(&c.seed, "seed", 1, "corpus seed")
	flag.BoolVar(&c.inprocess, "inprocess", true, "run the engine's go test benchmarks too")
	flag.StringVar(&c.benchtime, "benchtime", "1s", "go test -benchtime of the in-process benchmarks")
	flag.IntVar(&c.count, "count", 3, "go test -count of the in-process benchmarks (the median is reported)")
	flag.DurationVar(&c.limit, "limit", 45*time.Minute, "give up after this long")
	flag.BoolVar(&c.shadow, "shadow", false, "measure the live latency with and without a looping candidate in shadow, alone (prints, writes nothing)")
	flag.Float64Var(&c.shadowCPU, "shadow-cpu", shadow.DefaultCPU, "with -shadow: the server's --shadow-cpu")
	flag.IntVar(&c.shadowPace, "shadow-pace", 200, "with -shadow: requests a second of the paced (light) load")
	flag.BoolVar(&c.store, "store", false, "measure latency and throughput with and without --decision-store, and the records a second written to it, alone (prints, writes nothing)")
	flag.StringVar(&c.storeURL, "store-url", "", "with -store: the PostgreSQL database to write to (default: a throwaway cluster started with initdb)")
	flag.IntVar(&c.pace, "pace", 1000, "requests a second of the fixed-rate latency runs (open loop), a rate both servers sustain; 0 skips them")
	flag.Parse()
	c.sizes = fullSizes
	if c.quick {
		c.duration, c.warmup, c.reps = time.Second, 0, 1 // a smoke run: its figures count for nothing
		c.sizes, c.inprocess, c.out = quickSizes, false, ""
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	ctx, cancel := context.WithTimeout(ctx, c.limit)
	var err error
	switch {
	case c.shadow:
		err = runShadow(ctx, c)
	case c.store:
		err = runStore(ctx, c)
	default:
		err = run(ctx, c)
	}
	cancel()
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench/e2e:", err)
		os.Exit(1)
	}
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench/e2e: "+format+"\n", args...)
}

// step is a command of the report's list, added to it and shown as it is
// made, its output shown.
func (r *report) step(ctx context.Context, argv ...string) *exec.Cmd {
	r.commands = append(r.commands, shellQuote(argv))
	logf("%s", shellQuote(argv))
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	return cmd
}

func run(ctx context.Context, c config) (err error) {
	if err := toRoot(); err != nil {
		return err
	}
	r := &report{cfg: c, machine: machineInfo(ctx)}

	wrkPath, wrkErr := exec.LookPath("wrk")
	switch {
	case wrkErr == nil:
		r.machine.wrk = toolVersion(ctx, wrkPath, "-v")
	case c.quick:
		logf("wrk not found: the load runs are skipped in -quick mode")
	default:
		return errors.New("wrk not found; install it from the machine's packages (apt-get install -y wrk)")
	}

	// The Makefile's binaries, as make builds them: an up-to-date one is
	// not linked again, nor rewritten under a test that runs it.
	if err := r.step(ctx, "make", "--no-print-directory", "build", "bin/opa").Run(); err != nil {
		return err
	}
	r.machine.opa = toolVersion(ctx, "bin/opa", "version")

	if c.inprocess {
		if r.bench, r.machine.goCPU, err = runGoBench(r.step(ctx, goTestArgs(c)...)); err != nil {
			return err
		}
	}

	// The engine in process keeps the generated inputs it decides and says
	// what each decides, for the report: the driver knows no rule.
	r.outcomes = map[string]map[string]int{}
	l, err := newLoad(ctx, c, "arbiter-bench-", func(_ *engine.Snapshot, decision string, d *engine.Decision) bool {
		if r.outcomes[decision] == nil {
			r.outcomes[decision] = map[string]int{}
		}
		r.outcomes[decision][d.Outcome]++
		return true
	})
	if err != nil {
		return err
	}
	defer os.RemoveAll(l.tmp)
	r.mix, r.tmp = corpus.Summarize(l.inputs), l.tmp
	r.sized = func(size int) (string, []byte, error) {
		return corpus.Sized(tests, size, func(decision string, body []byte) bool {
			_, err := l.snap.Decide(ctx, decision, body, engine.Options{})
			return err == nil
		})
	}

	self, err := os.Executable()
	if err != nil {
		return err
	}
	var servers []*server
	defer func() {
		for _, s := range servers {
			s.stop()
		}
	}()
	start := func(name, health string, argv func(addr string) []string) (*server, error) {
		s, err := launch(ctx, name, filepath.Join(l.tmp, name+".log"), health, func(addr string) []string {
			a := argv(addr)
			r.commands = append(r.commands, shellQuote(a))
			return a
		})
		if err == nil {
			servers = append(servers, s)
		}
		return s, err
	}
	decisionLog := filepath.Join(l.tmp, "decisions.log")
	arb, err := start("arbiter", "/health", func(addr string) []string { return arbiterArgs(addr, decisionLog) })
	if err != nil {
		return err
	}
	opa, err := start("opa", "/health", func(addr string) []string {
		return []string{"bin/opa", "run", "--server", "--addr", addr, "--log-level", "error", "--skip-version-check", "policies"}
	})
	if err != nil {
		return err
	}
	null, err := start("null", "/", func(addr string) []string {
		return []string{self, "-null-server", addr}
	})
	if err != nil {
		return err
	}

	if r.checked, err = sameAnswers(ctx, arb, opa, l.inputs); err != nil {
		return err
	}
	logf("Arbiter and OPA answered %d corpus inputs alike", r.checked)

	if wrkErr == nil {
		if err := loadRuns(ctx, c, r, []*server{arb, opa, null}, l.script, l.index); err != nil {
			return err
		}
	}
	if c.pace > 0 {
		if err := pacedRuns(ctx, c, r, []*server{arb, opa}, l.inputs); err != nil {
			return err
		}
	}
	hwm := func() []int64 {
		a, _ := procStatus(arb.pid(), "VmHWM")
		o, _ := procStatus(opa.pid(), "VmHWM")
		return []int64{a, o}
	}
	r.hwmAfterLoad = hwm()
	if err := sizeRuns(ctx, c, r, arb, opa); err != nil {
		return err
	}
	r.hwmAfterSizes = hwm()
	if r.decisionLogDropped, err = arb.metric(ctx, "arbiter_decision_log_dropped_total"); err != nil {
		return err
	}
	// Stop Arbiter first: it drains its decision log on the way out.
	arb.stop()
	r.decisionLogBytes = filesSize(decisionLog + "*")
	r.machine.loadEnd = loadAvg()

	md := r.markdown()
	fmt.Print(md)
	if c.out != "" {
		if err := writeReport(c.out, md); err != nil {
			return err
		}
		logf("wrote %s", c.out)
	}
	return nil
}

func filesSize(glob string) int64 {
	files, _ := filepath.Glob(glob)
	var n int64
	for _, f := range files {
		if fi, err := os.Stat(f); err == nil {
			n += fi.Size()
		}
	}
	return n
}

// sameAnswers checks that both servers give the same result for a sample
// of the corpus: measuring two services that disagree would mean nothing.
func sameAnswers(ctx context.Context, arb, opa *server, inputs []corpus.Input) (int, error) {
	step := max(1, len(inputs)/100)
	n := 0
	for i := 0; i < len(inputs); i += step {
		in := inputs[i]
		body := dataRequest(in.Body)
		var results [2]any
		for k, s := range []*server{arb, opa} {
			status, out, err := s.post(ctx, dataPath(in.Decision), body)
			if err != nil {
				return n, fmt.Errorf("%s: %s: %w", s.name, in.Name, err)
			}
			if status != 200 {
				return n, fmt.Errorf("%s answered %d to %s: %s", s.name, status, in.Name, out)
			}
			var doc struct {
				Result any `json:"result"`
			}
			dec := json.NewDecoder(bytes.NewReader(out))
			dec.UseNumber()
			if err := dec.Decode(&doc); err != nil || doc.Result == nil {
				return n, fmt.Errorf("%s: %s: no result in %s", s.name, in.Name, out)
			}
			results[k] = doc.Result
		}
		if !reflect.DeepEqual(results[0], results[1]) {
			return n, fmt.Errorf("arbiter and OPA disagree on %s:\narbiter: %v\nopa:     %v", in.Name, results[0], results[1])
		}
		n++
	}
	return n, nil
}

// loadRuns drives each server with wrk, alternating servers and rotating
// which goes first, and records throughput, latency, CPU and memory.
func loadRuns(ctx context.Context, c config, r *report, servers []*server, script, index string) error {
	r.wrkCommand = shellQuote(wrkArgs(c, c.duration, strings.Replace(script, r.tmp, "$TMP", 1), strings.Replace(index, r.tmp, "$TMP", 1), "127.0.0.1:PORT"))
	for _, s := range servers {
		if c.warmup <= 0 {
			break
		}
		logf("warm-up: %s, %s", s.name, c.warmup)
		if _, err := runWrk(ctx, wrkArgs(c, c.warmup, script, index, s.addr)); err != nil {
			return err
		}
	}
	return rotate(c.reps, servers, func(rep int, s *server) error {
		cpu0, _ := cpuSeconds(s.pid())
		rss := sampleRSS(s.pid(), 100*time.Millisecond)
		res, err := runWrk(ctx, wrkArgs(c, c.duration, script, index, s.addr))
		maxRSS := rss()
		cpu1, _ := cpuSeconds(s.pid())
		if err := cmp.Or(err, s.alive()); err != nil {
			return err
		}
		run := loadRun{server: s.name, rep: rep, res: res, cpu: cpu1 - cpu0, maxRSS: maxRSS}
		r.runs = append(r.runs, run)
		logf("run %d %-7s %8.0f req/s  p50 %6.2f ms  p99 %6.2f ms  errors %d  cpu %.0f µs/req  rss %s",
			rep+1, s.name, res.rps(), ms(res.P50US), ms(res.P99US), res.errors(), run.cpuPerReq()*1e6, mib(maxRSS))
		return nil
	})
}

// rotate calls fn for each repetition and each of xs, the first of xs
// rotating from one repetition to the next.
func rotate[T any](reps int, xs []T, fn func(rep int, x T) error) error {
	for rep := range reps {
		for k := range xs {
			if err := fn(rep, xs[(rep+k)%len(xs)]); err != nil {
				return err
			}
		}
	}
	return nil
}

// pacedRuns measures latency at a fixed rate both servers sustain (an open
// loop: each request is sent on time whatever the answers before it),
// alternating servers: the latency a caller sees when the service is not
// saturated, which wrk's closed loop on two shared cores cannot show (there
// the tail is the operating system's time slices, for every server).
func pacedRuns(ctx context.Context, c config, r *report, servers []*server, inputs []corpus.Input) error {
	reqs := corpusRequests(inputs, true)
	return rotate(c.reps, servers, func(rep int, s *server) error {
		res, err := paced(ctx, s, reqs, c.pace, c.duration)
		if err := cmp.Or(err, s.alive()); err != nil {
			return err
		}
		r.pacedRuns = append(r.pacedRuns, loadRun{server: s.name, rep: rep, res: res})
		logf("paced %d %-7s %d req/s  p50 %6.2f ms  p99 %6.2f ms  errors %d", rep+1, s.name, c.pace, ms(res.P50US), ms(res.P99US), res.Status)
		return nil
	})
}

// allocMetric is the bytes a server's Go runtime has allocated since it
// started.
const allocMetric = "go_memstats_alloc_bytes_total"

// sizeRuns times sequential requests with one large Runner state at each
// size, alternating servers request by request, and reads how many bytes
// each server allocated for them from its own /metrics.
func sizeRuns(ctx context.Context, c config, r *report, arb, opa *server) error {
	servers := []*server{arb, opa}
	scrape := map[string]float64{}
	for _, s := range servers {
		a1, err1 := s.metric(ctx, allocMetric)
		a2, err2 := s.metric(ctx, allocMetric)
		if err := cmp.Or(err1, err2); err != nil {
			return err
		}
		scrape[s.name] = a2 - a1
	}
	for _, sz := range c.sizes {
		decision, doc, err := r.sized(sz.bytes)
		if err != nil {
			return err
		}
		body := dataRequest(doc)
		res := sizeResult{spec: sz, bodyBytes: len(body), times: map[string][]time.Duration{}, alloc: map[string]float64{}, cpu: map[string]float64{}}
		// One unmeasured request each, which must succeed.
		var answers [2]string
		for k, s := range servers {
			status, out, err := s.post(ctx, dataPath(decision), body)
			if err != nil || status != 200 {
				return fmt.Errorf("%s: %s input: status %d, %v: %.300s", s.name, sz.name, status, err, out)
			}
			var doc struct {
				Result json.RawMessage `json:"result"`
			}
			_ = json.Unmarshal(out, &doc)
			answers[k] = string(doc.Result)
		}
		if answers[0] != answers[1] {
			return fmt.Errorf("%s input: Arbiter answered %s, OPA %s", sz.name, answers[0], answers[1])
		}
		before, cpuBefore := map[string]float64{}, map[string]float64{}
		for _, s := range servers {
			if before[s.name], err = s.metric(ctx, allocMetric); err != nil {
				return err
			}
			cpuBefore[s.name], _ = cpuSeconds(s.pid())
		}
		err = rotate(sz.requests, servers, func(_ int, s *server) error {
			t0 := time.Now()
			status, _, err := s.post(ctx, dataPath(decision), body)
			d := time.Since(t0)
			if err != nil || status != 200 {
				return fmt.Errorf("%s: %s input: status %d, %v", s.name, sz.name, status, err)
			}
			res.times[s.name] = append(res.times[s.name], d)
			return nil
		})
		if err != nil {
			return err
		}
		// Let the decision log writer catch up before reading the counters.
		time.Sleep(300 * time.Millisecond)
		for _, s := range servers {
			cpuAfter, _ := cpuSeconds(s.pid())
			res.cpu[s.name] = (cpuAfter - cpuBefore[s.name]) / float64(sz.requests)
			after, err := s.metric(ctx, allocMetric)
			if err != nil {
				return err
			}
			res.alloc[s.name] = (after - before[s.name] - scrape[s.name]) / float64(sz.requests)
		}
		r.sizes = append(r.sizes, res)
		logf("size %-6s arbiter %7.1f ms (cpu %7.1f ms) %7.1f MiB/req   opa %7.1f ms (cpu %7.1f ms) %7.1f MiB/req",
			sz.name, msd(res.median("arbiter")), res.cpu["arbiter"]*1e3, res.alloc["arbiter"]/(1<<20),
			msd(res.median("opa")), res.cpu["opa"]*1e3, res.alloc["opa"]/(1<<20))
	}
	return nil
}

// toRoot changes to the repository's root.
func toRoot() error {
	dir, err := os.Getwd()
	if err != nil {
		return err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && bytes.Contains(b, []byte("module github.com/arbiter-dev/arbiter\n")) {
			return os.Chdir(dir)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return errors.New("run from inside the Arbiter repository")
		}
		dir = parent
	}
}

func shellQuote(argv []string) string {
	out := make([]string, len(argv))
	for i, a := range argv {
		switch {
		case a == "":
			out[i] = "''"
		case strings.ContainsAny(a, " \t'\"^|()*?"):
			out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		default:
			out[i] = a
		}
	}
	return strings.Join(out, " ")
}
