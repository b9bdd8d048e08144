package main

import (
	"cmp"
	"context"
	"errors"
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

// shadowConfig is what `arbiter serve` takes to run a candidate revision
// in shadow (package shadow).
type shadowConfig struct {
	shadowPolicies, shadowSchemas, shadowTests  string
	shadowBundleURL, shadowForbid, shadowAdmins string
	// sampling is the shadow's own configuration, as its flags set it.
	sampling shadow.Config
}

// defaultShadowMinDecisions is the fewest judged decisions the default
// promotion gate asks for.
const defaultShadowMinDecisions = 100

func (s *shadowConfig) register(fs *command) {
	fs.StringVar(&s.shadowPolicies, "shadow-policies", "", "run the revision of this policy folder in shadow beside the live one, from the start")
	fs.StringVar(&s.shadowSchemas, "shadow-schemas", "", "schema folder of the shadow candidate (default: --schemas)")
	fs.StringVar(&s.shadowTests, "shadow-tests", "", "test folder that gates the shadow candidate (default: --tests)")
	fs.StringVar(&s.shadowBundleURL, "shadow-bundle-url", "", "run the revisions of this OPA bundle in shadow (as --bundle-url; verified with the --bundle-verification-* key, polled as --bundle-poll-*)")
	fs.Float64Var(&s.sampling.Rate, "shadow-rate", shadow.DefaultRate, "fraction of live decisions the candidate decides too, in (0, 1]")
	fs.IntVar(&s.sampling.Queue, "shadow-queue", shadow.DefaultQueue, "decisions that may wait for the candidate; more are dropped and counted")
	fs.Int64Var(&s.sampling.QueueBytes, "shadow-queue-bytes", shadow.DefaultQueueBytes, "bytes of inputs that may wait for the candidate")
	fs.IntVar(&s.sampling.Workers, "shadow-workers", shadow.DefaultWorkers, "candidate evaluations at once")
	fs.Float64Var(&s.sampling.CPU, "shadow-cpu", shadow.DefaultCPU, "cores the candidate's evaluations may use on average (a token bucket of evaluation time)")
	fs.DurationVar(&s.sampling.Timeout, "shadow-timeout", shadow.DefaultTimeout, "longest wall-clock time of one candidate decision, paused for live traffic and its CPU budget included; past it the decision is counted expired, not judged (the candidate's --eval-timeout counts only the time it runs)")
	fs.IntVar(&s.sampling.Examples, "shadow-examples", shadow.DefaultExamples, "decision ids kept per decision and class in the impact report")
	fs.Uint64Var(&s.sampling.MinDecisions, "shadow-min-decisions", defaultShadowMinDecisions, "promotion gate: fewest decisions the candidate must have judged")
	fs.StringVar(&s.shadowForbid, "shadow-forbid", "refuse_to_allow,candidate_error", "promotion gate: comma-separated classes of which one decision refuses a promotion")
	fs.StringVar(&s.shadowAdmins, "shadow-admins", "", "comma-separated callers (token file names or client certificate common names) that may load, clear and promote candidates; empty with --auth-token-file or --tls-client-ca-file: nobody may (without authentication: any caller)")
}

func (s *shadowConfig) validate() error {
	if _, err := s.forbidden(); err != nil {
		return err
	}
	switch {
	case !(s.sampling.Rate > 0 && s.sampling.Rate <= 1):
		return errors.New("--shadow-rate must be above 0 and at most 1")
	case s.sampling.Queue <= 0 || s.sampling.QueueBytes <= 0 || s.sampling.Workers <= 0 || s.sampling.Examples <= 0:
		return errors.New("--shadow-queue, --shadow-queue-bytes, --shadow-workers and --shadow-examples must be positive")
	case !(s.sampling.CPU > 0):
		return errors.New("--shadow-cpu must be positive")
	case s.sampling.Timeout <= 0:
		return errors.New("--shadow-timeout must be positive")
	case s.shadowPolicies != "" && s.shadowBundleURL != "":
		return errors.New("--shadow-policies and --shadow-bundle-url are two sources of one candidate: pass one")
	}
	return nil
}

func (s *shadowConfig) forbidden() ([]shadow.Class, error) {
	out := []shadow.Class{}
	for _, f := range splitList(s.shadowForbid) {
		c, ok := shadow.ParseClass(f)
		if !ok {
			return nil, fmt.Errorf("--shadow-forbid: %q is not a class (%v)", f, shadow.Classes)
		}
		out = append(out, c)
	}
	return out, nil
}

// shadowing is the shadow a server runs: the candidate holder and its
// workers, and the bundle source of candidates when there is one.
type shadowing struct {
	sh     *shadow.Shadow
	source *policybundle.Source
	srv    *server.ShadowConfig
}

// newShadow starts the shadow's workers, which run the self-check of the
// live revision's compiled answers too: before the first revision loads.
func newShadow(c *serveConfig, diffs *diff.Runner, log *slog.Logger) *shadowing {
	scfg := c.sampling
	scfg.DecisionLog, scfg.Logger, scfg.SelfCheck = c.decisionLog, log, c.selfCheckRate
	if diffs != nil {
		scfg.Prover = diffs
	}
	return &shadowing{sh: shadow.New(scfg)}
}

// start loads the candidate of --shadow-policies through the gate (a
// failure is a failed start, as a live revision's is). Candidates are
// built with the live configuration (deadline, limits, self-check), so a
// promoted one runs as a reload would.
func (s *shadowing) start(ctx context.Context, c *serveConfig, eng *live.Engine, ecfg engine.Config, log *slog.Logger) error {
	forbid, _ := c.forbidden()
	sh := s.sh
	s.srv = &server.ShadowConfig{
		Shadow:  sh,
		Engine:  eng,
		Schemas: ecfg.Schemas,
		Tests:   ecfg.Tests,
		Gate:    shadow.Gate{MinDecisions: c.sampling.MinDecisions, Forbidden: forbid},
		Admins:  splitList(c.shadowAdmins),
		Bundle: func(path string) (live.Source, error) {
			vc, err := c.polls.Keys.VerificationConfig()
			if err != nil {
				return nil, err
			}
			rev, err := policybundle.ReadFile(path, vc, c.polls.Limits)
			if err != nil {
				return nil, err
			}
			return rev.Source(), nil
		},
	}
	if c.shadowPolicies != "" {
		cand := live.Folders(c.shadowPolicies, cmp.Or(c.shadowSchemas, ecfg.Schemas), cmp.Or(c.shadowTests, ecfg.Tests))
		snap, err := eng.Judge(ctx, cand)
		if err != nil {
			_ = sh.Close(context.Background())
			return fmt.Errorf("loading the shadow candidate: %w", err)
		}
		sh.Set(&shadow.Candidate{Snapshot: snap, Origin: cand.Origin(), LoadedAt: time.Now()})
		log.Info("candidate in shadow", "revision", snap.Revision, "origin", cand.Origin(), "rate", c.sampling.Rate, "cpu", c.sampling.CPU)
	}
	if c.shadowBundleURL != "" {
		src, err := policybundle.NewSource(c.sourceConfig(c.shadowBundleURL, shadowBundleName, log), func(ctx context.Context, rev *policybundle.Revision) (*engine.Snapshot, error) {
			snap, err := eng.Judge(ctx, rev.Source())
			if err != nil {
				return nil, err
			}
			// The origin is shown (status, pages, the promotion's record):
			// the URL's secrets are not.
			origin := "bundle " + redact.URL(c.shadowBundleURL)
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
	if s.source != nil {
		s.source.Stop(ctx)
	}
	if err := s.sh.Close(ctx); err != nil {
		log.Warn("shadow evaluations still running at stop", "err", err)
	}
}
