package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/arbiter-dev/arbiter/internal/corpus"
)

// rotateLua makes every wrk thread send the corpus requests in turn, each
// thread from its own place in the corpus. The requests are built once in
// init: the load generator does no work per request but send bytes. done()
// prints the figures as one JSON line for the driver.
const rotateLua = `-- Written by bench/e2e: rotates through the corpus, one request per input.
local reqs, n, i = {}, 0, 0
local started = 0

function setup(thread)
  thread:set("slot", started)
  started = started + 1
end

function init(args)
  for line in io.lines(args[1]) do
    local path, file = line:match("^(%S+)%s+(%S+)$")
    local f = assert(io.open(file, "rb"))
    local body = f:read("*a")
    f:close()
    n = n + 1
    reqs[n] = wrk.format("POST", path, {["Content-Type"] = "application/json"}, body)
  end
  local threads = tonumber(args[2]) or 1
  i = math.floor((slot or 0) * n / threads)
end

function request()
  i = i % n + 1
  return reqs[i]
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'WRKJSON {"requests":%d,"duration_us":%d,"bytes":%d,"p50_us":%d,"p90_us":%d,"p99_us":%d,"max_us":%d,"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d}\n',
    summary.requests, summary.duration, summary.bytes,
    math.floor(latency:percentile(50)), math.floor(latency:percentile(90)), math.floor(latency:percentile(99)), math.floor(latency.max),
    e.connect, e.read, e.write, e.status, e.timeout))
end
`

// writeLoad writes one file per corpus input, wrapped for OPA's Data API
// path (the same bytes for every server), an index of "PATH FILE" lines and
// the Lua script. It returns the script and index paths.
func writeLoad(dir string, inputs []corpus.Input) (script, index string, err error) {
	bodies := filepath.Join(dir, "bodies")
	if err := os.MkdirAll(bodies, 0o755); err != nil {
		return "", "", err
	}
	var idx bytes.Buffer
	for i, in := range inputs {
		f := filepath.Join(bodies, fmt.Sprintf("%04d.json", i))
		if err := os.WriteFile(f, dataRequest(in.Body), 0o644); err != nil {
			return "", "", err
		}
		fmt.Fprintf(&idx, "%s %s\n", dataPath(in.Decision), f)
	}
	index = filepath.Join(dir, "index.txt")
	script = filepath.Join(dir, "rotate.lua")
	if err := os.WriteFile(index, idx.Bytes(), 0o644); err != nil {
		return "", "", err
	}
	return script, index, os.WriteFile(script, []byte(rotateLua), 0o644)
}

func dataPath(decision string) string { return "/v1/data/decisions/" + decision + "/decision" }

func dataRequest(input []byte) []byte {
	return append(append([]byte(`{"input":`), input...), '}')
}

// wrkResult is one wrk run.
type wrkResult struct {
	Requests   int64 `json:"requests"`
	DurationUS int64 `json:"duration_us"`
	Bytes      int64 `json:"bytes"`
	P50US      int64 `json:"p50_us"`
	P90US      int64 `json:"p90_us"`
	P99US      int64 `json:"p99_us"`
	MaxUS      int64 `json:"max_us"`
	Connect    int64 `json:"connect"`
	Read       int64 `json:"read"`
	Write      int64 `json:"write"`
	Status     int64 `json:"status"` // answers other than 2xx and 3xx
	Timeout    int64 `json:"timeout"`
}

func (r wrkResult) rps() float64 {
	if r.DurationUS == 0 {
		return 0
	}
	return float64(r.Requests) / (float64(r.DurationUS) / 1e6)
}

func (r wrkResult) errors() int64 { return r.Connect + r.Read + r.Write + r.Status + r.Timeout }

func wrkArgs(c config, d time.Duration, script, index, addr string) []string {
	return []string{"wrk", "-t", strconv.Itoa(c.threads), "-c", strconv.Itoa(c.conns), "-d", d.String(),
		"--timeout", "10s", "-s", script, "http://" + addr + "/", "--", index, strconv.Itoa(c.threads)}
}

func runWrk(ctx context.Context, argv []string) (wrkResult, error) {
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		return wrkResult{}, fmt.Errorf("%s: %w\n%s%s", strings.Join(argv, " "), err, out.String(), errb.String())
	}
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		if j, ok := strings.CutPrefix(sc.Text(), "WRKJSON "); ok {
			var r wrkResult
			if err := json.Unmarshal([]byte(j), &r); err != nil {
				return wrkResult{}, fmt.Errorf("wrk output %q: %w", j, err)
			}
			return r, nil
		}
	}
	return wrkResult{}, fmt.Errorf("no WRKJSON line in wrk's output:\n%s%s", out.String(), errb.String())
}
