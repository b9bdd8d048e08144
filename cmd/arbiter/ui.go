package main

import (
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/arbiter-dev/arbiter/decisionlog"
	"github.com/arbiter-dev/arbiter/engine"
	"github.com/arbiter-dev/arbiter/server"
	"github.com/arbiter-dev/arbiter/server/ui"
)

// pages are the /ui pages of one serve process and the ring of recent
// decisions they show, which the decision log feeds.
type pages struct {
	handler http.Handler
	ring    *ui.Ring
	mask    func([]byte) ([]byte, []string) // the decision log's masking, nil when none
	// refuseUnlogged: a decision whose record the log refused was not
	// answered (--decision-log-full refuse), so the ring leaves it out.
	refuseUnlogged bool
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
// logged) and shadow (nil: none; issue 13 wires its candidate here), and
// fills the ring from the tail of the decision log file.
func newPages(c *serveConfig, eng *engine.Engine, shadow ui.Shadow, login bool, log *slog.Logger) (*pages, error) {
	p := &pages{refuseUnlogged: c.logFull == "refuse", closing: make(chan struct{})}
	var pointers []string
	for _, s := range strings.Split(c.logMask, ",") {
		if s = strings.TrimSpace(s); s != "" {
			pointers = append(pointers, s)
		}
	}
	if len(pointers) > 0 {
		m, err := decisionlog.NewMaskFunc(pointers)
		if err != nil {
			return nil, err
		}
		p.mask = m
	}
	p.ring = ui.NewRing(ui.RingConfig{Size: c.uiRecent, OutcomeKey: ui.OutcomeKeys(eng)})
	var archive ui.Archive
	if c.decisionLog != "" && c.decisionLog != "-" {
		lf := ui.LogFile{Path: c.decisionLog}
		n, err := lf.Preload(p.ring, c.uiRecent)
		if err != nil {
			log.Warn("ui: could not read the decision log's tail", "err", err)
		}
		log.Debug("ui: recent decisions read from the decision log", "records", n)
		archive = lf
	}
	p.handler = ui.New(ui.Config{
		Recent: p.ring, Archive: archive, Decider: eng, Reloads: eng, Shadow: shadow, Logger: log,
		MaxBodyBytes: c.maxBodyBytes, EvalTimeout: 2*c.evalTimeout + 5*time.Second, Login: login,
		Closing: p.closing,
	})
	return p, nil
}

// beside returns the decision log that also feeds the ring: the log's
// answer (whether it took the record) is the answer; the ring takes every
// answered decision, masked as the log masks it.
func (p *pages) beside(log server.DecisionLog) server.DecisionLog {
	return ringLog{log: log, p: p}
}

type ringLog struct {
	log server.DecisionLog // may be nil: no decision log
	p   *pages
}

func (r ringLog) Log(rec decisionlog.Record) bool {
	ringRec := rec
	if r.p.mask != nil && len(rec.Input) > 0 {
		ringRec.Input, ringRec.Masked = r.p.mask(rec.Input)
	}
	took := true
	if r.log != nil {
		took = r.log.Log(rec)
	}
	// A promotion's record names no decision: the log keeps it, the list of
	// decisions does not.
	if (took || !r.p.refuseUnlogged) && rec.Promotion == nil {
		r.p.ring.Add(ringRec)
	}
	return took
}
