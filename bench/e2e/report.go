package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/arbiter-dev/arbiter/internal/corpus"
)

type machine struct {
	date      string
	uname     string
	cpu       string
	goCPU     string // as go test names it
	cores     int
	mem       string
	goVersion string
	opa       string
	wrk       string
	loadStart string
	loadEnd   string
}

func machineInfo(ctx context.Context) machine {
	m := machine{date: time.Now().UTC().Format("2006-01-02 15:04 MST"), cores: runtime.NumCPU(), loadStart: loadAvg()}
	if out, err := exec.CommandContext(ctx, "uname", "-a").Output(); err == nil {
		m.uname = strings.TrimSpace(string(out))
	}
	if v, ok := procLine("/proc/cpuinfo", "model name"); ok {
		m.cpu = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
	}
	if v, ok := procLine("/proc/meminfo", "MemTotal:"); ok {
		var kb int64
		fmt.Sscan(v, &kb)
		m.mem = fmt.Sprintf("%.1f GiB", float64(kb)/(1<<20))
	}
	m.goVersion = toolVersion(ctx, "go", "version")
	return m
}

func toolVersion(ctx context.Context, argv ...string) string {
	out, _ := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return strings.TrimSpace(line)
}

func loadAvg() string {
	b, _ := os.ReadFile("/proc/loadavg") // none: no fields
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// loadRun is one measured run: a server (in an A/B comparison, a mode)
// under a load, a repetition.
type loadRun struct {
	server string
	load   string // an A/B comparison's (abLoads)
	rep    int
	res    wrkResult
	cpu    float64 // server CPU seconds during the run
	maxRSS int64
}

func (l loadRun) cpuPerReq() float64 {
	if l.res.Requests == 0 {
		return 0
	}
	return l.cpu / float64(l.res.Requests)
}

type sizeResult struct {
	spec      sizeSpec
	bodyBytes int
	times     map[string][]time.Duration
	alloc     map[string]float64 // bytes allocated per request
	cpu       map[string]float64 // server CPU seconds per request
}

func (s sizeResult) median(server string) time.Duration { return median(s.times[server]) }

type report struct {
	cfg              config
	machine          machine
	commands         []string
	wrkCommand       string
	tmp              string
	bench            []benchLine
	mix              []corpus.Mix
	outcomes         map[string]map[string]int // decision -> outcome -> corpus inputs, as the engine decides them
	sized            func(size int) (decision string, body []byte, err error)
	checked          int
	runs             []loadRun
	pacedRuns        []loadRun // fixed-rate latency runs
	hwmAfterLoad     []int64   // arbiter, opa
	hwmAfterSizes    []int64
	sizes            []sizeResult
	decisionLogBytes int64
	// decisionLogDropped counts records Arbiter dropped because its log
	// buffer was full: a dropped record is work it did not do.
	decisionLogDropped float64
}

func ms(us int64) float64 { return float64(us) / 1000 }

func msd(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func mib(b int64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }

// serverStats are the medians of a server's load runs, and each run's
// throughput and p99.
type serverStats struct {
	rps, p50, p90, p99, slowest, cpu float64 // req/s, ms, ms, ms, ms, µs per request
	maxRSS                           int64
	errors                           int64
	rpsRuns, p99Runs                 []float64
	n                                int
}

func statsOf(runs []loadRun, server string) serverStats {
	var s serverStats
	var p50, p90, slowest, cpu []float64
	for _, run := range runs {
		if run.server != server {
			continue
		}
		s.rpsRuns = append(s.rpsRuns, run.res.rps())
		p50 = append(p50, ms(run.res.P50US))
		p90 = append(p90, ms(run.res.P90US))
		s.p99Runs = append(s.p99Runs, ms(run.res.P99US))
		slowest = append(slowest, ms(run.res.MaxUS))
		cpu = append(cpu, run.cpuPerReq()*1e6)
		s.maxRSS = max(s.maxRSS, run.maxRSS)
		s.errors += run.res.errors()
	}
	s.n = len(s.rpsRuns)
	s.rps, s.p50, s.p90, s.p99, s.slowest, s.cpu = median(s.rpsRuns), median(p50), median(p90), median(s.p99Runs), median(slowest), median(cpu)
	return s
}

// repRatios are Arbiter's throughput over OPA's in each repetition.
func (r *report) repRatios() []float64 {
	rps := map[[2]any]float64{} // (rep, server)
	for _, run := range r.runs {
		rps[[2]any{run.rep, run.server}] = run.res.rps()
	}
	var out []float64
	for rep := range r.cfg.reps {
		if o := rps[[2]any{rep, "opa"}]; o > 0 {
			out = append(out, rps[[2]any{rep, "arbiter"}]/o)
		}
	}
	return out
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "**not met**"
}

func (r *report) markdown() string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	m := r.machine
	w("# Benchmarks\n\n")
	w("Written by `make bench` (`go run ./bench/e2e`, source in `bench/e2e/`), which rewrites everything\n")
	w("above the history section. The machines are shared, 2-core and noisy: **compare the ratios,\n")
	w("each measured within this one run, never absolute figures across runs.**\n\n")
	w("- date: %s\n", m.date)
	w("- machine: `%s`\n", m.uname)
	cpu := m.cpu
	if m.goCPU != "" && m.goCPU != m.cpu {
		cpu += " (go test: " + m.goCPU + ")"
	}
	w("- CPU: %s, %d cores, %s RAM; load average %s at the start, %s at the end\n", cpu, m.cores, m.mem, m.loadStart, m.loadEnd)
	w("- `%s`; `bin/opa version`: %s; `%s`\n\n", m.goVersion, m.opa, m.wrk)

	r.writeSummary(w)

	w("## Commands\n\n```sh\nmake bench    # = these two:\n")
	w("go test -count=1 -tags benchfloor -run '^TestFloorMatchesEngine$' ./engine/    # the floor still decides as the engine\n")
	w("go run ./bench/e2e    # which runs:\n")
	self, _ := os.Executable()
	for _, c := range r.commands {
		c = strings.ReplaceAll(c, r.tmp, "$TMP")
		c = strings.ReplaceAll(c, self, "bench/e2e")
		w("%s\n", c)
	}
	if r.wrkCommand != "" {
		w("%s    # x %d per server, alternating, after a %s warm-up\n", r.wrkCommand, r.cfg.reps, r.cfg.warmup)
	}
	w("```\n\n")
	w("`$TMP` is the driver's temporary folder (corpus bodies, wrk script, Arbiter's decision log);\n")
	w("`bench/e2e -null-server` is the driver itself serving a constant answer.\n\n")

	w("## Corpus\n\n")
	w("`internal/corpus.Generate(\"policy_test\", %d, %d)`: distinct inputs derived from the recorded fixtures\n", r.cfg.corpusN, r.cfg.seed)
	w("(members swapped between fixtures of the same decision, Runner histories of realistic size written in;\n")
	w("only inputs the engine decides are kept, and the outcomes are the engine's: the generator knows no rule).\n\n")
	w("| decision | inputs | outcomes | min | median | max size |\n|---|---:|---|---:|---:|---:|\n")
	for _, x := range r.mix {
		var outs []string
		for o, n := range r.outcomes[x.Decision] {
			outs = append(outs, fmt.Sprintf("%s %d", o, n))
		}
		sort.Strings(outs)
		w("| %s | %d | %s | %s | %s | %s |\n", x.Decision, x.Count, strings.Join(outs, ", "), kb(x.MinBytes), kb(x.MedianBytes), kb(x.MaxBytes))
	}
	w("\n")

	r.writeInProcess(w)
	r.writeLoad(w)
	r.writeSizes(w)
	r.writeMethod(w)
	return b.String()
}

func kb(n int) string {
	if n < 1024 {
		return fmt.Sprintf("%d B", n)
	}
	return fmt.Sprintf("%.1f KB", float64(n)/1024)
}

func (r *report) writeSummary(w func(string, ...any)) {
	w("## Targets of the issue, measured in this run\n\n")
	w("| target | measured | |\n|---|---|---|\n")
	a, o := statsOf(r.runs, "arbiter"), statsOf(r.runs, "opa")
	if a.n > 0 && o.n > 0 {
		w("| E2E server CPU per request, typical states, validation and decision log on: OPA's ≥ 4x Arbiter's (aim 6x) | %.2fx (%.0f vs %.0f µs; throughput %.2fx: %.0f vs %.0f req/s, more sensitive to the neighbours' load) | %s |\n", o.cpu/a.cpu, o.cpu, a.cpu, a.rps/o.rps, a.rps, o.rps, verdict(o.cpu >= 4*a.cpu))
		if pa, po := statsOf(r.pacedRuns, "arbiter"), statsOf(r.pacedRuns, "opa"); pa.n > 0 && po.n > 0 {
			w("| E2E p99 at a fixed %d req/s (open loop, a rate both sustain): Arbiter under half of OPA's | %.2fx (%.2f ms vs %.2f ms; p50 %.2f vs %.2f ms) | %s |\n",
				r.cfg.pace, pa.p99/po.p99, pa.p99, po.p99, pa.p50, po.p50, verdict(2*pa.p99 < po.p99))
		}
		w("| (context) E2E p99 saturated (wrk's closed loop on the shared cores; the tail is time slices) | %.2fx (%.2f ms vs %.2f ms) | |\n", a.p99/o.p99, a.p99, o.p99)
		w("| (context) resident memory under load | %s vs %s (largest VmRSS sampled during the load runs; Arbiter's includes the /ui ring of recent decisions, up to 16 MiB of their inputs, and the decision log's queue) | |\n", mib(a.maxRSS), mib(o.maxRSS))
	} else {
		w("| E2E throughput, p99, memory under load | not measured (no wrk) | |\n")
	}
	if s4, ok := r.size("4MiB"); ok {
		at, ot := s4.median("arbiter"), s4.median("opa")
		w("| 4 MiB Runner state: Arbiter ≥ 4x faster than OPA | %.2fx (%.0f vs %.0f ms per request; by server CPU %.2fx) | %s |\n",
			msd(ot)/msd(at), msd(at), msd(ot), s4.cpu["opa"]/s4.cpu["arbiter"], verdict(float64(ot) >= 4*float64(at)))
		if s8, ok := r.size("8MiB"); ok {
			ratio := s8.cpu["arbiter"] / s4.cpu["arbiter"]
			w("| an 8 MiB state costs Arbiter ≤ 2.3x a 4 MiB one over HTTP, by server CPU per request | %.2fx (by time %.2fx) | %s |\n",
				ratio, msd(s8.median("arbiter"))/msd(at), verdict(ratio <= 2.3))
		}
		if s16, ok := r.size("16MiB"); ok {
			ratio := msd(s16.median("arbiter")) / msd(at)
			w("| linear: Arbiter's 16 MiB ≤ 4.4x its 4 MiB | %.2fx (by server CPU %.2fx; OPA: %.2fx) | %s |\n",
				ratio, s16.cpu["arbiter"]/s4.cpu["arbiter"], msd(s16.median("opa"))/msd(ot), verdict(ratio <= 4.4))
		}
	}
	if d, ok := findBench(r.bench, "Corpus/decide"); ok {
		if p, ok := findBench(r.bench, "Corpus/prepared_eval_only"); ok {
			w("| in process: Decide ≤ 0.4x the bare topdown prepared evaluation of the same inputs | %.2fx (%.0f vs %.0f µs per input) | %s |\n", d.NsPerOp/p.NsPerOp, d.NsPerOp/1e3, p.NsPerOp/1e3, verdict(d.NsPerOp <= 0.4*p.NsPerOp))
		}
	}
	w("\n")
}

func (r *report) size(name string) (sizeResult, bool) {
	if i := slices.IndexFunc(r.sizes, func(s sizeResult) bool { return s.spec.name == name }); i >= 0 {
		return r.sizes[i], true
	}
	return sizeResult{}, false
}

func (r *report) writeInProcess(w func(string, ...any)) {
	if len(r.bench) == 0 {
		return
	}
	w("## 1. In process (`go test -bench`, engine/bench_test.go)\n\n")
	w("Median of %d runs of `-benchtime %s`. `decide` is `Snapshot.Decide` (strict decoding, schema validation,\n", r.cfg.count, r.cfg.benchtime)
	w("conversion, evaluation, result validation, encoding); `prepared_eval_only` the prepared query alone on inputs\n")
	w("already converted to `ast.Value`; `opa_server_path` what stock OPA's server does per Data API request minus\n")
	w("HTTP (its JSON decoder, `ast.InterfaceToValue`, the same prepared query, its response encoding);\n")
	w("`reference_go` the rules written by hand in Go (`engine/testdata/floor`, built only with `-tags benchfloor`:\n")
	w("`encoding/json` into typed structs, the 22 rules, encoding), the floor no interpreter can beat.\n")
	w("BenchmarkCorpus rotates through the corpus.\n\n")
	w("| benchmark | µs/op | KB/op | allocs/op | / prepared_eval_only | / reference_go |\n|---|---:|---:|---:|---:|---:|\n")
	for _, l := range r.bench {
		group := l.Name[:strings.LastIndexByte(l.Name, '/')+1]
		rel := func(other string) string {
			if o, ok := findBench(r.bench, group+other); ok && o.NsPerOp > 0 {
				return fmt.Sprintf("%.2fx", l.NsPerOp/o.NsPerOp)
			}
			return ""
		}
		w("| %s | %s | %s | %.0f | %s | %s |\n", l.Name, thousands(l.NsPerOp/1e3), thousands(l.BytesPerOp/1024), l.AllocsPerOp, rel("prepared_eval_only"), rel("reference_go"))
	}
	w("\n")
}

func thousands(x float64) string {
	switch {
	case x >= 100:
		s := fmt.Sprintf("%.0f", x)
		var out []byte
		for i := range s {
			if i > 0 && (len(s)-i)%3 == 0 {
				out = append(out, ',')
			}
			out = append(out, s[i])
		}
		return string(out)
	case x >= 10:
		return fmt.Sprintf("%.1f", x)
	default:
		return fmt.Sprintf("%.2f", x)
	}
}

func (r *report) writeLoad(w func(string, ...any)) {
	if len(r.runs) == 0 {
		return
	}
	w("## 2. End to end over loopback (wrk, %d connections, %d threads)\n\n", r.cfg.conns, r.cfg.threads)
	w("Each server answered the same rotating corpus on OPA's Data API path: %d run(s) of %s per server,\n", r.cfg.reps, r.cfg.duration)
	w("servers alternating (the first server rotates from one repetition to the next); medians over the runs.\n")
	w("Before the runs, both servers answered a sample of %d corpus inputs identically (and later every sized input).\n", r.checked)
	w("Server CPU is the server process's user+system time over the run divided by its requests;\n")
	w("wrk runs on the same 2 cores, so every server shares them with the load generator.\n\n")
	w("| server | req/s | p50 ms | p99 ms | req/s per run | errors | server CPU µs/req | max RSS under load | VmHWM after load |\n")
	w("|---|---:|---:|---:|---|---:|---:|---:|---:|\n")
	for i, name := range []string{"arbiter", "opa", "null"} {
		s := statsOf(r.runs, name)
		hwm := ""
		if i < len(r.hwmAfterLoad) {
			hwm = mib(r.hwmAfterLoad[i])
		}
		w("| %s | %.0f | %.2f | %.2f | %s | %d | %.0f | %s | %s |\n", label(name), s.rps, s.p50, s.p99, joinf("%.0f", s.rpsRuns), s.errors, s.cpu, mib(s.maxRSS), hwm)
	}
	a, o, n := statsOf(r.runs, "arbiter"), statsOf(r.runs, "opa"), statsOf(r.runs, "null")
	w("\nArbiter/OPA: throughput **%.2fx** (per repetition: %s), p50 %.2fx, p99 %.2fx, server CPU per request %.2fx.\n", a.rps/o.rps, joinf("%.2f", r.repRatios()), a.p50/o.p50, a.p99/o.p99, a.cpu/o.cpu)
	w("Share of the null server's throughput: Arbiter %.0f%%, OPA %.0f%%.\n", 100*a.rps/n.rps, 100*o.rps/n.rps)
	w("Arbiter's decision log held %s at the end (every request is logged with its input; records dropped\n", mib(r.decisionLogBytes))
	w("because the log's buffer was full: %.0f).\n\n", r.decisionLogDropped)
	if len(r.pacedRuns) > 0 {
		w("At a fixed rate of %d requests a second (an open loop from the driver: each request sent on time\n", r.cfg.pace)
		w("whatever the answers before it, the same corpus on the Data API path, alternating servers), the\n")
		w("latency a caller sees when the service is not saturated:\n\n")
		w("| server | p50 ms | p90 ms | p99 ms | max ms | p99 per run | errors |\n|---|---:|---:|---:|---:|---|---:|\n")
		for _, name := range []string{"arbiter", "opa"} {
			st := statsOf(r.pacedRuns, name)
			w("| %s | %.2f | %.2f | %.2f | %.2f | %s | %d |\n", label(name), st.p50, st.p90, st.p99, st.slowest, joinf("%.2f", st.p99Runs), st.errors)
		}
		w("\n")
	}
}

// joinf is xs, each in format, separated by commas.
func joinf(format string, xs []float64) string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = fmt.Sprintf(format, x)
	}
	return strings.Join(out, ", ")
}

func label(name string) string {
	switch name {
	case "arbiter":
		return "Arbiter (validation + decision log)"
	case "opa":
		return "stock OPA " + "(no validation, no decision log)"
	default:
		return "null server (constant answer)"
	}
}

func (r *report) writeSizes(w func(string, ...any)) {
	if len(r.sizes) == 0 {
		return
	}
	w("## 3. Size scaling (one Runner state with a large outbox, `corpus.Sized`)\n\n")
	w("End to end: sequential requests on one keep-alive connection per server, alternating servers request by\n")
	w("request. Per request: the time from sending the body to reading the whole answer (median), the server\n")
	w("process's CPU time (user+system, all its threads, GC included; mean), and the bytes its Go runtime\n")
	w("allocated (`go_memstats_alloc_bytes_total` from its `/metrics` before and after, minus one scrape).\n")
	w("In process: `BenchmarkSize` of the same inputs.\n\n")
	w("| size | body | requests | Arbiter ms | OPA ms | OPA/Arbiter | Arbiter CPU ms | OPA CPU ms | Arbiter MiB alloc | OPA MiB alloc | in-process decide ms | in-process opa_server_path ms |\n")
	w("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, s := range r.sizes {
		a, o := s.median("arbiter"), s.median("opa")
		inProcess := func(name string) string {
			if l, ok := findBench(r.bench, "Size/"+s.spec.name+"/"+name); ok {
				return fmt.Sprintf("%.1f", l.NsPerOp/1e6)
			}
			return ""
		}
		w("| %s | %s | %d | %.1f | %.1f | %.2fx | %.1f | %.1f | %.1f | %.1f | %s | %s |\n", s.spec.name, kb(s.bodyBytes), s.spec.requests, msd(a), msd(o), msd(o)/msd(a),
			s.cpu["arbiter"]*1e3, s.cpu["opa"]*1e3, s.alloc["arbiter"]/(1<<20), s.alloc["opa"]/(1<<20), inProcess("decide"), inProcess("opa_server_path"))
	}
	if len(r.hwmAfterSizes) == 2 {
		w("\nPeak resident memory (VmHWM) after the size runs: Arbiter %s, OPA %s.\n", mib(r.hwmAfterSizes[0]), mib(r.hwmAfterSizes[1]))
	}
	w("\n")
}

func (r *report) writeMethod(w func(string, ...any)) {
	w(`## What is compared, and what is not fair

- **Same policies, same inputs, same client.** Both servers load the same ` + "`policies/`" + ` folder and
  answer the same request bytes on the same path (` + "`POST /v1/data/decisions/NAME/decision`" + `), driven by
  the same wrk script; the driver refuses to measure if their results differ.
- **Arbiter does more per request, on purpose.** It decodes strictly (duplicate keys, exact numbers),
  validates the input against its JSON Schema, validates the result, and writes a decision-log record
  holding the whole input. Stock OPA validates nothing at request time, and its decision logging is off
  unless configured (it is not here): that favours OPA. Arbiter runs with ` + "`--tests ''`" + `, which only skips
  the policy tests at start-up and on reload, never work per request.
- **Quiet servers.** Both log at ` + "`error`" + ` level; OPA runs with ` + "`--skip-version-check`" + ` so that nothing leaves
  loopback. Both run with GOMAXPROCS = 2 cores. Both collect garbage at Go's default target (100); ` + "`arbiter serve`" + ` also sets a Go memory limit of 1 GiB by default (` + "`--memory-limit`" + `), which only matters near that size.
- **One machine for everything.** wrk shares the 2 cores with the server under test, so absolute
  throughput is lower than on a dedicated client; every server pays the same. The null server shows the
  ceiling of this client and machine. Runs alternate and the first server rotates, so a burst of
  noise from other tenants does not fall on one server only; the per-run figures show the spread.
- **Latency is wrk's closed-loop latency** (32 connections, each waiting for its answer): good for
  comparing the two servers under the same load, not an open-loop latency guarantee.
- **Memory.** "Max RSS under load" is the largest VmRSS sampled every 100 ms during the load runs;
  VmHWM also counts start-up (compiling the policies) and, after the size runs, the 16 MiB inputs.
- **Size scaling** timings include sending the body over loopback, the same bytes to both servers.
  Allocated bytes come from each server's own Go runtime, which counts everything it allocated for
  the requests (Arbiter's decision log included).
- **` + "`reference_go`" + ` is the floor for the rules, not for decoding.** On the corpus it shows what an
  interpreter costs; on large states its time is almost all ` + "`encoding/json`" + `, which a purpose-built
  decoder can beat, so it is no floor in BenchmarkSize.
- **The in-process ` + "`opa_server_path`" + `** reproduces OPA's per-request decoding and encoding on our
  prepared query; it leaves out OPA's HTTP handling, storage transaction and metrics, so the end-to-end
  figures are the ones that count.

`)
}

// historyMarker separates the generated report from the history that
// make bench keeps as it is.
const historyMarker = "<!-- history: everything below is kept as it is by make bench -->"

// baselineHeading starts the section kept from before bench/e2e existed.
const baselineHeading = "## Engine: `Decide` against the bare prepared query (issue 2 baseline)"

func writeReport(path, md string) error {
	old, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	history := ""
	if i := strings.Index(string(old), historyMarker); i >= 0 {
		history = string(old[i+len(historyMarker):])
	} else if i := strings.Index(string(old), baselineHeading); i >= 0 {
		history = "\n\n" + string(old[i:])
	}
	out := strings.TrimRight(md, "\n") + "\n\n" + historyMarker + "\n\n" + strings.TrimLeft(history, "\n")
	return os.WriteFile(path, []byte(out), 0o644)
}
