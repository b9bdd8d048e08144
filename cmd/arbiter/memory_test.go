package main

import (
	"errors"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/KimMachineGun/automemlimit/memlimit"

	"github.com/arbiter-dev/arbiter/decisionlog"
	"github.com/arbiter-dev/arbiter/decisionstore"
	"github.com/arbiter-dev/arbiter/internal/ruleedit"
	"github.com/arbiter-dev/arbiter/logship"
	"github.com/arbiter-dev/arbiter/server"
	"github.com/arbiter-dev/arbiter/shadow"
)

// cgroupDir writes a cgroup's memory files into a fresh folder.
func cgroupDir(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// The cgroup files are read as the kernel writes them: v2's memory.max
// (bytes or "max"), v1's memory.limit_in_bytes (bytes, or the largest page
// count for none); anything else is an error, never a limit.
func TestCgroupFiles(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  uint64
		err   error // nil: want is the limit
	}{
		{"v2 limit", map[string]string{"memory.max": "536870912\n"}, 512 << 20, nil},
		{"v2 unlimited", map[string]string{"memory.max": "max\n"}, 0, memlimit.ErrNoLimit},
		{"v1 limit", map[string]string{"memory.limit_in_bytes": "268435456\n"}, 256 << 20, nil},
		{"v1 unlimited", map[string]string{"memory.limit_in_bytes": "9223372036854771712\n"}, 0, memlimit.ErrNoLimit},
		{"v2 wins over v1", map[string]string{"memory.max": "536870912", "memory.limit_in_bytes": "268435456"}, 512 << 20, nil},
		{"no cgroup", nil, 0, memlimit.ErrNoCgroup},
		{"garbage", map[string]string{"memory.max": "lots"}, 0, errors.New("not a number")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := cgroupFiles(cgroupDir(t, tc.files))()
			switch {
			case tc.err == nil && (err != nil || got != tc.want):
				t.Errorf("got %d, %v; want %d", got, err, tc.want)
			case tc.err != nil && err == nil:
				t.Errorf("got %d, want an error like %v", got, tc.err)
			case tc.err != nil && errors.Is(tc.err, memlimit.ErrNoLimit) != errors.Is(err, memlimit.ErrNoLimit):
				t.Errorf("got %v, want %v", err, tc.err)
			}
		})
	}
}

// The real binary, in a fake cgroup: the Go memory limit is its share of
// the cgroup's limit, admission and the queues fit inside it, a budget
// given as a flag stands, and /v1/status says what each came to and where
// from. Without a cgroup limit the defaults stand; GOMEMLIMIT wins.
func TestMemoryFromCgroup(t *testing.T) {
	ruleedit.Skip(t)
	t.Parallel()
	args, _ := quickArgs(t)
	client := &http.Client{Timeout: 10 * time.Second}
	defaults := map[string]int64{
		"max-inflight-bytes": server.DefaultMaxInflightBytes, "max-inflight-values": server.DefaultMaxInflightValues,
		"decision-log-queue-bytes": decisionlog.DefaultQueueBytes, "shadow-queue-bytes": shadow.DefaultQueueBytes,
	}
	for _, tc := range []struct {
		name   string
		files  map[string]string
		env    string
		args   []string
		cgroup int64
		source string // of the limit
		limit  int64
		scaled bool // the budgets not given are fitted below their defaults
	}{
		{name: "v2", files: map[string]string{"memory.max": "536870912"}, cgroup: 512 << 20, source: "cgroup", limit: share(512 << 20), scaled: true},
		{name: "v1", files: map[string]string{"memory.limit_in_bytes": "268435456"}, cgroup: 256 << 20, source: "cgroup", limit: share(256 << 20), scaled: true},
		{name: "a budget given", files: map[string]string{"memory.max": "536870912"}, args: []string{"--max-inflight-bytes", "1048576"},
			cgroup: 512 << 20, source: "cgroup", limit: share(512 << 20), scaled: true},
		{name: "with an upload", files: map[string]string{"memory.max": "536870912"}, args: []string{"--decision-log-service", "http://127.0.0.1:1"},
			cgroup: 512 << 20, source: "cgroup", limit: share(512 << 20), scaled: true},
		// The store's queue shares the queues' eighth when there is a
		// store (not reached here: the sink waits for it off the answer
		// path), and its password is in no status.
		{name: "a decision store", files: map[string]string{"memory.max": "536870912"}, args: []string{"--decision-store", "postgres://u:secret@127.0.0.1:1/none"},
			cgroup: 512 << 20, source: "cgroup", limit: share(512 << 20), scaled: true},
		{name: "unlimited", files: map[string]string{"memory.max": "max"}, source: "default", limit: defaultMemoryLimit},
		{name: "GOMEMLIMIT wins", files: map[string]string{"memory.max": "536870912"}, env: "GOMEMLIMIT=300MiB", cgroup: 512 << 20, source: "GOMEMLIMIT", limit: 300 << 20, scaled: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := cgroupDir(t, tc.files)
			srv := startServerWith(t, func(c *exec.Cmd) {
				c.Env = append(os.Environ(), cgroupRootEnv+"="+dir)
				if tc.env != "" {
					c.Env = append(c.Env, tc.env)
				}
			}, append(args, tc.args...)...)
			doc := status(t, client, srv.url)
			storeDoc, _ := doc["store"].(map[string]any)
			withStore := containsArg(tc.args, "--decision-store")
			if withStore != (storeDoc != nil) || (withStore && storeDoc["url"] != "postgres://u:xxxxx@127.0.0.1:1/none") {
				t.Errorf("/v1/status store %v; want one with the password redacted exactly when --decision-store is given", storeDoc)
			}
			mem, _ := doc["memory"].(map[string]any)
			if mem == nil {
				t.Fatal("/v1/status has no memory member")
			}
			if mem["source"] != tc.source || int64(num(mem["limit_bytes"])) != tc.limit || int64(num(mem["cgroup_limit_bytes"])) != tc.cgroup {
				t.Fatalf("memory %v, want limit %d from %s, cgroup %d", mem, tc.limit, tc.source, tc.cgroup)
			}
			if got := metricValue(t, client, srv.url, "go_gc_gomemlimit_bytes"); int64(got) != tc.limit {
				t.Errorf("the Go memory limit is %v, status says %d", got, tc.limit)
			}
			budgets, _ := mem["budgets"].(map[string]any)
			value := func(flag string) (int64, string) {
				b, _ := budgets[flag].(map[string]any)
				s, _ := b["source"].(string)
				return int64(num(b["value"])), s
			}
			want := maps.Clone(defaults)
			if containsArg(tc.args, "--decision-log-service") {
				want["decision-log-upload-queue-bytes"] = logship.DefaultQueueBytes
			}
			if withStore {
				want["decision-store-queue-bytes"] = decisionstore.DefaultQueueBytes
			}
			for flag, def := range want {
				v, src := value(flag)
				switch {
				case containsArg(tc.args, "--"+flag):
					if src != "flag" || v != 1<<20 {
						t.Errorf("%s: %d from %s, want the flag's 1048576", flag, v, src)
					}
				case tc.scaled:
					if src != "memory-limit" || v <= 0 || v >= def {
						t.Errorf("%s: %d from %s, want fitted below the default %d", flag, v, src, def)
					}
				default:
					if src != "default" || v != def {
						t.Errorf("%s: %d from %s, want the default %d", flag, v, src, def)
					}
				}
			}
			if !tc.scaled {
				return
			}
			// What the budgets may hold, at most, fits in the limit:
			// admission half, the queues an eighth.
			bytes, _ := value("max-inflight-bytes")
			values, _ := value("max-inflight-values")
			dlog, _ := value("decision-log-queue-bytes")
			shadowQ, _ := value("shadow-queue-bytes")
			upload, _ := value("decision-log-upload-queue-bytes") // 0 without an upload
			storeQ, _ := value("decision-store-queue-bytes")      // 0 without a store
			if containsArg(tc.args, "--max-inflight-bytes") {
				bytes = 0
			}
			if adm := bytes + values*bytesPerValue; adm > tc.limit/2 {
				t.Errorf("admission may hold %d bytes, more than half the limit %d", adm, tc.limit)
			}
			if q := dlog + shadowQ + upload + storeQ; q > tc.limit/8+2 {
				t.Errorf("the queues may hold %d bytes, more than an eighth of the limit %d", q, tc.limit)
			}
		})
	}
}

// share is the Go memory limit of a cgroup's limit, as planMemory computes it.
func share(cgroup int64) int64 {
	c := cgroupShare
	return int64(float64(cgroup) * c)
}

func num(v any) float64 {
	f, _ := v.(float64)
	return f
}
