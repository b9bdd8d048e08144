package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/types"
)

// The sandbox: a policy sees its input and its data files and nothing else
// (no network, environment, files, clock or randomness), and a policy that
// runs away is cut off at the evaluation deadline without taking the
// process, or the next request, with it. Refusals that load_test.go already
// covers (http.send, opa.runtime, net.lookup_ip_addr, time.now_ns) are not
// repeated here except in the every-refused-builtin sweep.

const quotaPolicy = "policies/decisions/quota_check/policy.rego"

// withProbe adds `probe := expr` to a copy of the quota policy, at line 19.
func withProbe(t *testing.T, expr string) Config {
	t.Helper()
	root := copyTree(t, quota)
	editFile(t, filepath.Join(root, quotaPolicy), "reasons :=", "probe := "+expr+"\n\nreasons :=")
	return quotaConfig(root)
}

func TestSandboxRefusesReachingOutside(t *testing.T) {
	secret := filepath.Join(t.TempDir(), "secret.json")
	if err := os.WriteFile(secret, []byte(`{"type": "string", "const": "s3cret"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, expr, builtin string
	}{
		{"randomness", `rand.intn("seed", 10)`, "rand.intn"},
		{"uuid generation", `uuid.rfc4122("seed")`, "uuid.rfc4122"},
		{"file read through a schema $ref", `json.match_schema("x", {"$ref": "file://` + secret + `"})`, "json.match_schema"},
		{"file read through verify_schema", `json.verify_schema({"$ref": "file://` + secret + `"})`, "json.verify_schema"},
		{"network through a schema $ref", `json.match_schema("x", {"$ref": "http://127.0.0.1:1/s.json"})`, "json.match_schema"},
		{"jwt verification reads the clock", `io.jwt.decode_verify("a.b.c", {"secret": "k"})`, "io.jwt.decode_verify"},
		{"x509 verification reads the clock", `crypto.x509.parse_and_verify_certificates("")`, "crypto.x509.parse_and_verify_certificates"},
		{"template with nested ranges", `strings.render_template("{{range $.a}}{{range $.a}}x{{end}}{{end}}", {"a": [1]})`, "strings.render_template"},
		{"exponential path enumeration", `graph.reachable_paths({"a": ["b"]}, ["a"])`, "graph.reachable_paths"},
		{"shift that allocates 2^n bits", `bits.lsh(1, input.used)`, "bits.lsh"},
		{"environment through the runtime", `opa.runtime().env.ARBITER_SANDBOX_SECRET`, "opa.runtime"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assertRefused(t, withProbe(t, tt.expr), tt.builtin)
		})
	}
}

// assertRefused loads cfg and wants a problem naming the builtin, the policy
// file and the line of the probe.
func assertRefused(t *testing.T, cfg Config, builtin string) {
	t.Helper()
	probs := loadProblems(t, cfg)
	want := fmt.Sprintf("policy.rego:19: builtin %s is refused: ", builtin)
	var all []string
	for _, p := range probs {
		all = append(all, p.String())
		if strings.HasSuffix(p.File, "policy.rego") && strings.Contains(p.String(), want) {
			return
		}
	}
	t.Errorf("no problem %q:\n%s", want, strings.Join(all, "\n"))
}

// TestSandboxRefusesEveryRefusedBuiltin sweeps RefusedBuiltins(), so a
// builtin added to the list (or one a new OPA version adds under a refused
// prefix) is refused at load by name, with a call of the right arity.
func TestSandboxRefusesEveryRefusedBuiltin(t *testing.T) {
	arity := map[string]int{}
	for _, b := range ast.CapabilitiesForThisVersion().Builtins {
		arity[b.Name] = b.Decl.Arity()
	}
	names := RefusedBuiltins()
	if len(names) < 20 {
		t.Fatalf("only %d refused builtins: %v", len(names), names)
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			args := strings.TrimSuffix(strings.Repeat("null, ", arity[name]), ", ")
			assertRefused(t, withProbe(t, name+"("+args+")"), name)
		})
	}
}

// TestSandboxCapabilitiesReviewed fails when a builtin of a namespace nobody
// has reviewed becomes callable (an OPA upgrade adds one): whoever bumps OPA
// decides whether it reaches outside and, if so, refuses it.
func TestSandboxCapabilitiesReviewed(t *testing.T) {
	// Namespaces whose builtins are pure functions of their operands.
	reviewed := map[string]bool{
		"": true, "array": true, "base64": true, "base64url": true, "bits": true,
		"crypto": true, "glob": true, "graph": true, "graphql": true, "hex": true,
		"internal": true, "io": true, "json": true, "numbers": true, "object": true,
		"regex": true, "rego": true, "semver": true, "strings": true, "time": true,
		"units": true, "uri": true, "urlquery": true, "yaml": true, "providers": true,
	}
	refusedNames := map[string]bool{}
	for _, n := range RefusedBuiltins() {
		refusedNames[n] = true
	}
	var unreviewed []string
	for _, b := range Capabilities().Builtins {
		if b.Name == testSignal {
			continue
		}
		if b.Nondeterministic || refusedNames[b.Name] {
			t.Errorf("refused builtin %s is in the capabilities", b.Name)
		}
		ns, _, found := strings.Cut(b.Name, ".")
		if !found {
			ns = ""
		}
		if !reviewed[ns] {
			unreviewed = append(unreviewed, b.Name)
		}
	}
	sort.Strings(unreviewed)
	if len(unreviewed) > 0 {
		t.Errorf("builtins of unreviewed namespaces are callable: %v", unreviewed)
	}
	for _, n := range []string{"providers.aws.sign_req"} {
		// Signs with the time given in its operands: pure. Named here so a
		// change in that judgement is a deliberate edit.
		if refusedNames[n] {
			t.Errorf("%s is refused", n)
		}
	}
}

// TestSandboxDecisionDependsOnInputAndDataOnly: with a secret in the
// environment and on disk, and another working directory, a snapshot
// decides exactly as before, and recursion (the other way to loop without a
// builtin) is a load error.
func TestSandboxDecisionDependsOnInputAndDataOnly(t *testing.T) {
	cfg := withProbe(t, "deep(0)\n\ndeep(n) := deep(n + 1)")
	joined := fmt.Sprint(loadProblems(t, cfg))
	if !strings.Contains(joined, "rego_recursion_error") || !strings.Contains(joined, "policy.rego") {
		t.Errorf("recursion not refused at load: %s", joined)
	}

	s := mustLoad(t, quotaConfig(quota))
	body := []byte(`{"tenant":"t","used":3}`)
	before, err := s.Decide(context.Background(), "quota_check", body, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("ARBITER_SANDBOX_SECRET", "s3cret")
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "data.json"), []byte(`{"limit": 1}`), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	after, err := s.Decide(context.Background(), "quota_check", body, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !SameJSON(before.Result, after.Result) || !SameJSON(after.Result, []byte(`{"allow":true,"reasons":[]}`)) {
		t.Errorf("results %s and %s", before.Result, after.Result)
	}

}

// bomb is a copy of the quota policy that runs away when the tenant is
// "bomb" and decides normally otherwise. Its data.json holds a document
// nested 950 deep (the decoder allows 1000) and a chain of 2000 links.
func bomb(t *testing.T, expr string, timeout time.Duration) Config {
	t.Helper()
	root := copyTree(t, quota)
	var chain strings.Builder
	chain.WriteString(`{`)
	for i := 0; i < 2000; i++ {
		fmt.Fprintf(&chain, `"n%d": ["n%d"], `, i, i+1)
	}
	chain.WriteString(`"n2000": []}`)
	data := `{"limit": 10, "deep": ` + strings.Repeat(`{"next": `, 950) + "1" + strings.Repeat("}", 950) + `, "chain": ` + chain.String() + `}`
	if err := os.WriteFile(filepath.Join(root, "policies", "decisions", "quota_check", "data.json"), []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	editFile(t, filepath.Join(root, quotaPolicy), "reasons := [",
		"runaway if {\n\tinput.tenant == \"bomb\"\n\t"+testSignal+"(input.tenant)\n\t"+expr+"\n}\n\nfailures contains [3, \"runaway\"] if runaway\n\nreasons := [")
	cfg := quotaConfig(root)
	cfg.EvalTimeout = timeout
	return cfg
}

var bombs = []struct{ name, expr string }{
	{"cross product of two ranges", `count({[i, j] | some i in numbers.range(1, 100000); some j in numbers.range(1, 100000)}) == 0`},
	{"range of a trillion", `count(numbers.range(1, 1000000000000)) == 0`},
	{"walk over a deep document, squared", `count({[p, q] | walk(data.decisions.quota_check.deep, [p, _]); walk(data.decisions.quota_check.deep, [q, _])}) == 0`},
	{"every link of a chain to every link it reaches", `count({[a, b] | some a, _ in data.decisions.quota_check.chain; some b in graph.reachable(data.decisions.quota_check.chain, [a])}) == 0`},
	{"string doubling", `count(concat("", [concat("", [sprintf("%d", [j]) | some j in numbers.range(1, 100000)]) | some _ in numbers.range(1, 100000)])) == 0`},
}

// heapPeak runs f while sampling the heap, and returns how far the heap
// grew above its level before f (peak) and after f and a GC (kept).
func heapPeak(f func()) (peak, kept int64) {
	heap := func() int64 {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return int64(ms.HeapAlloc)
	}
	runtime.GC()
	base := heap()
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				peak = max(peak, heap()-base)
			}
		}
	}()
	f()
	close(stop)
	<-done
	runtime.GC()
	return peak, heap() - base
}

func TestSandboxRunawayPolicyIsCutOff(t *testing.T) {
	const timeout = 150 * time.Millisecond
	for _, b := range bombs {
		t.Run(b.name, func(t *testing.T) {
			s := mustLoad(t, bomb(t, b.expr, timeout))
			var err error
			peak, kept := heapPeak(func() {
				_, err = s.Decide(context.Background(), "quota_check", []byte(`{"tenant":"bomb","used":1}`), Options{})
			})
			// The deadline cut it off: none of these would finish in hours.
			var e *Error
			if !errors.As(err, &e) || e.Code != CodePolicyTimeout || !strings.Contains(e.Message, "exceeded "+timeout.String()) {
				t.Fatalf("runaway policy: %v, want policy_timeout at the evaluation deadline", err)
			}
			if peak > 512<<20 || kept > 64<<20 {
				t.Errorf("heap grew %d MiB at peak, %d MiB kept", peak>>20, kept>>20)
			}
			t.Logf("heap +%d MiB at peak, %+d KiB kept", peak>>20, kept>>10)
			// The same Snapshot answers the next request normally.
			d, err := s.Decide(context.Background(), "quota_check", []byte(`{"tenant":"t","used":10}`), Options{})
			if err != nil || !SameJSON(d.Result, []byte(`{"allow":false,"reasons":["quota_exhausted"]}`)) {
				t.Fatalf("next request: %v %v", d, err)
			}
		})
	}
}

// TestSandboxRunawayDoesNotBlockOthers: while one request runs away, good
// requests on the same Snapshot are answered, and the runaway one is
// still running when they are: it ends only when its caller goes away (its
// deadline, a minute, is not what ends it here), with policy_timeout. The
// test waits for the runaway evaluation to reach its loop through the
// policy's own call of testSignal.
func TestSandboxRunawayDoesNotBlockOthers(t *testing.T) {
	snap := mustLoad(t, bomb(t, bombs[0].expr, time.Minute))
	started := signalOn(t, "bomb")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	bombDone := make(chan error, 1)
	go func() {
		_, err := snap.Decide(ctx, "quota_check", []byte(`{"tenant":"bomb","used":1}`), Options{})
		bombDone <- err
	}()
	select {
	case <-started:
	case err := <-bombDone:
		t.Fatalf("the runaway request ended (%v) without reaching its loop", err)
	case <-time.After(time.Minute):
		t.Fatal("the runaway evaluation never started")
	}
	goodDone := make(chan error, 1)
	go func() {
		for i := 0; i < 5; i++ {
			d, err := snap.Decide(context.Background(), "quota_check", []byte(`{"tenant":"t","used":2,"suspended":true}`), Options{})
			if err != nil || !SameJSON(d.Result, []byte(`{"allow":false,"reasons":["tenant_suspended"]}`)) {
				goodDone <- fmt.Errorf("good request %d during a runaway one: %v %v", i, d, err)
				return
			}
		}
		goodDone <- nil
	}()
	select {
	case err := <-goodDone:
		if err != nil {
			t.Fatal(err)
		}
	case err := <-bombDone:
		t.Fatalf("the runaway request ended (%v) before the good ones were answered: they waited for it", err)
	case <-time.After(time.Minute):
		t.Fatal("the good requests are still waiting behind the runaway one after a minute")
	}
	cancel()
	if err := <-bombDone; ErrorCode(err) != CodePolicyTimeout {
		t.Fatalf("runaway request: %v, want policy_timeout", err)
	}
}

// testSignal is a builtin that only this package's tests register:
// testSignal(name) closes the channel signalOn returned for name, so that a
// test learns that an evaluation reached a given point of a policy instead
// of sleeping in the hope that it did. It is not in the reviewed namespaces
// of TestSandboxCapabilitiesReviewed, which skips it.
const testSignal = "arbiter_test.signal"

var signals sync.Map // name -> chan struct{}

func init() {
	rego.RegisterBuiltin1(&rego.Function{Name: testSignal, Decl: types.NewFunction(types.Args(types.S), types.B)},
		func(_ rego.BuiltinContext, name *ast.Term) (*ast.Term, error) {
			if s, ok := name.Value.(ast.String); ok {
				if ch, ok := signals.LoadAndDelete(string(s)); ok {
					close(ch.(chan struct{}))
				}
			}
			return ast.BooleanTerm(true), nil
		})
}

// signalOn returns a channel closed when a policy calls testSignal(name).
func signalOn(t *testing.T, name string) <-chan struct{} {
	ch := make(chan struct{})
	signals.Store(name, ch)
	t.Cleanup(func() { signals.Delete(name) })
	return ch
}
