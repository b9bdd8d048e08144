package deploy

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/arbiter-dev/arbiter/internal/ruleedit"
)

var (
	helpOnce sync.Once
	helpText string
	helpErr  error
)

// serveHelp is `arbiter serve -h`: its flags with their defaults and the
// environment variables it reads, from the code itself.
// It reads no file a rule edit changes, and building the binary is most of
// this package's cost, so -short (.ci/rule-edit) skips what needs it.
func serveHelp(t *testing.T) string {
	t.Helper()
	ruleedit.Skip(t)
	helpOnce.Do(func() {
		var out []byte
		cmd := exec.Command("go", "run", "../cmd/arbiter", "serve", "-h")
		if bin := os.Getenv("ARBITER_BIN"); bin != "" { // make test's: make build built it
			cmd = exec.Command(bin, "serve", "-h")
		}
		out, helpErr = cmd.Output()
		helpText = string(out)
	})
	if helpErr != nil {
		t.Fatalf("arbiter serve -h: %v", helpErr)
	}
	return helpText
}

var flagLine = regexp.MustCompile(`^\s+(?:-\w, )?--([a-z0-9-]+)`)

// flagDefault is the default of serve's flag name as its usage prints it
// ("" for a zero value, which pflag leaves out).
func flagDefault(t *testing.T, name string) string {
	t.Helper()
	for _, line := range strings.Split(serveHelp(t), "\n") {
		if m := flagLine.FindStringSubmatch(line); m != nil && m[1] == name {
			def := ""
			if i := strings.LastIndex(line, "(default "); i >= 0 {
				def = strings.TrimSuffix(strings.TrimSpace(line[i+len("(default "):]), ")")
			}
			return def
		}
	}
	t.Fatalf("arbiter serve has no flag --%s", name)
	return ""
}

// manifest is kubernetes.yaml's objects by kind, as maps.
func manifest(t *testing.T) map[string]map[string]any {
	t.Helper()
	raw, err := os.ReadFile("kubernetes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]any{}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	for {
		var o map[string]any
		if err := dec.Decode(&o); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		kind, _ := o["kind"].(string)
		out[kind] = o
	}
	return out
}

// setting is what the replicas run with for serve's flag name: the
// ConfigMap's ARBITER_ variable, else the flag's default in the code.
func setting(t *testing.T, objs map[string]map[string]any, name string) string {
	t.Helper()
	env := "ARBITER_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
	if v, ok := obj(objs["ConfigMap"], "data")[env].(string); ok {
		return v
	}
	return flagDefault(t, name)
}

func duration(t *testing.T, objs map[string]map[string]any, name string) time.Duration {
	t.Helper()
	v := setting(t, objs, name)
	if v == "" {
		return 0
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("--%s %q: %v", name, v, err)
	}
	return d
}

func container(t *testing.T) map[string]any {
	t.Helper()
	containers, _ := deploymentPod(t)["containers"].([]any)
	if len(containers) != 1 {
		t.Fatalf("want one container, got %d", len(containers))
	}
	return containers[0].(map[string]any)
}

func number(v any) int {
	n, _ := v.(int)
	return n
}

// The grace period covers every budget of the stop, with a margin: the
// delay before it (a preStop sleep or --shutdown-delay, so that SIGTERM
// does not race the pod's removal from the Service's endpoints), finishing
// requests (--shutdown-timeout), draining the decision log (again
// --shutdown-timeout) and the last upload
// (--decision-log-upload-shutdown-timeout). The budgets are the flags'
// defaults in the code unless the ConfigMap sets them.
func TestStopFitsTheGracePeriod(t *testing.T) {
	objs := manifest(t)
	pod := deploymentPod(t)
	grace := time.Duration(number(pod["terminationGracePeriodSeconds"])) * time.Second
	if _, set := pod["terminationGracePeriodSeconds"]; !set {
		grace = 30 * time.Second // Kubernetes' default
	}
	preStop := time.Duration(number(obj(obj(obj(container(t), "lifecycle"), "preStop"), "sleep")["seconds"])) * time.Second
	delay := duration(t, objs, "shutdown-delay")
	if preStop+delay <= 0 {
		t.Error("no preStop sleep and no --shutdown-delay: SIGTERM races the pod's removal from the Service's endpoints")
	}
	stop := duration(t, objs, "shutdown-timeout")
	upload := duration(t, objs, "decision-log-upload-shutdown-timeout")
	budgets := preStop + delay + 2*stop + upload
	if margin := grace - budgets; margin < 5*time.Second {
		t.Errorf("terminationGracePeriodSeconds %s leaves %s over the stop's budgets (preStop %s + delay %s + 2 x shutdown %s + upload %s = %s): want at least 5s",
			grace, margin, preStop, delay, stop, upload, budgets)
	}
}

// The probes tolerate a pause (a collection, CPU throttling) of ten
// seconds before they act, and give each answer two seconds; readiness is
// OPA's /health/ready, liveness /health/live, on a named port.
func TestProbesTolerateAPause(t *testing.T) {
	c := container(t)
	ports := map[string]bool{}
	for _, p := range c["ports"].([]any) {
		name, _ := p.(map[string]any)["name"].(string)
		ports[name] = true
	}
	for probe, path := range map[string]string{"readinessProbe": "/health/ready", "livenessProbe": "/health/live"} {
		p := obj(c, probe)
		get := obj(p, "httpGet")
		if get["path"] != path {
			t.Errorf("%s path %v, want %s", probe, get["path"], path)
		}
		if port, _ := get["port"].(string); !ports[port] {
			t.Errorf("%s port %v is not a named port of the container", probe, get["port"])
		}
		// Kubernetes' defaults: period 10, timeout 1, failureThreshold 3.
		period, timeout, failures := 10, 1, 3
		if v, ok := p["periodSeconds"].(int); ok {
			period = v
		}
		if v, ok := p["timeoutSeconds"].(int); ok {
			timeout = v
		}
		if v, ok := p["failureThreshold"].(int); ok {
			failures = v
		}
		if failures*period < 10 {
			t.Errorf("%s acts after %d misses %ds apart: want at least 10s of tolerance", probe, failures, period)
		}
		if timeout < 2 {
			t.Errorf("%s timeoutSeconds %d: want at least 2", probe, timeout)
		}
	}
}

// matches reports whether a selector's matchLabels select the pods.
func matches(selector map[string]any, labels map[string]any) bool {
	ml := obj(selector, "matchLabels")
	if len(ml) == 0 {
		return false
	}
	for k, v := range ml {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// A PodDisruptionBudget and topology spread over zones and nodes select
// the Deployment's pods, so that a drain or a zone outage takes at most
// one replica.
func TestDisruptionBudgetAndSpread(t *testing.T) {
	objs := manifest(t)
	dep := objs["Deployment"]
	labels := obj(obj(obj(dep, "spec"), "template"), "metadata")["labels"].(map[string]any)
	pdb := objs["PodDisruptionBudget"]
	if pdb == nil {
		t.Fatal("no PodDisruptionBudget")
	}
	spec := obj(pdb, "spec")
	if !matches(obj(spec, "selector"), labels) {
		t.Errorf("the PodDisruptionBudget's selector %v does not select the Deployment's pods %v", spec["selector"], labels)
	}
	replicas := number(obj(dep, "spec")["replicas"])
	switch maxU, minA := spec["maxUnavailable"], spec["minAvailable"]; {
	case maxU != nil && number(maxU) != 1:
		t.Errorf("maxUnavailable %v, want 1", maxU)
	case maxU == nil && (minA == nil || number(minA) != replicas-1):
		t.Errorf("minAvailable %v, want %d (all replicas but one) or maxUnavailable 1", minA, replicas-1)
	}
	keys := map[string]string{}
	for _, c := range deploymentPod(t)["topologySpreadConstraints"].([]any) {
		tsc := c.(map[string]any)
		key, _ := tsc["topologyKey"].(string)
		keys[key], _ = tsc["whenUnsatisfiable"].(string)
		if !matches(obj(tsc, "labelSelector"), labels) {
			t.Errorf("the spread over %s does not select the Deployment's pods", key)
		}
		if number(tsc["maxSkew"]) != 1 {
			t.Errorf("the spread over %s: maxSkew %v, want 1", key, tsc["maxSkew"])
		}
	}
	if keys["topology.kubernetes.io/zone"] != "ScheduleAnyway" {
		t.Errorf("spread over zones: %q, want ScheduleAnyway (a cluster of one zone still schedules)", keys["topology.kubernetes.io/zone"])
	}
	if _, ok := keys["kubernetes.io/hostname"]; !ok {
		t.Error("no spread over nodes (kubernetes.io/hostname)")
	}
}

// Prometheus scrapes the metrics listener (--metrics-addr, no token): its
// port is a named container port, and the pod's scrape annotations name it.
func TestMetricsAreScraped(t *testing.T) {
	objs := manifest(t)
	addr := setting(t, objs, "metrics-addr")
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("--metrics-addr %q: %v (the API's /metrics needs a token)", addr, err)
	}
	found := false
	for _, p := range container(t)["ports"].([]any) {
		pm := p.(map[string]any)
		if pm["name"] == "metrics" && strconv.Itoa(number(pm["containerPort"])) == port {
			found = true
		}
	}
	if !found {
		t.Errorf("no container port named metrics at %s", port)
	}
	ann := obj(obj(obj(objs["Deployment"], "spec"), "template"), "metadata")["annotations"].(map[string]any)
	if ann["prometheus.io/scrape"] != "true" || ann["prometheus.io/port"] != port || ann["prometheus.io/path"] != "/metrics" {
		t.Errorf("scrape annotations %v, want scrape true, port %s, path /metrics", ann, port)
	}
}

// The image's binary names its version: the build stage takes the VERSION
// build argument (its context has no .git) and stamps it as the Makefile
// does (cmd/arbiter's TestStampedVersion proves the stamp is reported).
func TestImageStampsItsVersion(t *testing.T) {
	raw, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	arg, stamped := false, false
	for _, line := range strings.Split(string(raw), "\n") {
		fields := strings.Fields(line)
		switch {
		case len(fields) > 1 && fields[0] == "ARG" && strings.HasPrefix(fields[1], "VERSION"):
			arg = true
		case len(fields) > 0 && fields[0] == "RUN" && strings.Contains(line, "go build") && strings.Contains(line, "-X main.version=${VERSION}"):
			stamped = arg // the argument must be declared before its use
		}
	}
	if !stamped {
		t.Error("the Dockerfile does not build with -X main.version=${VERSION} after ARG VERSION")
	}
}

// diffPeak is what the background diff of a new revision of the shipped
// policies may take (docs/DIFF.md measures about 1 GB).
const diffPeak = 1 << 30

// A replica whose container limit is below the diff's peak runs no
// background diff (--diff-timeout 0): the diff would get the pod
// OOM-killed on the first new revision.
func TestBackgroundDiffFitsTheMemoryLimit(t *testing.T) {
	objs := manifest(t)
	limit := obj(obj(container(t), "resources"), "limits")["memory"]
	q, ok := limit.(string)
	if !ok {
		t.Fatalf("the container has no memory limit: %v", limit)
	}
	bytes := memoryQuantity(t, q)
	if d := duration(t, objs, "diff-timeout"); d != 0 && bytes < diffPeak {
		t.Errorf("--diff-timeout %s with a %s memory limit: the background diff may take about 1 GB; set ARBITER_DIFF_TIMEOUT to 0 (and run arbiter diff where bundles are published) or raise the limit", d, q)
	}
}

// memoryQuantity reads a Kubernetes memory quantity in binary units.
func memoryQuantity(t *testing.T, q string) int64 {
	t.Helper()
	for suffix, mult := range map[string]int64{"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30} {
		if n, ok := strings.CutSuffix(q, suffix); ok {
			v, err := strconv.ParseInt(n, 10, 64)
			if err != nil {
				t.Fatalf("memory quantity %q: %v", q, err)
			}
			return v * mult
		}
	}
	t.Fatalf("memory quantity %q: want Ki, Mi or Gi", q)
	return 0
}
