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
	return epoch.Add(time.Duration(g.rng.Int64N(int64(48 * time.Hour)))).Format("2006-01-02T15:04:05.000Z07:00")
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
		payload = map[string]any{"callId": fmt.Sprintf("call_%010x", g.rng.Uint64()&(1<<40-1)), "exitCode": num(uint64([]int{0, 0, 0, 1, 2}[g.rng.IntN(5)])), "stdout": g.text(g.between(50, 800)), "truncated": g.chance(0.1)}
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

type weightedString struct {
	s string
	w int
}

func (g *gen) weighted(ws []weightedString) string {
	total := 0
	for _, w := range ws {
		total += w.w
	}
	x := g.rng.IntN(total)
	for _, w := range ws {
		if x < w.w {
			return w.s
		}
		x -= w.w
	}
	return ws[0].s
}

// history writes a Runner's history into its state rs as a Runner numbers
// it: outbox events from ackedSourceSeq+1 on with nextSourceSeq one past
// the last, processed commands up to lastControllerCommandSeq, diagnostics.
// Most states get a few events; a few get a hundred.
func (g *gen) history(rs map[string]any) {
	rs["diagnostics"] = g.diagnostics()
	if last, ok := u64(rs["lastControllerCommandSeq"]); ok && last > 0 && last < 1<<62 && g.chance(0.7) {
		rs["processedCommands"] = g.commands(last)
	}
	acked, ok := u64(rs["ackedSourceSeq"])
	if !ok || acked > 1<<62 {
		return
	}
	var n int
	switch x := g.rng.Float64(); {
	case x < 0.35:
		return // the outbox as the fixture has it
	case x < 0.85:
		n = g.between(1, 6)
	case x < 0.97:
		n = g.between(10, 40)
	default:
		n = g.between(60, 120)
	}
	outbox, total := make([]any, n), uint64(0) // from sourceSeq acked+1 on, and their byteSize
	for i := range outbox {
		var size uint64
		outbox[i], size = g.event(rs, acked+1+uint64(i))
		total += size
	}
	rs["outbox"] = outbox
	rs["nextSourceSeq"] = num(acked + uint64(n) + 1)
	rs["peakOutboxBytes"] = num(total + uint64(g.rng.IntN(64<<10)))
}

// Sized returns an input of at most size bytes and within a few KB of it,
// the first that keep accepts among the fixture inputs (in file order) with
// a Runner state: that state's outbox holds as many events as fit
// (sourceSeq from 1, ackedSourceSeq 0, nextSourceSeq one past the last).
// The same fixtures and size give the same bytes.
func Sized(fixturesDir string, size int, keep Keep) (string, []byte, error) {
	seeds, err := loadSeeds(fixturesDir)
	if err != nil {
		return "", nil, err
	}
	for _, s := range seeds {
		doc := s.doc()
		var states []map[string]any
		walkRunnerStates(doc, func(rs map[string]any) { states = append(states, rs) })
		if len(states) != 1 {
			continue
		}
		body, err := grow(newGen(seeds, int64(size)), doc, states[0], size)
		if err != nil {
			return "", nil, err
		}
		if keep(s.decision, body) {
			return s.decision, body, nil
		}
	}
	return "", nil, fmt.Errorf("corpus: no fixture input in %s with a Runner state grows into one that keep accepts", fixturesDir)
}

// grow fills the outbox of rs, a Runner state in doc, up to size bytes.
func grow(g *gen, doc any, rs map[string]any, size int) ([]byte, error) {
	rs["outbox"] = []any{}
	// Leave room for the counters' digits.
	budget := size - len(encode(doc)) - 128
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
	out := encode(doc)
	if len(out) > size {
		return nil, fmt.Errorf("corpus: sized input came out at %d bytes, over %d", len(out), size)
	}
	return out, nil
}
