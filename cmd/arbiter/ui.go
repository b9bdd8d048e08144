package main

import (
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/arbiter-dev/arbiter/decisionlog"
	"github.com/arbiter-dev/arbiter/engine"
	"github.com/arbiter-dev/arbiter/server/ui"
)

// pages are the /ui pages of one serve process and the ring of recent
// decisions they show, which the decision log feeds.
type pages struct {
	handler http.Handler
	ring    *ui.Ring
	mask    func([]byte) []byte // the decision log's masking, nil when none
}

// newPages builds the pages over eng (decisions made for the pages are never
// logged) and fills the ring from the tail of the decision log file.
func newPages(c *serveConfig, eng *engine.Engine, login bool, log *slog.Logger) (*pages, error) {
	p := &pages{}
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
	p.ring = ui.NewRing(ui.RingConfig{Size: int(c.uiRecent), OutcomeKey: ui.OutcomeKeys(eng)})
	var archive ui.Archive
	if c.decisionLog != "" && c.decisionLog != "-" {
		lf := ui.LogFile{Path: c.decisionLog, Backups: 5}
		n, err := lf.Preload(p.ring, int(c.uiRecent))
		if err != nil {
			log.Warn("ui: could not read the decision log's tail", "err", err)
		}
		log.Debug("ui: recent decisions read from the decision log", "records", n)
		archive = lf
	}
	p.handler = ui.New(ui.Config{
		Recent: p.ring, Archive: archive, Decider: eng, Reloads: eng, Logger: log,
		MaxBodyBytes: c.maxBodyBytes, EvalTimeout: 2*c.evalTimeout + 5*time.Second, Login: login,
	})
	return p, nil
}

// Log adds a record to the ring, masked as the decision log masks it.
func (p *pages) Log(rec decisionlog.Record) {
	if p.mask != nil && len(rec.Input) > 0 {
		rec.Input = p.mask(rec.Input)
	}
	p.ring.Add(rec)
}
