package service

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/arbiter-dev/arbiter/engine/live"
	"github.com/arbiter-dev/arbiter/internal/redact"
	"github.com/arbiter-dev/arbiter/logship"
	"github.com/arbiter-dev/arbiter/policybundle"
)

// fleet is what serve runs for a replica of a fleet.
type fleet struct {
	cfg    *Config
	source *policybundle.Source
	upload *logship.Uploader
}

// newFleet prepares the bundle source (when --bundle-url is set; the
// engine then starts empty and not ready) and the uploader (when
// --decision-log-service is set).
func newFleet(c *Config, eng *live.Engine, log *slog.Logger) (*fleet, error) {
	f := &fleet{cfg: c}
	if c.BundleURL != "" {
		src, err := policybundle.NewSource(c.sourceConfig(c.BundleURL, c.BundleName, log), policybundle.Activator(eng))
		if err != nil {
			return nil, err
		}
		f.source = src
	}
	if c.LogService != "" {
		up, err := logship.New(logship.Config{
			URL: c.LogService, BundleName: c.BundleName,
			Labels:    map[string]string{"id": c.ReplicaID, "app": "arbiter", "version": c.Version},
			MaxEvents: int(c.LogMaxEvents), MaxBytes: c.UploadQueueBytes, Interval: c.LogInterval, MaxRetryDelay: c.LogRetryMax, Logger: log,
		})
		if err != nil {
			return nil, err
		}
		f.upload = up
	}
	return f, nil
}

// sourceConfig is how a bundle at url is polled, verified and bounded.
func (c *Config) sourceConfig(url, name string, log *slog.Logger) policybundle.SourceConfig {
	sc := c.Polls
	sc.URL, sc.Name, sc.Logger = url, name, log
	return sc
}

// bundleStatus is the bundles member of /v1/status, as OPA reports it.
// It and bundleStuck and unloaded are the server's only with a bundle.
func (f *fleet) bundleStatus() any {
	return map[string]policybundle.Status{f.cfg.BundleName: f.source.Status()}
}

// bundleStuck says why the bundle's polls are stuck (nil when they are not).
func (f *fleet) bundleStuck() error {
	return f.source.Stuck(time.Now())
}

// stop ends polling and uploads what is queued (within the upload
// shutdown timeout); what could not be sent is counted and reported.
func (f *fleet) stop(log *slog.Logger) error {
	if f == nil {
		return nil
	}
	if f.source != nil {
		f.source.Stop(context.Background())
	}
	if f.upload == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), f.cfg.UploadDeadline)
	defer cancel()
	err := f.upload.Close(ctx)
	s := f.upload.Stats()
	log.Info("decision-log upload closed", "sent", s.Sent, "dropped", s.Dropped(), "failed_uploads", s.UploadsFailed)
	return err
}

// unloaded says, naming the flag to look at, why no revision of the bundle
// is live: /health/ready's reason and the start's one line.
func (f *fleet) unloaded() error {
	url := redact.URL(f.cfg.BundleURL)
	fail := f.source.Failure()
	switch fail.Kind {
	case policybundle.FailedDownload:
		return fmt.Errorf("--bundle-url %s: the bundle server cannot be reached or did not serve the bundle: %v", url, fail.Err)
	case policybundle.FailedSignature:
		if f.cfg.Polls.Keys.File == "" {
			return fmt.Errorf("--bundle-verification-key-file is not set and the bundle at --bundle-url %s does not read without it: %v", url, fail.Err)
		}
		return fmt.Errorf("--bundle-verification-key-file %s: the bundle's signature does not verify with this key (--bundle-verification-key-alg %s): %v", f.cfg.Polls.Keys.File, f.cfg.Polls.Keys.Algorithm, fail.Err)
	case policybundle.FailedRead:
		return fmt.Errorf("--bundle-url %s: the bundle does not read: %v", url, fail.Err)
	case policybundle.FailedGate:
		return fmt.Errorf("--bundle-url %s: the bundle's revision was refused by the gate: %v", url, fail.Err)
	}
	return fmt.Errorf("--bundle-url %s: no bundle has been activated yet", url)
}

// sayAtStart logs, once the first poll has ended, one line naming the flag
// when it did not make a revision live: the replica stays not ready, and
// its later polls keep trying.
func (f *fleet) sayAtStart(ctx context.Context, eng *live.Engine, log *slog.Logger) {
	if f.source != nil {
		afterClose(ctx, f.source.Polled(), func() {
			if eng.Snapshot() == nil {
				log.Error("no policy revision at start: not ready until a bundle activates", "problem", f.unloaded().Error())
			}
		})
	}
}

// afterClose runs f once ch is closed, in the background, unless ctx ends
// first.
func afterClose(ctx context.Context, ch <-chan struct{}, f func()) {
	go func() {
		select {
		case <-ctx.Done():
		case <-ch:
			f()
		}
	}()
}
