package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/arbiter-dev/arbiter/decisionlog"
	"github.com/arbiter-dev/arbiter/engine/live"
	"github.com/arbiter-dev/arbiter/internal/redact"
	"github.com/arbiter-dev/arbiter/logship"
	"github.com/arbiter-dev/arbiter/policybundle"
)

// fleetConfig is what a replica of a fleet adds to `arbiter serve`: its
// policies from a bundle, its decisions shipped to a log service.
type fleetConfig struct {
	bundleURL  string
	bundleName string
	// polls is how a bundle is polled, verified and bounded, as the flags
	// say: the live one's and the shadow's (sourceConfig).
	polls policybundle.SourceConfig

	logService       string
	logMaxEvents     int64
	uploadQueueBytes int64 // fitted into the memory limit (memory.go)
	logInterval      time.Duration
	logRetryMax      time.Duration
	replicaID        string
	uploadDeadline   time.Duration
}

func (f *fleetConfig) register(fs *command) {
	host, _ := os.Hostname()
	fs.StringVar(&f.bundleURL, "bundle-url", "", "serve the revision of this OPA bundle instead of the folders: http(s)://HOST/PATH, oci://HOST/REPO:TAG or oci+http://HOST/REPO:TAG")
	fs.StringVar(&f.bundleName, "bundle-name", policybundle.DefaultName, "the bundle's name in status, metrics and decision logs")
	fs.StringVar(&f.polls.Keys.File, "bundle-verification-key-file", "", "PEM public key (or HMAC secret) bundles must be signed with; unsigned or tampered bundles are then refused")
	fs.StringVar(&f.polls.Keys.ID, "bundle-verification-key-id", "", "id of the verification key, a signature's kid must name it (default: default, as OPA)")
	fs.StringVar(&f.polls.Keys.Algorithm, "bundle-verification-key-alg", "RS256", "signature algorithm of the verification key")
	fs.DurationVar(&f.polls.MinDelay, "bundle-poll-min-delay", 10*time.Second, "shortest wait between two bundle polls (whole seconds)")
	fs.DurationVar(&f.polls.MaxDelay, "bundle-poll-max-delay", 20*time.Second, "longest wait between two bundle polls, and the cap of the retry backoff")
	fs.DurationVar(&f.polls.LongPoll, "bundle-long-poll-timeout", 0, "ask an OPA-style bundle server to hold each poll this long (0: plain polling)")
	fs.Int64Var(&f.polls.Limits.Bytes, "bundle-max-bytes", policybundle.DefaultLimits.Bytes, "largest bundle download (compressed); a larger one is refused as it arrives")
	fs.Int64Var(&f.polls.Limits.UnpackedBytes, "bundle-max-unpacked-bytes", policybundle.DefaultLimits.UnpackedBytes, "most bytes a bundle may unpack to, counted before anything is kept")
	fs.IntVar(&f.polls.Limits.Files, "bundle-max-files", policybundle.DefaultLimits.Files, "most files (tarball entries) in a bundle")
	fs.DurationVar(&f.polls.DownloadTimeout, "bundle-download-timeout", policybundle.DefaultDownloadTimeout, "deadline of each bundle download, headers and body (after the long-poll wait); past it the download is cut off as stalled")
	fs.DurationVar(&f.polls.StallTimeout, "bundle-download-stall-timeout", policybundle.DefaultStallTimeout, "a bundle download that receives less than 1 KiB in this long is cut off as stalled (its minimum rate)")
	fs.StringVar(&f.logService, "decision-log-service", "", "upload decisions as OPA EventV1 gzip batches to this service (POST URL/logs)")
	fs.Int64Var(&f.logMaxEvents, "decision-log-upload-max-events", logship.DefaultMaxEvents, "events that may wait for upload; more are dropped and counted")
	fs.Int64Var(&f.uploadQueueBytes, "decision-log-upload-queue-bytes", logship.DefaultQueueBytes, "bytes of events that may wait for upload, the batch being retried included (each sized as its decision-log record); more are dropped and counted")
	fs.DurationVar(&f.logInterval, "decision-log-upload-interval", time.Second, "time between uploads while events trickle in")
	fs.DurationVar(&f.logRetryMax, "decision-log-upload-max-retry-delay", 10*time.Second, "cap of the backoff between retries of a failed upload")
	fs.DurationVar(&f.uploadDeadline, "decision-log-upload-shutdown-timeout", 10*time.Second, "how long a stopping replica keeps trying to upload what is queued")
	fs.StringVar(&f.replicaID, "replica-id", host, "this replica's id, at most 512 bytes: the id label of its uploaded decisions and the replica of its stored ones")
}

func (f *fleetConfig) validate() error {
	if f.bundleURL != "" {
		if _, err := f.polls.Keys.VerificationConfig(); err != nil {
			return fmt.Errorf("--bundle-verification-key-file: %w", err)
		}
		if f.polls.MinDelay < time.Second || f.polls.MaxDelay < f.polls.MinDelay {
			return errors.New("--bundle-poll-min-delay must be at least 1s and --bundle-poll-max-delay at least as long")
		}
		if f.polls.Limits.Bytes <= 0 || f.polls.Limits.UnpackedBytes <= 0 || f.polls.Limits.Files <= 0 || f.polls.DownloadTimeout <= 0 || f.polls.StallTimeout <= 0 {
			return errors.New("--bundle-max-bytes, --bundle-max-unpacked-bytes, --bundle-max-files, --bundle-download-timeout and --bundle-download-stall-timeout must be positive")
		}
	}
	if len(f.replicaID) > decisionlog.MaxNameBytes {
		return fmt.Errorf("--replica-id is %d bytes long; a replica's id is a stored name, at most %d", len(f.replicaID), decisionlog.MaxNameBytes)
	}
	if f.logService != "" && (f.logMaxEvents <= 0 || f.uploadQueueBytes <= 0) {
		return errors.New("--decision-log-upload-max-events and --decision-log-upload-queue-bytes must be positive")
	}
	return nil
}

// fleet is what serve runs for a replica of a fleet.
type fleet struct {
	cfg    *fleetConfig
	source *policybundle.Source
	upload *logship.Uploader
}

// newFleet prepares the bundle source (when --bundle-url is set; the
// engine then starts empty and not ready) and the uploader (when
// --decision-log-service is set).
func newFleet(c *serveConfig, eng *live.Engine, log *slog.Logger) (*fleet, error) {
	f := &fleet{cfg: &c.fleetConfig}
	if c.bundleURL != "" {
		src, err := policybundle.NewSource(c.sourceConfig(c.bundleURL, c.bundleName, log), policybundle.Activator(eng))
		if err != nil {
			return nil, err
		}
		f.source = src
	}
	if c.logService != "" {
		up, err := logship.New(logship.Config{
			URL: c.logService, BundleName: c.bundleName,
			Labels:    map[string]string{"id": c.replicaID, "app": "arbiter", "version": buildVersion()},
			MaxEvents: int(c.logMaxEvents), MaxBytes: c.uploadQueueBytes, Interval: c.logInterval, MaxRetryDelay: c.logRetryMax, Logger: log,
		})
		if err != nil {
			return nil, err
		}
		f.upload = up
	}
	return f, nil
}

// sourceConfig is how a bundle at url is polled, verified and bounded.
func (f *fleetConfig) sourceConfig(url, name string, log *slog.Logger) policybundle.SourceConfig {
	sc := f.polls
	sc.URL, sc.Name, sc.Logger = url, name, log
	return sc
}

// bundleStatus is the bundles member of /v1/status, as OPA reports it.
// It and bundleStuck and unloaded are the server's only with a bundle.
func (f *fleet) bundleStatus() any {
	return map[string]policybundle.Status{f.cfg.bundleName: f.source.Status()}
}

// bundleStuck says why the bundle's polls are stuck (nil when they are not).
func (f *fleet) bundleStuck() error {
	return f.source.Stuck(time.Now())
}

// stop ends polling and uploads what is queued (within the upload
// shutdown timeout); what could not be sent is counted and reported.
func (f *fleet) stop(log *slog.Logger) error {
	if f.source != nil {
		f.source.Stop(context.Background())
	}
	if f.upload == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), f.cfg.uploadDeadline)
	defer cancel()
	err := f.upload.Close(ctx)
	s := f.upload.Stats()
	log.Info("decision-log upload closed", "sent", s.Sent, "dropped", s.Dropped(), "failed_uploads", s.UploadsFailed)
	return err
}

// unloaded says, naming the flag to look at, why no revision of the bundle
// is live: /health/ready's reason and the start's one line.
func (f *fleet) unloaded() error {
	url := redact.URL(f.cfg.bundleURL)
	fail := f.source.Failure()
	switch fail.Kind {
	case policybundle.FailedDownload:
		return fmt.Errorf("--bundle-url %s: the bundle server cannot be reached or did not serve the bundle: %v", url, fail.Err)
	case policybundle.FailedSignature:
		if f.cfg.polls.Keys.File == "" {
			return fmt.Errorf("--bundle-verification-key-file is not set and the bundle at --bundle-url %s does not read without it: %v", url, fail.Err)
		}
		return fmt.Errorf("--bundle-verification-key-file %s: the bundle's signature does not verify with this key (--bundle-verification-key-alg %s): %v", f.cfg.polls.Keys.File, f.cfg.polls.Keys.Algorithm, fail.Err)
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
