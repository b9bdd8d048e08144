package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/arbiter-dev/arbiter/engine"
	"github.com/arbiter-dev/arbiter/internal/ruleedit"
)

// amplifying returns the decision and a valid input of size bytes that
// holds, in an object whose schema accepts unknown members, an unknown
// member of empty objects: millions of JSON values in 16 MiB, a gigabyte of
// memory per request when decoded whole. Which decision and which object,
// the fixtures and the schemas say.
func amplifying(t *testing.T, size int) (string, []byte) {
	t.Helper()
	fixtures, err := engine.LoadFixtures(filepath.Join("..", "..", "policy_test"))
	if err != nil {
		t.Fatal(err)
	}
	for _, fx := range fixtures {
		if fx.Input == nil || fx.WantResult == nil {
			continue
		}
		var schema map[string]any
		if err := json.Unmarshal(readFile(t, filepath.Join("..", "..", "schemas", fx.Decision, "input.json")), &schema); err != nil {
			t.Fatal(err)
		}
		dec := json.NewDecoder(bytes.NewReader(fx.Input))
		dec.UseNumber() // numbers keep their text
		var doc map[string]any
		if err := dec.Decode(&doc); err != nil {
			t.Fatal(err)
		}
		open := openObject(schema, schema, doc)
		if open == nil {
			continue
		}
		open["zzUnknown"] = "@@PAD@@"
		out, err := json.Marshal(doc)
		if err != nil {
			t.Fatal(err)
		}
		head, tail, _ := bytes.Cut(out, []byte(`"@@PAD@@"`))
		n := (size - len(head) - len(tail) - 2) / 3
		body := make([]byte, 0, size)
		body = append(body, head...)
		body = append(body, '[')
		body = append(body, bytes.Repeat([]byte(`{},`), n)...)
		body = append(body, `{}]`...)
		return fx.Decision, append(body, tail...)
	}
	t.Fatal("no fixture input has an object whose schema accepts unknown members")
	return "", nil
}

// openObject returns an object of doc whose schema (within root, $refs
// resolved) does not refuse unknown members, depth first, or nil.
func openObject(root, schema map[string]any, doc map[string]any) map[string]any {
	for {
		ref, ok := schema["$ref"].(string)
		if !ok {
			break
		}
		node := any(root)
		for _, tok := range strings.Split(strings.TrimPrefix(ref, "#/"), "/") {
			node = node.(map[string]any)[tok]
		}
		schema = node.(map[string]any)
	}
	props, _ := schema["properties"].(map[string]any)
	keys := make([]string, 0, len(props))
	for k := range props {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		child, ok := doc[k].(map[string]any)
		sub, _ := props[k].(map[string]any)
		if !ok || sub == nil {
			continue
		}
		if o := openObject(root, sub, child); o != nil {
			return o
		}
	}
	if ap, set := schema["additionalProperties"]; set && ap == false {
		return nil
	}
	if schema["unevaluatedProperties"] == false {
		return nil
	}
	return doc
}

func readFile(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// peakRSS is the process's peak resident set (VmHWM), in bytes.
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM in /proc status")
	return 0
}

// TestOverloadAcceptance is issue 8's acceptance test: with 6 amplifying
// (valid states of millions of empty objects under an unknown member) and
// 16 garbage requests of 16 MiB in flight at once, the real server stays
// up with a peak RSS under 1.5 GiB and answers every request with 200, 4xx
// or 503 (a garbage one may see its connection reset instead, refused
// before it was read whole); afterwards it decides as usual. With the defaults it takes about
// a second and 300 MiB, so it runs in `make test`; with admission control
// and the value cap turned off the same flood peaks near 6 GiB.
func TestOverloadAcceptance(t *testing.T) {
	ruleedit.Skip(t)
	t.Parallel()
	const size = 16 << 20
	args, _ := quickArgs(t)
	srv := startServer(t, args...)
	decision, amp := amplifying(t, size-1)
	// The same shape, small: a valid input, decided.
	if _, small := amplifying(t, 64<<10); post(t, &http.Client{Timeout: 30 * time.Second}, srv.url+"/v1/decisions/"+decision, small).status != http.StatusOK {
		t.Fatal("the amplifying shape is not a valid input")
	}
	rng := rand.New(rand.NewPCG(8, 9))
	garbage := make([]byte, size)
	for i := range garbage {
		garbage[i] = byte(rng.Uint32())
	}
	type result struct {
		kind   string
		status int
		err    error
	}
	results := make(chan result, 22)
	start := make(chan struct{})
	var wg sync.WaitGroup
	client := &http.Client{Timeout: 5 * time.Minute}
	for i := range 22 {
		kind, body := "amplifying", amp
		if i >= 6 {
			kind, body = "garbage", garbage
		}
		wg.Go(func() {
			<-start
			resp, err := client.Post(srv.url+"/v1/decisions/"+decision, "application/json", bytes.NewReader(body))
			if err != nil {
				results <- result{kind, 0, err}
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			results <- result{kind, resp.StatusCode, nil}
		})
	}
	close(start)
	wg.Wait()
	close(results)
	counts := map[string]int{}
	for r := range results {
		switch {
		case r.kind == "garbage" && (errors.Is(r.err, syscall.ECONNRESET) || errors.Is(r.err, syscall.EPIPE)):
			// Refused before it was read whole: Go's server answers 400 and
			// closes a connection whose body it did not read, and a client
			// still writing 16 MiB may see the reset before the answer.
			counts["garbage reset while writing"]++
		case r.err != nil:
			t.Errorf("%s request not answered: %v", r.kind, r.err)
		case r.status == 200 || r.status == 503 || r.status >= 400 && r.status < 500:
			counts[fmt.Sprintf("%s %d", r.kind, r.status)]++
		default:
			t.Errorf("%s request answered %d", r.kind, r.status)
		}
	}
	peak := peakRSS(t, srv.cmd.Process.Pid)
	t.Logf("answers %v; peak RSS %d MiB", counts, peak>>20)
	if peak >= 3<<29 {
		t.Errorf("peak RSS %d MiB, want under 1536 MiB", peak>>20)
	}
	fx := decidedFixture(t)
	if a := decideFixture(t, &http.Client{Timeout: 30 * time.Second}, srv.url, fx); a.status != http.StatusOK {
		t.Errorf("after the flood: %d %s", a.status, a.body)
	}
	srv.stop(t)
}
