package corpus

import (
	"fmt"
	"strings"
	"time"
)

// What a Runner writes into runner-state.json: outbox events with their
// envelopes, processed controller commands and diagnostics, shaped like the
// real ones so that decoding, validating and converting them costs what it
// costs in production.

var epoch = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

func (g *gen) timestamp() string {
	t := epoch.Add(time.Duration(g.rng.Int64N(int64(48 * time.Hour))))
	return t.Format("2006-01-02T15:04:05.000Z07:00")
}

var words = strings.Fields(`the runner persisted state before binding its listener and the provider
stream resumed after a reset while the controller replayed pending commands to the sandbox
session so that tool calls completed with exit code zero and the assistant wrote a summary of
changes to main.go handlers.go and the failing test which now passes under race detection with
coverage above ninety percent`)

func (g *gen) text(n int) string {
	var b strings.Builder
	for b.Len() < n {
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(words[g.rng.IntN(len(words))])
	}
	return b.String()
}

var diagnosticLines = []struct {
	format string
	lo, hi int
}{
	{"runner: state persisted (schema v1)", 0, 0},
	{"runner: listener bound on 127.0.0.1:%d", 32768, 60999},
	{"controller: session.open not received within %ds", 10, 120},
	{"provider: stream reset (ECONNRESET), retry %d", 1, 5},
	{"outbox: backpressure engaged at %d KiB", 4096, 16384},
	{"sandbox: disk usage %d%%", 60, 99},
	{"executor: tool call exceeded soft deadline by %dms", 100, 60000},
	{"runner: received SIGTERM, flushing outbox (%d events)", 0, 400},
}

func (g *gen) diagnostics() []any {
	var n int
	switch x := g.rng.IntN(100); {
	case x < 50:
	case x < 85:
		n = g.between(1, 4)
	case x < 97:
		n = g.between(5, 12)
	default:
		n = 32 // the schema's bound
	}
	out := make([]any, n)
	for i := range out {
		l := diagnosticLines[g.rng.IntN(len(diagnosticLines))]
		line := l.format
		if l.hi > 0 {
			line = fmt.Sprintf(line, g.between(l.lo, l.hi))
		}
		out[i] = g.timestamp() + " " + line
	}
	return out
}

var commandTypes = []string{"session.open", "turn.start", "turn.start", "turn.steer", "turn.interrupt", "runner.ping", "runner.configure"}

// commands returns processed controller commands, the last at lastCmd.
func (g *gen) commands(lastCmd uint64) map[string]any {
	n := min(uint64(g.between(1, 10)), lastCmd)
	out := map[string]any{}
	seq := lastCmd - n
	for range n {
		seq++
		id := fmt.Sprintf("cmd-%08x", g.rng.Uint32())
		c := map[string]any{"commandId": id, "controllerSeq": num(seq), "commandType": commandTypes[g.rng.IntN(len(commandTypes))]}
		switch x := g.rng.IntN(100); {
		case x < 80:
			c["status"] = "completed"
			if g.chance(0.6) {
				c["result"] = map[string]any{"ok": true, "durationMs": num(uint64(g.between(1, 9000)))}
			}
		case x < 90:
			c["status"] = "failed"
			c["result"] = map[string]any{"ok": false, "error": "provider rejected the request", "code": "provider_error"}
		case x < 95:
			c["status"] = "pending"
		default:
			c["status"] = "indeterminate"
			c["result"] = nil
		}
		out[id] = c
	}
	return out
}

var eventTypes = []weightedString{
	{"provider.item.delta", 50}, {"provider.item.completed", 15}, {"tool.call", 8}, {"tool.result", 8},
	{"turn.started", 5}, {"turn.completed", 5}, {"runner.heartbeat", 9},
}

// outbox returns n events from sourceSeq first on, and their total byteSize.
func (g *gen) outbox(rs map[string]any, first uint64, n int) ([]any, uint64) {
	out := make([]any, n)
	var total uint64
	for i := range out {
		e, size := g.event(rs, first+uint64(i))
		out[i] = e
		total += size
	}
	return out, total
}

func (g *gen) event(rs map[string]any, seq uint64) (map[string]any, uint64) {
	typ := g.weighted(eventTypes)
	var payload map[string]any
	priority := 2
	switch typ {
	case "provider.item.delta":
		payload = map[string]any{"delta": g.text(g.between(40, 600)), "index": num(seq)}
	case "provider.item.completed":
		priority = 1
		payload = map[string]any{"item": map[string]any{"id": rs["itemId"], "role": "assistant", "status": "completed", "text": g.text(g.between(100, 1200))}}
	case "tool.call":
		priority = 1
		payload = map[string]any{"callId": fmt.Sprintf("call_%010x", g.rng.Uint64()&(1<<40-1)), "tool": "shell", "arguments": map[string]any{"command": "go test ./... -run " + words[g.rng.IntN(len(words))], "cwd": "/workspace", "timeoutMs": num(120000)}}
	case "tool.result":
		priority = 1
		payload = map[string]any{"callId": fmt.Sprintf("call_%010x", g.rng.Uint64()&(1<<40-1)), "exitCode": num(uint64(pickInt(g, 0, 0, 0, 1, 2))), "stdout": g.text(g.between(50, 800)), "truncated": g.chance(0.1)}
	case "turn.started", "turn.completed":
		priority = 0
		payload = map[string]any{"turnId": rs["turnId"], "model": "gpt-5-codex", "usage": map[string]any{"inputTokens": num(uint64(g.between(100, 90000))), "outputTokens": num(uint64(g.between(10, 8000)))}}
	default:
		payload = map[string]any{"uptimeMs": num(uint64(g.between(1000, 9000000)))}
	}
	env := map[string]any{
		"v": num(1), "type": typ, "runId": rs["runId"], "turnId": rs["turnId"], "itemId": rs["itemId"],
		"sourceSeq": num(seq), "emittedAt": g.timestamp(), "payload": payload,
	}
	size := uint64(len(encode(env)))
	return map[string]any{"sourceSeq": num(seq), "priority": num(uint64(priority)), "eventType": typ, "envelope": env, "byteSize": num(size)}, size
}

// sizedBase is the fixture Sized grows: the allowed, never-connected Runner
// of the reports (also the issue-2 baseline's input).
const sizedBase = "interrupted_bootstrap_unprepared_unrecorded__resumed"

// Sized returns a valid bootstrap_restart input of at most size bytes and
// within a few KB of it: a never-connected Runner state whose outbox holds
// as many events as fit (sourceSeq from 1, ackedSourceSeq 0, nextSourceSeq
// one past the last). Without a local proof it is refused for
// runner_outbox_not_empty, so every rule still has to be evaluated. The same
// size gives the same bytes.
func Sized(fixturesDir string, size int) ([]byte, error) {
	seeds, err := loadSeeds(fixturesDir)
	if err != nil {
		return nil, err
	}
	var base *seed
	for i, s := range seeds[bootstrapRestart] {
		if strings.HasSuffix(s.name, ":"+sizedBase) {
			base = &seeds[bootstrapRestart][i]
			break
		}
		if base == nil && s.allowed && statePresent(s.doc()) && !localProof(s.doc()) {
			base = &seeds[bootstrapRestart][i]
		}
	}
	if base == nil {
		return nil, fmt.Errorf("corpus: no allowed fixture with a Runner state in %s", fixturesDir)
	}
	g := newGen(seeds, int64(size))
	d := base.doc()
	rs := obj(d, "runnerState")
	rs["outbox"] = []any{}
	// Leave room for the counters' digits.
	budget := size - len(encode(d)) - 128
	if budget < 0 {
		return nil, fmt.Errorf("corpus: %d bytes is less than the base input", size)
	}
	var outbox []any
	var peak uint64
	used := 0
	seq := uint64(1)
	for {
		e, n := g.event(rs, seq)
		l := len(encode(e)) + 1 // and a comma
		if used+l > budget {
			break
		}
		outbox = append(outbox, e)
		used += l
		peak += n
		seq++
	}
	rs["outbox"] = outbox
	rs["ackedSourceSeq"] = num(0)
	rs["nextSourceSeq"] = num(seq)
	rs["peakOutboxBytes"] = num(peak)
	out := encode(d)
	if len(out) > size {
		return nil, fmt.Errorf("corpus: sized input came out at %d bytes, over %d", len(out), size)
	}
	return out, nil
}
