package live

import (
	"context"
	"errors"
	"time"

	"github.com/arbiter-dev/arbiter/engine"
)

// Promotion is a revision made live by a promotion (Promote) instead of being loaded
// from the configured source (the folders, or the bundle).
//
// What a promotion means for a source that keeps being watched: the
// source stays the source of truth, and the promotion holds only while the
// source still holds what it held when the candidate was promoted. A
// reload or bundle activation that finds that same revision (a file event
// with no change, SIGHUP, POST /v1/reload, the same bundle again) keeps
// the promoted revision; one that finds another revision (the folders
// edited, a new bundle published) activates it through the gate as
// usual, and the promotion ends. A restart serves the source. So a
// promoted change is made durable by landing it in the source (the
// candidate's files in the live folders, or a bundle built from them),
// whose revision is then the promoted one and changes nothing.
type Promotion struct {
	Revision string    `json:"revision"`
	From     string    `json:"from_revision"`
	By       string    `json:"by,omitempty"`
	Origin   string    `json:"origin,omitempty"`
	At       time.Time `json:"at"`
	// Forced says the promotion gate refused it and the caller forced it.
	Forced bool `json:"forced,omitempty"`
	// SourceRevision is the revision the configured source had when the
	// candidate was promoted.
	SourceRevision string `json:"source_revision"`

	sourceHash string
}

// Promote is the source of a promotion: snap, a Snapshot that passed the
// gate on its own (a candidate in shadow, Engine.Judge), made live by by
// (forced: past a promotion gate that refused it).
// Activated, it replaces the live revision even when that is the same one,
// and its status carries the Promotion record. The Snapshot it replaced
// keeps serving the requests that started on it.
func Promote(snap *engine.Snapshot, by, origin string, forced bool) Source {
	return promotion{snap, by, origin, forced}
}

type promotion struct {
	snap       *engine.Snapshot
	by, origin string
	forced     bool
}

func (p promotion) Origin() string { return p.origin }

func (p promotion) candidate(context.Context, engine.Config) (*engine.Snapshot, error) {
	if p.snap == nil {
		return nil, errors.New("nothing to promote")
	}
	return p.snap, nil
}

// record is the Promotion of p replacing cur, prev the promotion in effect.
func (p promotion) record(cur *engine.Snapshot, prev *Promotion) *Promotion {
	r := &Promotion{Revision: p.snap.Revision, By: p.by, Origin: p.origin, At: time.Now().UTC(), Forced: p.forced}
	if cur != nil {
		r.From, r.SourceRevision, r.sourceHash = cur.Revision, cur.Revision, cur.Hash
	}
	if prev != nil {
		// Promoted twice: the source still holds what it held the first time.
		r.SourceRevision, r.sourceHash = prev.SourceRevision, prev.sourceHash
	}
	return r
}

// Promoted returns the promotion in effect, if any.
func (e *Engine) Promoted() (Promotion, bool) {
	if p := e.promoted.Load(); p != nil {
		return *p, true
	}
	return Promotion{}, false
}

// keepsPromotion reports whether snap, loaded from the configured source,
// is what the source held when the active revision was promoted: then the
// promotion holds (see Promotion). Called under e.swap.
func (e *Engine) keepsPromotion(snap *engine.Snapshot) bool {
	p := e.promoted.Load()
	return p != nil && snap.Revision == p.SourceRevision && snap.Hash == p.sourceHash
}
