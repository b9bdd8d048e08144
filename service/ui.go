package service

import (
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/arbiter-dev/arbiter/diff"
	"github.com/arbiter-dev/arbiter/engine/live"
	"github.com/arbiter-dev/arbiter/server/ui"
)

// pages are the /ui pages of one serve process and the ring of recent
// decisions they show, which the decision log feeds.
type pages struct {
	handler http.Handler
	ring    *ui.Ring // a sink of the decision-record pipeline
	// closing, closed by endStreams when the server shuts down, ends the
	// pages' live streams.
	closing   chan struct{}
	closeOnce sync.Once
}

// endStreams ends every live stream of the pages (http.Server's
// RegisterOnShutdown): Shutdown waits for requests to finish, and a
// stream would otherwise only end at the shutdown deadline.
func (p *pages) endStreams() { p.closeOnce.Do(func() { close(p.closing) }) }

// newPages builds the pages over eng (decisions made for the pages are never
// logged) and the shadow's candidate, its report and its gate, and
// fills the ring from the tail of the decision log file. The ring is a sink
// of the decision-record pipeline: it shows every decision the pipeline
// took, masked as every sink receives it. With a decision store (store not
// nil) the list and a decision's page read every replica's from it.
func newPages(c *Config, eng *live.Engine, sh *shadowing, diffs *diff.Runner, store ui.Store, login bool, log *slog.Logger) *pages {
	p := &pages{closing: make(chan struct{})}
	p.ring = ui.NewRing(ui.RingConfig{Size: c.UIRecent, OutcomeKey: ui.OutcomeKeys(eng), RunID: ui.RunIDs(eng), Replica: c.ReplicaID})
	cfg := ui.Config{Recent: p.ring, Store: store, Decider: eng, Reloads: eng, Logger: log,
		MaxBodyBytes: c.API.MaxBodyBytes, EvalTimeout: 2*c.Engine.EvalTimeout + 5*time.Second, Login: login,
		Closing: p.closing, TraceURL: c.UITraceURL}
	if c.DecisionLog != "" && c.DecisionLog != "-" {
		lf := ui.LogFile{Path: c.DecisionLog}
		n, err := lf.Preload(p.ring, c.UIRecent)
		if err != nil {
			log.Warn("ui: could not read the decision log's tail", "err", err)
		}
		log.Debug("ui: recent decisions read from the decision log", "records", n)
		cfg.Archive = lf
	}
	if diffs != nil { // a nil *diff.Runner is no ui.Diffs
		cfg.Diffs = diffs
	}
	if sh != nil {
		cfg.Shadow, cfg.ShadowGate = sh.sh, sh.srv.Gate
	}
	p.handler = ui.New(cfg)
	return p
}
