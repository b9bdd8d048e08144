// Package floor is the contract's rules written by hand in Go: what a service
// without an interpreter would run, the floor of the benchmarks in
// docs/BENCHMARKS.md. It decodes the body with encoding/json into typed
// structs (exact unsigned 64-bit counters), applies the 22 rules and the
// error table of CONTRACT.md, and encodes the result. It validates nothing
// beyond the types it decodes: a schema-valid input is its precondition.
//
// It restates the rules, which no Go of the product or of its tests may do,
// so it lives under testdata/ (no go command pattern reaches it) and only
// engine/bench_floor_test.go, under the build tag benchfloor that only
// `make bench` sets, imports it. A rule edit leaves it behind until someone
// brings it along; go test -tags benchfloor -run Floor ./engine/ says where.
package floor

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"strconv"
)

// refU64 is an unsigned 64-bit integer decoded exactly. JSON Schema counts
// 1.0 and 1e3 as integers, so they are accepted too.
type refU64 uint64

func (u *refU64) UnmarshalJSON(b []byte) error {
	if n, err := strconv.ParseUint(string(b), 10, 64); err == nil {
		*u = refU64(n)
		return nil
	}
	r, ok := new(big.Rat).SetString(string(b))
	if !ok || !r.IsInt() || r.Sign() < 0 || r.Num().BitLen() > 64 {
		return fmt.Errorf("%s is not an unsigned 64-bit integer", b)
	}
	*u = refU64(r.Num().Uint64())
	return nil
}

type refBootstrapInput struct {
	Run struct {
		RunID               string `json:"runId"`
		NormalizedSessionID string `json:"normalizedSessionId"`
		RunnerInstanceID    string `json:"runnerInstanceId"`
		EnvironmentLeaseID  string `json:"environmentLeaseId"`
	} `json:"run"`
	Claim *struct {
		Kind                 string  `json:"kind"`
		RunID                string  `json:"runId"`
		ProviderAttempt      refU64  `json:"providerAttempt"`
		LeaseOwner           *string `json:"leaseOwner"`
		ControllerGeneration *refU64 `json:"controllerGeneration"`
		RestartKind          *string `json:"restartKind"`
		RecoveryRequestID    *string `json:"recoveryRequestId"`
	} `json:"claim"`
	Lease struct {
		Transport               string  `json:"transport"`
		AcquisitionOutcome      *string `json:"acquisitionOutcome"`
		ReusableLeaseConfigured *bool   `json:"reusableLeaseConfigured"`
		ProviderLeaseID         *string `json:"providerLeaseId"`
	} `json:"lease"`
	Host struct {
		LocalControllerRootPresent      bool `json:"localControllerRootPresent"`
		LocalProofRecorded              bool `json:"localProofRecorded"`
		FailoverBackupPresent           bool `json:"failoverBackupPresent"`
		ArchivedRotationSnapshotPresent bool `json:"archivedRotationSnapshotPresent"`
	} `json:"host"`
	Sandbox struct {
		SessionRootPresent              bool `json:"sessionRootPresent"`
		RunnerStatePresent              bool `json:"runnerStatePresent"`
		ProviderStatePresent            bool `json:"providerStatePresent"`
		ArchivedRotationSnapshotPresent bool `json:"archivedRotationSnapshotPresent"`
	} `json:"sandbox"`
	RunnerState *refRunnerState `json:"runnerState"`
	StopProof   *struct {
		Outcome          string       `json:"outcome"`
		RunnerInstanceID string       `json:"runnerInstanceId"`
		Method           *string      `json:"method"`
		ExitCode         *json.Number `json:"exitCode"`
	} `json:"stopProof"`
}

type refRunnerState struct {
	Schema                        string  `json:"schema"`
	RunID                         string  `json:"runId"`
	NormalizedSessionID           string  `json:"normalizedSessionId"`
	TurnID                        string  `json:"turnId"`
	ItemID                        string  `json:"itemId"`
	RunnerInstanceID              string  `json:"runnerInstanceId"`
	EnvironmentLeaseID            string  `json:"environmentLeaseId"`
	Lifecycle                     string  `json:"lifecycle"`
	NextSourceSeq                 refU64  `json:"nextSourceSeq"`
	AckedSourceSeq                refU64  `json:"ackedSourceSeq"`
	LastControllerCommandSeq      refU64  `json:"lastControllerCommandSeq"`
	CompactedThroughControllerSeq refU64  `json:"compactedThroughControllerSeq"`
	ReconnectCount                refU64  `json:"reconnectCount"`
	MaxOutboxBytes                refU64  `json:"maxOutboxBytes"`
	P0ReserveBytes                refU64  `json:"p0ReserveBytes"`
	PeakOutboxBytes               refU64  `json:"peakOutboxBytes"`
	LastConnectionProtocolVersion *refU64 `json:"lastConnectionProtocolVersion"`
	Outbox                        []struct {
		SourceSeq refU64          `json:"sourceSeq"`
		Priority  refU64          `json:"priority"`
		EventType string          `json:"eventType"`
		Envelope  json.RawMessage `json:"envelope"`
		ByteSize  refU64          `json:"byteSize"`
	} `json:"outbox"`
	ProcessedCommands map[string]struct {
		CommandID     string          `json:"commandId"`
		ControllerSeq refU64          `json:"controllerSeq"`
		CommandType   string          `json:"commandType"`
		Status        string          `json:"status"`
		Result        json.RawMessage `json:"result"`
	} `json:"processedCommands"`
	Diagnostics             []string `json:"diagnostics"`
	Backpressure            bool     `json:"backpressure"`
	PendingTerminalDelivery *struct {
		CommandID     string `json:"commandId"`
		ControllerSeq refU64 `json:"controllerSeq"`
		CommandType   string `json:"commandType"`
		Lifecycle     string `json:"lifecycle"`
	} `json:"pendingTerminalDelivery"`
	// Only whether it is a non-null object matters (rule 6).
	WarmTransition json.RawMessage `json:"warmTransition"`
}

type refBootstrapResult struct {
	Allow   bool     `json:"allow"`
	Outcome string   `json:"outcome"`
	Proof   *string  `json:"proof"`
	Reasons []string `json:"reasons"`
	Primary *string  `json:"primary"`
	Error   *string  `json:"error"`
}

type refFailureInput struct {
	Attempt            refU64 `json:"attempt"`
	FailureCode        string `json:"failureCode"`
	CheckpointPresent  *bool  `json:"checkpointPresent"`
	ProviderEventsSeen *bool  `json:"providerEventsSeen"`
}

type refFailureResult struct {
	Disposition       string       `json:"disposition"`
	Code              string       `json:"code"`
	RetryAfterSeconds *json.Number `json:"retryAfterSeconds"`
	Reasons           []string     `json:"reasons"`
}

// Reference holds the data the rules read: failure_disposition's data.json.
type Reference struct {
	// attempt < max_attempts holds when budgetSet and (unlimited or
	// attempt < limit); a missing or non-numeric max_attempts leaves
	// nothing within the budget, as the policy fails closed.
	budgetSet  bool
	unlimited  bool
	limit      uint64
	permanent  map[string]bool
	retryAfter json.Number
}

// Load reads the data the rules read from a policies folder.
func Load(policies string) (*Reference, error) {
	b, err := os.ReadFile(filepath.Join(policies, "decisions", "failure_disposition", "data.json"))
	if err != nil {
		return nil, err
	}
	var data struct {
		PermanentCodes    []string    `json:"permanent_codes"`
		MaxAttempts       any         `json:"max_attempts"`
		RetryAfterSeconds json.Number `json:"retry_after_seconds"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&data); err != nil {
		return nil, err
	}
	r := &Reference{permanent: map[string]bool{}, retryAfter: data.RetryAfterSeconds}
	for _, c := range data.PermanentCodes {
		r.permanent[c] = true
	}
	if n, ok := data.MaxAttempts.(json.Number); ok {
		max, ok := new(big.Rat).SetString(string(n))
		if !ok {
			return nil, fmt.Errorf("max_attempts %s", n)
		}
		r.budgetSet = true
		// For an integer attempt, attempt < max is attempt < ceil(max).
		ceil := new(big.Int).Quo(max.Num(), max.Denom())
		if !max.IsInt() && max.Sign() > 0 {
			ceil.Add(ceil, big.NewInt(1))
		}
		switch {
		case ceil.Sign() <= 0:
			r.limit = 0
		case ceil.BitLen() > 64:
			r.unlimited = true
		default:
			r.limit = ceil.Uint64()
		}
	}
	return r, nil
}

func (r *Reference) withinBudget(attempt refU64) bool {
	return r.budgetSet && (r.unlimited || uint64(attempt) < r.limit)
}

// Decide decodes body, decides and encodes the result, as a hand-written
// service would for each request.
func (r *Reference) Decide(name string, body []byte) ([]byte, error) {
	switch name {
	case "bootstrap_restart":
		var in refBootstrapInput
		if err := json.Unmarshal(body, &in); err != nil {
			return nil, err
		}
		return json.Marshal(r.bootstrapRestart(&in))
	case "failure_disposition":
		var in refFailureInput
		if err := json.Unmarshal(body, &in); err != nil {
			return nil, err
		}
		return json.Marshal(r.failureDisposition(&in))
	}
	return nil, fmt.Errorf("the reference has no decision %q", name)
}

func (r *Reference) bootstrapRestart(in *refBootstrapInput) refBootstrapResult {
	rs := in.RunnerState
	statePresent := rs != nil && in.Sandbox.RunnerStatePresent
	noLocalProof := !in.Host.LocalProofRecorded
	judged := statePresent && noLocalProof // rules 15-20 and 22
	claim := in.Claim
	outcome := ""
	if in.Lease.AcquisitionOutcome != nil {
		outcome = *in.Lease.AcquisitionOutcome
	}
	stopProven := in.StopProof != nil && (in.StopProof.Outcome == "stopped" || in.StopProof.Outcome == "absent")

	reasons := make([]string, 0, 4)
	fail := func(failed bool, code string) {
		if failed {
			reasons = append(reasons, code)
		}
	}
	fail(claim == nil || claim.Kind != "bootstrap_incomplete", "claim_not_bootstrap_incomplete")
	fail(claim != nil && claim.RunID != in.Run.RunID, "claim_run_mismatch")
	fail(claim != nil && !r.withinBudget(claim.ProviderAttempt), "retry_budget_exhausted")
	fail(outcome != "resumed" && outcome != "created", "lease_outcome_ineligible")
	fail(!statePresent, "runner_state_absent")
	if statePresent {
		warm := rs.Schema == "paperclip.runner.durable.state.warm-transition.v1" ||
			len(rs.WarmTransition) > 0 && string(rs.WarmTransition) != "null"
		fail(warm, "runner_state_warm_transition")
		fail(rs.AckedSourceSeq >= rs.NextSourceSeq || // acked > next - 1, next >= 1
			rs.CompactedThroughControllerSeq > rs.LastControllerCommandSeq ||
			len(rs.Outbox) == 0 && rs.AckedSourceSeq != rs.NextSourceSeq-1 ||
			rs.PendingTerminalDelivery != nil && rs.PendingTerminalDelivery.Lifecycle != rs.Lifecycle,
			"runner_state_inconsistent")
		fail(rs.RunID != in.Run.RunID, "runner_run_mismatch")
		fail(rs.RunnerInstanceID != in.Run.RunnerInstanceID, "runner_instance_mismatch")
		fail(rs.NormalizedSessionID != in.Run.NormalizedSessionID, "runner_session_mismatch")
		fail(rs.Lifecycle == "suspended", "runner_lifecycle_suspended")
	}
	fail(in.Sandbox.ProviderStatePresent, "provider_state_present")
	fail(in.Host.FailoverBackupPresent, "failover_backup_present")
	fail(in.Host.ArchivedRotationSnapshotPresent || in.Sandbox.ArchivedRotationSnapshotPresent, "archived_rotation_snapshot_present")
	if judged {
		fail(rs.LastConnectionProtocolVersion != nil, "runner_connected")
		fail(rs.LastControllerCommandSeq != 0, "runner_commands_seen")
		fail(rs.ReconnectCount != 0, "runner_reconnected")
		fail(len(rs.Outbox) != 0, "runner_outbox_not_empty")
		fail(len(rs.ProcessedCommands) != 0, "runner_processed_commands")
		fail(rs.PendingTerminalDelivery != nil, "runner_pending_terminal_delivery")
	}
	fail(noLocalProof && !stopProven, "stale_runner_stop_unproven")
	fail(judged && stopProven && in.StopProof.RunnerInstanceID != rs.RunnerInstanceID, "stop_proof_identity_mismatch")

	res := refBootstrapResult{Allow: len(reasons) == 0, Reasons: reasons}
	str := func(s string) *string { return &s }
	if res.Allow {
		res.Outcome = "restart_bootstrap"
		res.Proof = str("sandbox")
		if in.Host.LocalProofRecorded {
			res.Proof = str("local")
		}
		return res
	}
	res.Outcome = "refuse"
	primary := reasons[0]
	res.Primary = &primary
	providerState := false
	for _, c := range reasons {
		providerState = providerState || c == "provider_state_present"
	}
	switch {
	case primary == "claim_not_bootstrap_incomplete" || primary == "claim_run_mismatch" || primary == "lease_outcome_ineligible":
	case primary == "retry_budget_exhausted":
		res.Error = str("native_session_retry_exhausted")
	case primary == "runner_state_warm_transition":
		res.Error = str("native_runner_warm_transition_recovery_unproven")
	case outcome == "created":
	case providerState && statePresent && rs.Lifecycle != "suspended":
		res.Error = str("runner_harness_state_mismatch: resumed_not_suspended")
	default:
		res.Error = str("runner_harness_state_mismatch: resumed_unavailable")
	}
	return res
}

func (r *Reference) failureDisposition(in *refFailureInput) refFailureResult {
	switch {
	case r.permanent[in.FailureCode]:
		return refFailureResult{Disposition: "terminal_failure", Code: in.FailureCode, Reasons: []string{"permanent_failure_code"}}
	case !r.withinBudget(in.Attempt):
		return refFailureResult{Disposition: "terminal_failure", Code: "native_session_retry_exhausted", Reasons: []string{"retry_budget_exhausted"}}
	default:
		after := r.retryAfter
		return refFailureResult{Disposition: "retryable_failure", Code: "native_session_interrupted", RetryAfterSeconds: &after, Reasons: []string{"retry_within_budget"}}
	}
}
