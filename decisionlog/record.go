package decisionlog

import (
	"cmp"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// MaxNameBytes bounds each name a record carries (its decision, path and
// caller) and a replica's id. A caller chooses a request's decision and
// path (POST /v1/decisions/<3000 letters> is answered 404, and logged), a
// client certificate its caller name, and the decision store indexes
// each: PostgreSQL's btree refuses an entry past 2704 bytes.
const MaxNameBytes = 512

// BoundName returns name when it is at most MaxNameBytes long; otherwise
// its start (whole UTF-8 sequences) and a visible marker saying how long
// it was, MaxNameBytes in all. A record's format has no member saying that
// a name was cut, so the name says it.
func BoundName(name string) string {
	if len(name) <= MaxNameBytes {
		return name
	}
	marker := fmt.Sprintf("...[truncated from %d bytes]", len(name))
	cut := MaxNameBytes - len(marker)
	for cut > 0 && !utf8.RuneStart(name[cut]) {
		cut--
	}
	return name[:cut] + marker
}

// Record is one decision as logged: everything needed to decide it again.
//
// A request that failed holds its body only when it is small: Input when it
// is JSON, BodyBase64 otherwise. A larger body is described by its size,
// its sha256 and a bounded prefix, never copied whole (BodySize alone, with
// no digest, is a body that was not fully received).
type Record struct {
	DecisionID string          `json:"decision_id"`
	Time       time.Time       `json:"time"`
	Decision   string          `json:"decision"`
	Revision   string          `json:"policy_revision,omitempty"`
	Path       string          `json:"path"`
	Input      json.RawMessage `json:"input,omitempty"`
	// InputOneLine says that Input holds no line break, as the one pass
	// over the body found: it is written as it is, not scanned again.
	InputOneLine bool            `json:"-"`
	BodyBase64   string          `json:"body_base64,omitempty"`
	BodySize     int64           `json:"body_size,omitempty"`
	BodySHA256   string          `json:"body_sha256,omitempty"`
	BodyPrefix   string          `json:"body_prefix_base64,omitempty"`
	Result       json.RawMessage `json:"result,omitempty"`
	Error        *RecordError    `json:"error,omitempty"`
	DurationNS   int64           `json:"duration_ns"`
	Caller       string          `json:"caller,omitempty"`
	// TraceID and SpanID are the decision's span (W3C hex ids), when the
	// server traces, as OPA's decision-log events carry them. When it does
	// not, TraceID is the trace of the caller's traceparent, if it sent
	// one, and SpanID is empty.
	TraceID string `json:"trace_id,omitempty"`
	SpanID  string `json:"span_id,omitempty"`
	// Masked and Erased list, as OPA's decision-log events do, the JSON
	// pointers (from the record's root: /input/...) whose values the log
	// replaced with MaskedValue or left out. A record with either is not
	// the request as received, and replay says so without looking at the
	// content, which a caller controls.
	Masked []string `json:"masked,omitempty"`
	Erased []string `json:"erased,omitempty"`
	// Shadow is what a candidate revision made of a decision, decided in
	// shadow after the answer: on a record of its own that carries the
	// decision's id, name and path and no result (logs written before
	// issue 19 have it on the decision's own line).
	Shadow *Shadow `json:"shadow,omitempty"`
	// Promotion, on a record of its own (no decision), says who made which
	// candidate revision live, on what evidence: the JSON of package
	// shadow's Promotion. Replay skips such records.
	Promotion json.RawMessage `json:"promotion,omitempty"`
	// Summarized says that Outcome and Reasons are already Summary's
	// answer, read from the result by whoever made the record (the server
	// takes the engine's): Summary returns them and parses nothing. The
	// outcome of a record may be "".
	Summarized bool     `json:"-"`
	Outcome    string   `json:"-"`
	Reasons    []string `json:"-"`
}

// IsDecision reports whether rec is the record of a decision request, not
// a promotion or a shadow outcome (records of their own, which replay and
// the pages' list of decisions skip).
func (rec Record) IsDecision() bool { return rec.Promotion == nil && !rec.IsShadowOutcome() }

// IsShadowOutcome reports whether rec is a candidate's outcome for the
// decision of the same id (Shadow), logged after that decision's record.
func (rec Record) IsShadowOutcome() bool {
	return rec.Shadow != nil && len(rec.Result) == 0 && rec.Error == nil
}

// Shadow is what a candidate revision made of a logged decision: its
// revision, its result or error, and the class of the difference (package
// shadow's classes, refuse_to_allow the dangerous one).
type Shadow struct {
	Revision   string          `json:"policy_revision"`
	Class      string          `json:"class"`
	Result     json.RawMessage `json:"result,omitempty"`
	Error      *RecordError    `json:"error,omitempty"`
	DurationNS int64           `json:"duration_ns"`
}

// Wrapped reports whether the record's Input is a Data API body as
// received, whose input member is the input document: a failed request's
// on /v1/data/. A decision logs the input document it unwrapped.
func (rec Record) Wrapped() bool {
	return rec.Error != nil && strings.HasPrefix(rec.Path, "/v1/data/")
}

// InputDocument is the record's input document: its Input, or the input
// member of a Data API body (Wrapped); nil when it has none. The upload's events and the decision
// store's input column hold it.
func (rec Record) InputDocument() []byte {
	if len(rec.Input) == 0 { // JSON by construction: the strict parser's, or masked
		return nil
	}
	if !rec.Wrapped() {
		return rec.Input
	}
	var wrapped struct {
		Input json.RawMessage `json:"input"`
	}
	if json.Unmarshal(rec.Input, &wrapped) != nil || len(wrapped.Input) == 0 {
		return nil
	}
	return wrapped.Input
}

// OutcomeError is the outcome of every record whose request ended in an
// error.
const OutcomeError = "error"

// DefaultOutcomeKey is the result member that is a decision's outcome when
// its result schema names none (x-arbiter-outcome).
const DefaultOutcomeKey = "outcome"

// Summary reads the outcome and reasons of rec's result by the conventions
// every decision follows (nothing here knows a decision): the outcome is
// the result member outcomeKey names ("" means DefaultOutcomeKey), a
// string or a boolean, or OutcomeError when the request ended in an error;
// the reasons are the result's "reasons" member. Of a shadow outcome it
// reads the candidate's result. The pages and the decision store use it.
func (rec Record) Summary(outcomeKey string) (outcome string, reasons []string) {
	if rec.Summarized {
		return rec.Outcome, rec.Reasons
	}
	result, failed := rec.Result, rec.Error != nil
	if rec.IsShadowOutcome() {
		result, failed = rec.Shadow.Result, rec.Shadow.Error != nil
	}
	if failed {
		return OutcomeError, nil
	}
	outcomeKey = cmp.Or(outcomeKey, DefaultOutcomeKey)
	var res map[string]json.RawMessage
	if json.Unmarshal(result, &res) != nil {
		return "", nil
	}
	_ = json.Unmarshal(res["reasons"], &reasons)
	var b bool // the outcome: a string, else a boolean
	if json.Unmarshal(res[outcomeKey], &outcome) != nil && json.Unmarshal(res[outcomeKey], &b) == nil {
		outcome = strconv.FormatBool(b)
	}
	return outcome, reasons
}

// SummaryBy is Summary with the outcome member keyOf gives rec's decision
// (nil: the default), asked only when the record does not carry its
// summary already (every live decision's does).
func (rec Record) SummaryBy(keyOf func(decision string) string) (outcome string, reasons []string) {
	if rec.Summarized || keyOf == nil {
		return rec.Summary("")
	}
	return rec.Summary(keyOf(rec.Decision))
}

// Complete reports whether rec holds the whole request as received, so
// that deciding it again means something, and why not otherwise.
func (rec Record) Complete() (bool, string) {
	switch {
	case len(rec.Masked) > 0:
		return false, "masked when logged: " + ShownList(rec.Masked)
	case len(rec.Erased) > 0:
		return false, "erased when logged: " + ShownList(rec.Erased)
	case len(rec.Input) == 0 && rec.BodyBase64 == "" && rec.BodySize > 0:
		return false, fmt.Sprintf("its %d-byte body was not logged whole", rec.BodySize)
	}
	return true, ""
}

// Shown is a logged or stored value as one word of a line of text: "-"
// when empty, and quoted with Go's escapes (strconv.Quote) when it holds
// anything but printable characters: a control or escape sequence, a line
// break that would forge a line of a report, a bidirectional control
// (U+202E shows "\u202ea3f7-nur" as "run-7f3a"), bytes that are not UTF-8
// (a lone 0x9b is a terminal's CSI), or a space that would shift a column
// or split a word. A record's values came from requests, and a store's
// rows from whoever can write the database: every command that prints
// one (arbiter decisions, arbiter replay) prints it through this.
func Shown(s string) string {
	if s == "" {
		return "-"
	}
	if !utf8.ValidString(s) || strings.IndexFunc(s, func(r rune) bool { return r == ' ' || !unicode.IsPrint(r) }) >= 0 {
		return strconv.Quote(s)
	}
	return s
}

// ShownList is vs, each Shown, joined by commas ("" for none).
func ShownList(vs []string) string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = Shown(v)
	}
	return strings.Join(out, ", ")
}

// RecordError is the error a decision ended with: its contract code and the
// client-safe message.
type RecordError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// Violations are where an input failed its schema (input_schema_invalid),
	// as the answer listed them. A violation at or under a masked pointer
	// has its message, which may quote the value, replaced by MaskedValue.
	Violations []Violation `json:"violations,omitempty"`
}

// Violation is one failing location of an input: a JSON pointer into the
// input document ("" is the document itself) and what is wrong there.
type Violation struct {
	Path    string `json:"path"`
	Message string `json:"message"`
}

// String is the violation as one message led by its pointer, as OPA's
// error bodies and events list it ("/used: ...", "(the input): ...").
func (v Violation) String() string {
	if v.Path == "" {
		return "(the input): " + v.Message
	}
	return v.Path + ": " + v.Message
}
