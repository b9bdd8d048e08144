package ui

import (
	"errors"
	"os"

	"github.com/arbiter-dev/arbiter/decisionlog"
)

// LogFile reads the decision log that the server writes: its tail fills the
// ring when the process starts, and a decision the ring no longer holds
// (or holds without its input) is looked up in it.
type LogFile struct {
	Path string
}

// maxTailBytes bounds what Preload reads from the end of the log.
const maxTailBytes = 64 << 20

// Preload adds to ring the last decisions of the log (at most n, read from
// at most the last 64 MiB of the current file), oldest first. Lines that are
// not records are skipped, as replay skips them.
func (l LogFile) Preload(ring *Ring, n int) (int, error) {
	if n <= 0 {
		return 0, nil
	}
	// The last n decisions, and the last n of the candidates' answers.
	var last, shadows []decisionlog.Record
	keep := func(recs []decisionlog.Record, rec decisionlog.Record) []decisionlog.Record {
		if len(recs) == n {
			recs = recs[1:]
		}
		return append(recs, rec)
	}
	err := decisionlog.ReadTail(l.Path, maxTailBytes, func(rec decisionlog.Record) error {
		switch {
		case rec.DecisionID != "" && rec.IsShadowOutcome():
			shadows = keep(shadows, rec)
		case rec.DecisionID != "" && rec.IsDecision():
			last = keep(last, rec)
		}
		return nil
	})
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return 0, err
	}
	ring.Write(append(last, shadows...))
	return len(last), nil
}

var errFound = errors.New("found")

// shadowLookahead is how many records after a decision Lookup reads for
// its shadow outcomes, which the log writes shortly after it.
const shadowLookahead = 10_000

// Lookup finds the record of a decision id in the log and the backups the
// writer rotated it into (named by the writer's own code), newest first,
// with the shadow candidates' answers to it (their outcome records) logged
// before it was found or within shadowLookahead records after it.
func (l LogFile) Lookup(id string) (decisionlog.Record, []decisionlog.Shadow, bool, error) {
	if l.Path == "" || l.Path == "-" {
		return decisionlog.Record{}, nil, false, nil
	}
	var found decisionlog.Record
	var shadows []decisionlog.Shadow
	ok, after := false, 0
	err := decisionlog.ReadLog(l.Path, func(rec decisionlog.Record) error {
		if ok {
			if after++; after > shadowLookahead {
				return errFound
			}
		}
		switch {
		case rec.DecisionID != id:
		case rec.IsShadowOutcome():
			if len(shadows) < maxShadows {
				shadows = append(shadows, *rec.Shadow)
			}
		case rec.IsDecision() && !ok:
			found, ok = rec, true
		}
		return nil
	})
	if err != nil && !errors.Is(err, errFound) && !errors.Is(err, os.ErrNotExist) {
		return decisionlog.Record{}, nil, false, err
	}
	if !ok {
		shadows = nil
	}
	return found, shadows, ok, nil
}
