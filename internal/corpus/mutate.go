package corpus

import (
	"encoding/json"
	"fmt"
	"strings"
)

// The changes below rely on the contract's rules (CONTRACT.md), not on the
// policy: a neutral change touches only what no rule reads, or changes what
// a rule reads without changing whether the rule fails (identifiers renamed
// consistently, counters kept on the same side of the comparison). A
// refusing change makes one named rule fail whatever the rest of the input.

// neutral varies d without changing the outcome recorded for its seed s.
func (g *gen) neutral(d map[string]any, s seed) {
	g.renameIDs(d)
	g.varyLease(d)
	g.varyClaim(d, s)
	g.varyHostSandbox(d)
	g.varyStopProof(d)
	rs := obj(d, "runnerState")
	if rs == nil {
		return
	}
	g.varyUnread(rs)
	switch {
	case !statePresent(d):
		// Rules 6-11 and 15-22 need the state present, and the seed is
		// refused for runner_state_absent: the content is free.
		g.activity(rs, false, false)
	case s.reasons["runner_state_inconsistent"]:
		// Keep the recorded contradiction.
	case localProof(d):
		// A local proof stands in for rules 15-22: any consistent activity
		// keeps the outcome, as long as suspended stays suspended (rule 11
		// and the error table read it).
		g.activity(rs, true, false)
	case !anyOf(s.reasons, "runner_connected", "runner_commands_seen", "runner_reconnected", "runner_outbox_not_empty", "runner_processed_commands", "runner_pending_terminal_delivery"):
		// A Runner that never connected: only the lifecycle may differ,
		// and never to or from suspended. Its pending delivery is null
		// (rule 20 passed), so rule 7 cannot notice.
		if lc, _ := rs["lifecycle"].(string); lc != "suspended" && rs["pendingTerminalDelivery"] == nil {
			rs["lifecycle"] = g.weighted(neverConnectedLifecycles)
			rs["backpressure"] = rs["lifecycle"] == "backpressure"
		}
	}
}

// refuse applies k refusing changes (fewer if fewer apply) and names them.
// Each makes its rule fail in the document it leaves; a later change can
// only switch an earlier rule off by making its own rule fail, so the last
// one always holds and the input is refused.
func (g *gen) refuse(d map[string]any, k int) string {
	var names []string
	for range k {
		var cands []refusal
		total := 0
		for _, r := range refusals {
			if r.applies(d) {
				cands = append(cands, r)
				total += r.weight
			}
		}
		x := g.rng.IntN(total)
		for _, r := range cands {
			if x < r.weight {
				r.apply(g, d)
				names = append(names, r.name)
				break
			}
			x -= r.weight
		}
	}
	return strings.Join(names, "+")
}

type refusal struct {
	name    string
	weight  int
	applies func(d map[string]any) bool
	apply   func(g *gen, d map[string]any)
}

func always(map[string]any) bool { return true }

func hasClaim(d map[string]any) bool { return obj(d, "claim") != nil }

func stateWithoutLocalProof(d map[string]any) bool { return statePresent(d) && !localProof(d) }

// refusals, weighted roughly as host preparation meets them: most refusals
// are Runners that did connect, other recovery claims, unproven stops and
// provider state left in the sandbox.
var refusals = []refusal{
	{"claim_other_kind", 12, always, func(g *gen, d map[string]any) { // rule 1
		c := obj(d, "claim")
		if c == nil {
			c = map[string]any{"runId": getPath(d, "run", "runId"), "providerAttempt": num(uint64(g.rng.IntN(3)))}
			d["claim"] = c
		}
		c["kind"] = otherClaimKinds[g.rng.IntN(len(otherClaimKinds))]
	}},
	{"claim_absent", 3, always, func(g *gen, d map[string]any) { // rule 1
		if g.chance(0.5) {
			delete(d, "claim")
		} else {
			d["claim"] = nil
		}
	}},
	{"claim_other_run", 3, hasClaim, func(g *gen, d map[string]any) { // rule 2
		obj(d, "claim")["runId"] = g.freshID("run-")
	}},
	{"retry_exhausted", 6, hasClaim, func(g *gen, d map[string]any) { // rule 3
		obj(d, "claim")["providerAttempt"] = num(g.exhaustedAttempt + uint64(g.rng.IntN(3)))
	}},
	{"lease_ineligible", 6, always, func(g *gen, d map[string]any) { // rule 4
		if g.chance(0.8) {
			obj(d, "lease")["acquisitionOutcome"] = "replacement"
		} else {
			obj(d, "lease")["acquisitionOutcome"] = nil
		}
	}},
	{"state_absent", 6, always, func(g *gen, d map[string]any) { // rule 5
		switch g.rng.IntN(3) {
		case 0:
			delete(d, "runnerState")
		case 1:
			d["runnerState"] = nil
		default:
			obj(d, "sandbox")["runnerStatePresent"] = false
		}
	}},
	{"warm_transition", 3, statePresent, func(g *gen, d map[string]any) { // rule 6
		rs := obj(d, "runnerState")
		if g.chance(0.5) {
			rs["schema"] = "paperclip.runner.durable.state.warm-transition.v1"
		}
		rs["warmTransition"] = map[string]any{"fromRunnerInstanceId": g.freshID("runnerd:"), "startedAt": g.timestamp(), "phase": "draining"}
	}},
	{"inconsistent", 2, statePresent, func(g *gen, d map[string]any) { // rule 7
		rs := obj(d, "runnerState")
		if next, ok := u64(rs["nextSourceSeq"]); ok {
			rs["ackedSourceSeq"] = num(next)
		}
	}},
	{"identity_mismatch", 3, statePresent, func(g *gen, d map[string]any) { // rules 8-10
		rs := obj(d, "runnerState")
		switch g.rng.IntN(3) {
		case 0:
			rs["runId"] = g.freshID("run-")
		case 1:
			rs["runnerInstanceId"] = g.freshID("runnerd:")
		default:
			rs["normalizedSessionId"] = g.freshID("sess-")
		}
	}},
	{"suspended", 5, statePresent, func(g *gen, d map[string]any) { // rule 11
		obj(d, "runnerState")["lifecycle"] = "suspended"
	}},
	{"provider_state", 8, always, func(g *gen, d map[string]any) { // rule 12
		obj(d, "sandbox")["providerStatePresent"] = true
	}},
	{"failover_backup", 3, always, func(g *gen, d map[string]any) { // rule 13
		obj(d, "host")["failoverBackupPresent"] = true
	}},
	{"archived_snapshot", 3, always, func(g *gen, d map[string]any) { // rule 14
		if g.chance(0.5) {
			obj(d, "host")["archivedRotationSnapshotPresent"] = true
		} else {
			obj(d, "sandbox")["archivedRotationSnapshotPresent"] = true
		}
	}},
	{"connected", 20, stateWithoutLocalProof, func(g *gen, d map[string]any) { // rule 15
		g.activity(obj(d, "runnerState"), false, true)
	}},
	{"stop_unproven", 8, func(d map[string]any) bool { return !localProof(d) }, func(g *gen, d map[string]any) { // rule 21
		switch g.rng.IntN(3) {
		case 0:
			delete(d, "stopProof")
		case 1:
			d["stopProof"] = nil
		default:
			d["stopProof"] = map[string]any{"outcome": "unproven", "runnerInstanceId": getPath(d, "run", "runnerInstanceId"), "method": "process_table", "exitCode": nil}
		}
	}},
	{"stop_other_runner", 2, stateWithoutLocalProof, func(g *gen, d map[string]any) { // rule 22
		d["stopProof"] = map[string]any{"outcome": pickStr(g, "stopped", "absent"), "runnerInstanceId": g.freshID("runnerd:"), "method": "identity_marker"}
	}},
}

var otherClaimKinds = []string{"reattach_existing_runner", "reattach_remote_runner", "reconcile_remote_runner", "resume_dead_runner"}

func statePresent(d map[string]any) bool {
	return obj(d, "runnerState") != nil && getPath(d, "sandbox", "runnerStatePresent") == true
}

func localProof(d map[string]any) bool { return getPath(d, "host", "localProofRecorded") == true }

func anyOf(set map[string]bool, keys ...string) bool {
	for _, k := range keys {
		if set[k] {
			return true
		}
	}
	return false
}

func pickStr(g *gen, s ...string) string { return s[g.rng.IntN(len(s))] }

// renameIDs replaces every identifier by a fresh one, the same original by
// the same replacement, so equal identifiers stay equal and different ones
// stay different.
func (g *gen) renameIDs(d map[string]any) {
	fields := []struct {
		obj, key, prefix string
	}{
		{"run", "runId", "run-"},
		{"run", "normalizedSessionId", "sess-"},
		{"run", "runnerInstanceId", "runnerd:"},
		{"run", "environmentLeaseId", "lease-"},
		{"claim", "runId", "run-"},
		{"runnerState", "runId", "run-"},
		{"runnerState", "normalizedSessionId", "sess-"},
		{"runnerState", "runnerInstanceId", "runnerd:"},
		{"runnerState", "environmentLeaseId", "lease-"},
		{"stopProof", "runnerInstanceId", "runnerd:"},
	}
	for _, f := range fields {
		o := obj(d, f.obj)
		if o == nil {
			continue
		}
		old, ok := o[f.key].(string)
		if !ok {
			continue
		}
		nw, ok := g.ids[old]
		if !ok {
			nw = g.freshID(f.prefix)
			g.ids[old] = nw
		}
		o[f.key] = nw
	}
	if rs := obj(d, "runnerState"); rs != nil {
		run, _ := rs["runId"].(string)
		turn := g.between(1, 40)
		rs["turnId"] = fmt.Sprintf("turn-%s-%d", strings.TrimPrefix(run, "run-"), turn)
		rs["itemId"] = fmt.Sprintf("item-%s-%d-%d", strings.TrimPrefix(run, "run-"), turn, g.between(1, 300))
	}
}

// freshID returns an identifier not used yet in this input; it matches
// every identifier pattern of the schema.
func (g *gen) freshID(prefix string) string {
	for {
		id := fmt.Sprintf("%s%012x", prefix, g.rng.Uint64()&(1<<48-1))
		used := false
		for _, v := range g.ids {
			if v == id {
				used = true
			}
		}
		if !used {
			g.ids["\x00"+id] = id // reserve it
			return id
		}
	}
}

func (g *gen) varyLease(d map[string]any) {
	l := obj(d, "lease")
	l["transport"] = g.weighted([]weightedString{{"sandbox", 60}, {"ssh", 25}, {"computer", 15}})
	switch x := g.rng.IntN(100); {
	case x < 70:
		l["providerLeaseId"] = fmt.Sprintf("sbx-%08x", g.rng.Uint32())
	case x < 85:
		l["providerLeaseId"] = nil
	default:
		delete(l, "providerLeaseId")
	}
	switch x := g.rng.IntN(100); {
	case x < 60:
		l["reusableLeaseConfigured"] = true
	case x < 75:
		l["reusableLeaseConfigured"] = false
	case x < 85:
		l["reusableLeaseConfigured"] = nil
	default:
		delete(l, "reusableLeaseConfigured")
	}
}

func (g *gen) varyClaim(d map[string]any, s seed) {
	c := obj(d, "claim")
	if c == nil {
		return
	}
	if a, ok := u64(c["providerAttempt"]); ok {
		if s.reasons["retry_budget_exhausted"] {
			if a < 1<<62 {
				c["providerAttempt"] = num(a + uint64(g.rng.IntN(3)))
			}
		} else {
			c["providerAttempt"] = num(g.rng.Uint64N(a + 1))
		}
	}
	gen := g.between(1, 40)
	if g.chance(0.9) {
		c["leaseOwner"] = fmt.Sprintf("boot-%d:%d:%04x", g.between(1, 9), gen, g.rng.IntN(1<<16))
	} else {
		delete(c, "leaseOwner")
	}
	if g.chance(0.85) {
		c["controllerGeneration"] = num(uint64(gen))
	} else {
		delete(c, "controllerGeneration")
	}
	if g.chance(0.85) {
		c["restartKind"] = pickStr(g, "hot", "hard", "hard", "graceful")
	} else {
		delete(c, "restartKind")
	}
	switch g.rng.IntN(3) {
	case 0:
		c["recoveryRequestId"] = fmt.Sprintf("rr-%012x", g.rng.Uint64()&(1<<48-1))
	case 1:
		c["recoveryRequestId"] = nil
	default:
		delete(c, "recoveryRequestId")
	}
	// Claim kinds carry extra keys.
	if g.chance(0.3) {
		c["claimedAt"] = g.timestamp()
		c["bootstrapPhase"] = pickStr(g, "runner_spawned", "state_persisted", "listener_bound")
	}
}

func (g *gen) varyHostSandbox(d map[string]any) {
	obj(d, "host")["localControllerRootPresent"] = g.chance(0.3)
	obj(d, "sandbox")["sessionRootPresent"] = g.chance(0.9)
}

func (g *gen) varyStopProof(d map[string]any) {
	sp := obj(d, "stopProof")
	if sp == nil {
		return
	}
	if g.chance(0.85) {
		sp["method"] = pickStr(g, "identity_marker", "identity_marker", "pidfile", "process_table", "sandbox_api")
	} else {
		delete(sp, "method")
	}
	switch x := g.rng.IntN(100); {
	case x < 55:
		sp["exitCode"] = num(0)
	case x < 65:
		sp["exitCode"] = num(137)
	case x < 75:
		sp["exitCode"] = num(143)
	case x < 80:
		sp["exitCode"] = json.Number("-1")
	case x < 90:
		sp["exitCode"] = nil
	default:
		delete(sp, "exitCode")
	}
}

// varyUnread changes the Runner state fields that no rule reads.
func (g *gen) varyUnread(rs map[string]any) {
	rs["maxOutboxBytes"] = num([]uint64{16 << 20, 8 << 20, 32 << 20}[g.rng.IntN(3)])
	rs["p0ReserveBytes"] = num([]uint64{1 << 20, 512 << 10, 256 << 10}[g.rng.IntN(3)])
	rs["diagnostics"] = g.diagnostics()
	switch g.rng.IntN(4) {
	case 0:
		rs["recoverableFailure"] = pickStr(g, "provider_stream_reset", "controller_unreachable", "sandbox_io_stall")
	case 1:
		delete(rs, "recoverableFailure")
	default:
		rs["recoverableFailure"] = nil
	}
	switch g.rng.IntN(4) {
	case 0:
		rs["pendingProviderCleanup"] = map[string]any{"providerSessionId": fmt.Sprintf("ps-%010x", g.rng.Uint64()&(1<<40-1)), "requestedAt": g.timestamp(), "attempts": num(uint64(g.rng.IntN(3)))}
	case 1:
		delete(rs, "pendingProviderCleanup")
	default:
		rs["pendingProviderCleanup"] = nil
	}
	for _, k := range []string{"processedCommandFingerprints", "executorEventReceipts", "v2ReplayEvents"} {
		if g.chance(0.15) {
			delete(rs, k)
			continue
		}
		m := map[string]any{}
		for range g.rng.IntN(4) {
			switch k {
			case "processedCommandFingerprints":
				m[fmt.Sprintf("cmd-%08x", g.rng.Uint32())] = fmt.Sprintf("sha256:%016x%016x", g.rng.Uint64(), g.rng.Uint64())
			case "executorEventReceipts":
				m[fmt.Sprintf("evt-%08x", g.rng.Uint32())] = map[string]any{"receivedAt": g.timestamp(), "sourceSeq": num(uint64(g.between(1, 5000)))}
			default:
				m[fmt.Sprintf("replay-%d", g.between(1, 999))] = map[string]any{"eventType": "provider.item.completed", "count": num(uint64(g.between(1, 9)))}
			}
		}
		rs[k] = m
	}
	if g.chance(0.2) { // the Runner adds fields over time
		rs["runnerVersion"] = fmt.Sprintf("0.%d.%d", g.between(38, 44), g.between(0, 9))
		rs["bootId"] = fmt.Sprintf("%08x-%04x", g.rng.Uint32(), g.rng.IntN(1<<16))
	}
}

type weightedString struct {
	s string
	w int
}

var neverConnectedLifecycles = []weightedString{{"connecting", 70}, {"stopped", 10}, {"recoverable_failure", 8}, {"unrecoverable", 5}, {"revoked", 4}, {"ready", 3}}

var activeLifecycles = []weightedString{{"ready", 35}, {"backpressure", 8}, {"recoverable_failure", 15}, {"unrecoverable", 6}, {"stopped", 20}, {"revoked", 4}, {"connecting", 12}}

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

// activity rewrites the Runner's lifecycle, counters, outbox and commands
// consistently (rule 7 never fails on the result). keepSuspended keeps a
// suspended Runner suspended and any other Runner not suspended; connected
// forces a recorded connection (rule 15 then fails without a local proof).
func (g *gen) activity(rs map[string]any, keepSuspended, connected bool) {
	lc, _ := rs["lifecycle"].(string)
	switch {
	case keepSuspended && lc == "suspended":
	case keepSuspended:
		lc = g.weighted(activeLifecycles)
	case g.chance(0.1):
		lc = "suspended"
	default:
		lc = g.weighted(activeLifecycles)
	}
	rs["lifecycle"] = lc
	rs["backpressure"] = lc == "backpressure"
	if !connected {
		connected = g.chance(0.6)
	}
	var lastCmd uint64
	if connected {
		rs["lastConnectionProtocolVersion"] = num(uint64(pickInt(g, 2, 2, 2, 1)))
		rs["reconnectCount"] = num(uint64(pickInt(g, 0, 0, 0, 1, 1, 2, 3, 7)))
		lastCmd = uint64(g.between(1, 400))
		rs["processedCommands"] = g.commands(lastCmd)
	} else {
		if g.chance(0.5) {
			rs["lastConnectionProtocolVersion"] = nil
		} else {
			delete(rs, "lastConnectionProtocolVersion")
		}
		rs["reconnectCount"] = num(0)
		rs["processedCommands"] = map[string]any{}
	}
	rs["lastControllerCommandSeq"] = num(lastCmd)
	rs["compactedThroughControllerSeq"] = num(lastCmd * uint64(g.rng.IntN(2)) / 2)

	var acked uint64
	if connected {
		acked = uint64(g.between(0, 5000))
	}
	n := 0
	switch x := g.rng.Float64(); {
	case !connected && x < 0.8:
	case x < 0.35:
	case x < 0.85:
		n = g.between(1, 6)
	case x < 0.97:
		n = g.between(10, 40)
	default:
		n = g.between(60, 120)
	}
	outbox, total := g.outbox(rs, acked+1, n)
	rs["outbox"] = outbox
	rs["ackedSourceSeq"] = num(acked)
	rs["nextSourceSeq"] = num(acked + uint64(n) + 1)
	rs["peakOutboxBytes"] = num(total + uint64(g.rng.IntN(64<<10)))

	if connected && (lc == "suspended" || lc == "stopped") && g.chance(0.4) {
		typ := "runner.shutdown"
		if lc == "suspended" {
			typ = "runner.suspend"
		}
		rs["pendingTerminalDelivery"] = map[string]any{"commandId": fmt.Sprintf("cmd-%08x", g.rng.Uint32()), "controllerSeq": num(lastCmd), "commandType": typ, "lifecycle": lc}
	} else if g.chance(0.7) {
		rs["pendingTerminalDelivery"] = nil
	} else {
		delete(rs, "pendingTerminalDelivery")
	}
}

func pickInt(g *gen, xs ...int) int { return xs[g.rng.IntN(len(xs))] }
