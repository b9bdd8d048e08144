package decisionlog

import (
	"encoding/json"
	"sync"
	"sync/atomic"
)

// Shadow is what a candidate revision made of a logged decision, decided
// in shadow after the live answer was written: its revision, its result or
// error, and the class of the difference (package shadow's classes,
// refuse_to_allow the dangerous one).
type Shadow struct {
	Revision   string          `json:"policy_revision"`
	Class      string          `json:"class"`
	Result     json.RawMessage `json:"result,omitempty"`
	Error      *RecordError    `json:"error,omitempty"`
	DurationNS int64           `json:"duration_ns"`
}

// Pending is the shadow outcome that a queued record waits for. The record
// is queued (and counted) before the live answer is written, as every
// record is; the writer holds it back until Complete is called, then
// writes it with its Shadow member, so that one line holds the decision
// and what the candidate made of it. Complete must be called once the
// candidate is done or gave up (nil: the record is written without a
// shadow member); a Logger that closes first writes the record without
// waiting.
type Pending struct {
	once   sync.Once
	done   chan struct{}
	shadow *Shadow
	wake   atomic.Pointer[chan struct{}] // the Logger holding the record
}

// NewPending returns a Pending that rec waits for once AwaitShadow set it.
func NewPending() *Pending { return &Pending{done: make(chan struct{})} }

// AwaitShadow makes the Logger hold rec until p completes.
func (rec *Record) AwaitShadow(p *Pending) { rec.pending = p }

// Complete hands the candidate's outcome (nil when there is none) to the
// record waiting for it. Only the first call counts.
func (p *Pending) Complete(s *Shadow) {
	p.once.Do(func() {
		p.shadow = s
		close(p.done)
		if w := p.wake.Load(); w != nil {
			select {
			case *w <- struct{}{}:
			default:
			}
		}
	})
}

// ready reports whether p has completed, and its shadow if so.
func (p *Pending) ready() (*Shadow, bool) {
	select {
	case <-p.done:
		return p.shadow, true
	default:
		return nil, false
	}
}
