package service

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/arbiter-dev/arbiter/diff"
	"github.com/arbiter-dev/arbiter/engine"
	"github.com/arbiter-dev/arbiter/engine/live"
	"github.com/arbiter-dev/arbiter/internal/redact"
	"github.com/arbiter-dev/arbiter/policybundle"
	"github.com/arbiter-dev/arbiter/server"
	"github.com/arbiter-dev/arbiter/shadow"
)

// shadowing is the shadow a server runs: the candidate holder and its
// workers, and the bundle source of candidates when there is one.
type shadowing struct {
	sh     *shadow.Shadow
	source *policybundle.Source
	srv    *server.ShadowConfig
}

// newShadow starts the shadow's workers, which run the self-check of the
// live revision's compiled answers too: before the first revision loads.
func newShadow(c *Config, diffs *diff.Runner, log *slog.Logger) *shadowing {
	scfg := c.Sampling
	scfg.DecisionLog, scfg.Logger, scfg.SelfCheck = c.DecisionLog, log, c.SelfCheckRate
	if diffs != nil {
		scfg.Prover = diffs
	}
	return &shadowing{sh: shadow.New(scfg)}
}

// start loads the candidate of --shadow-policies through the gate (a
// failure is a failed start, as a live revision's is). Candidates are
// built with the live configuration (deadline, limits, self-check), so a
// promoted one runs as a reload would.
func (s *shadowing) start(ctx context.Context, c *Config, eng *live.Engine, ecfg engine.Config, log *slog.Logger) error {
	sh := s.sh
	s.srv = &server.ShadowConfig{
		Shadow:  sh,
		Engine:  eng,
		Schemas: ecfg.Schemas,
		Tests:   ecfg.Tests,
		Gate:    shadow.Gate{MinDecisions: c.Sampling.MinDecisions, Forbidden: c.ShadowForbid},
		Admins:  c.ShadowAdmins,
		Bundle: func(path string) (live.Source, error) {
			vc, err := c.Polls.Keys.VerificationConfig()
			if err != nil {
				return nil, err
			}
			rev, err := policybundle.ReadFile(path, vc, c.Polls.Limits)
			if err != nil {
				return nil, err
			}
			return rev.Source(), nil
		},
	}
	if c.ShadowPolicies != "" {
		cand := live.Folders(c.ShadowPolicies, cmp.Or(c.ShadowSchemas, ecfg.Schemas), cmp.Or(c.ShadowTests, ecfg.Tests))
		snap, err := eng.Judge(ctx, cand)
		if err != nil {
			_ = sh.Close(context.Background())
			return fmt.Errorf("loading the shadow candidate: %w", err)
		}
		sh.Set(&shadow.Candidate{Snapshot: snap, Origin: cand.Origin(), LoadedAt: time.Now()})
		log.Info("candidate in shadow", "revision", snap.Revision, "origin", cand.Origin(), "rate", c.Sampling.Rate, "cpu", c.Sampling.CPU)
	}
	if c.ShadowBundleURL != "" {
		src, err := policybundle.NewSource(c.sourceConfig(c.ShadowBundleURL, shadowBundleName, log), func(ctx context.Context, rev *policybundle.Revision) (*engine.Snapshot, error) {
			snap, err := eng.Judge(ctx, rev.Source())
			if err != nil {
				return nil, err
			}
			// The origin is shown (status, pages, the promotion's record):
			// the URL's secrets are not.
			origin := "bundle " + redact.URL(c.ShadowBundleURL)
			sh.Set(&shadow.Candidate{Snapshot: snap, Origin: origin, LoadedAt: time.Now()})
			log.Info("candidate in shadow", "revision", snap.Revision, "origin", origin)
			return snap, nil
		})
		if err != nil {
			_ = sh.Close(context.Background())
			return fmt.Errorf("--shadow-bundle-url: %w", err)
		}
		s.source = src
	}
	return nil
}

// shadowBundleName names the shadow's bundle in status, metrics and logs.
const shadowBundleName = "shadow"

// stop ends polling and the shadow's evaluations, before the decision log
// closes: an outcome the candidate reaches meanwhile is still logged.
func (s *shadowing) stop(ctx context.Context, log *slog.Logger) {
	if s == nil {
		return
	}
	if s.source != nil {
		s.source.Stop(ctx)
	}
	if err := s.sh.Close(ctx); err != nil {
		log.Warn("shadow evaluations still running at stop", "err", err)
	}
}
