package policybundle

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/open-policy-agent/opa/v1/download"
	"github.com/open-policy-agent/opa/v1/plugins"
	bundleplugin "github.com/open-policy-agent/opa/v1/plugins/bundle"
	"github.com/open-policy-agent/opa/v1/plugins/rest"

	"github.com/arbiter-dev/arbiter/engine"
	"github.com/arbiter-dev/arbiter/internal/defaults"
	"github.com/arbiter-dev/arbiter/internal/opalog"
	"github.com/arbiter-dev/arbiter/internal/redact"
)

// SourceConfig says where a replica's bundle comes from and how it is
// polled and verified. cmd fills it from flags.
type SourceConfig struct {
	// URL is http(s)://HOST/PATH (polled with ETag/If-None-Match),
	// oci://HOST/REPO:TAG (an OCI registry over HTTPS) or
	// oci+http://HOST/REPO:TAG (plain HTTP, for a registry on loopback).
	URL  string
	Name string // the bundle's name in status, metrics and decision logs
	Keys Keys
	// Polling, as OPA's bundle plugin: each successful poll waits a random
	// delay in [MinDelay, MaxDelay] (whole seconds, at least 1); a failed
	// one backs off exponentially up to MaxDelay. LongPoll, when set, asks
	// the server to hold a request that many seconds (OPA's long polling;
	// servers that do not support it are polled as usual).
	MinDelay, MaxDelay, LongPoll time.Duration
	// Each HTTP request of a poll is read whole within Limits, and fails as
	// stalled (ErrStalled) past DownloadTimeout (plus LongPoll) or when 1 KiB
	// does not arrive within StallTimeout. Zero values are the defaults.
	Limits                        Limits
	DownloadTimeout, StallTimeout time.Duration
	Logger                        *slog.Logger
}

// DefaultName is the bundle name when SourceConfig leaves it empty.
const DefaultName = "arbiter"

// Status is what /v1/status reports of a bundle: OPA's bundle status (name,
// active_revision, last_request, last_successful_request, _download and
// _activation, code, message, errors, http_code, size, metrics) plus the
// ETag, the URL and the content hash of the active revision.
type Status struct {
	bundleplugin.Status
	URL         string `json:"url"`
	ETag        string `json:"etag,omitempty"`
	ContentHash string `json:"content_hash,omitempty"` // of the active revision, as this replica computed it
	Signed      bool   `json:"signed"`
}

// Source polls one bundle and hands every new one, read and verified, to
// its activate function (the engine's gate). It counts what it did.
type Source struct {
	cfg      SourceConfig
	g        *guard // its vc verifies the bundles
	log      *slog.Logger
	activate func(context.Context, *Revision) (*engine.Snapshot, error)
	dl       interface {
		Start(context.Context)
		Stop(context.Context)
	}

	mu        sync.Mutex
	status    Status
	counts    Counts
	completed time.Time // of the last poll that did not stall (or the start)
	stuck     time.Duration
	judged    *judgement // the last bytes read and gated, and the verdict
	failure   Failure    // of the last poll, while no later one succeeded
	polled    chan struct{}
	polled1   sync.Once
}

// FailureKind is how far the last failed poll got: what to look at.
type FailureKind int

const (
	// NoFailure: no poll has failed since the last one that succeeded.
	NoFailure FailureKind = iota
	// FailedDownload: the server could not be reached, answered an error,
	// or the download stalled.
	FailedDownload
	// FailedSignature: the bundle's signatures are missing or do not
	// verify with the verification key (the bundle reads without it).
	FailedSignature
	// FailedRead: the bundle does not read, key or no key.
	FailedRead
	// FailedGate: the bundle read and verified, and the gate refused its
	// revision.
	FailedGate
)

// Failure is what the last poll failed on, when it did.
type Failure struct {
	Kind FailureKind
	Err  error
}

// judgement is the verdict on one download, kept so that the same bytes
// downloaded again (from a server without ETags) are not judged again:
// err nil, activated; else refused, at read or by the gate, for good (a
// gate that did not finish is not remembered).
type judgement struct {
	sum      [sha256.Size]byte
	revision string
	err      error
}

// Counts are the totals a Source exports as metrics.
type Counts struct {
	Requests, NotModified, Loaded                   uint64
	DownloadFailed, Stalled, ReadFailed, GateFailed uint64
	// Unchanged counts downloads whose bytes were those last judged: they
	// were neither read nor gated again.
	Unchanged uint64
}

// NewSource checks cfg and prepares the downloader; Start begins polling.
func NewSource(cfg SourceConfig, activate func(context.Context, *Revision) (*engine.Snapshot, error)) (*Source, error) {
	cfg.Name = cmp.Or(cfg.Name, DefaultName)
	cfg.Logger = cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	// The URL may be signed in its query (a presigned S3 URL, a token):
	// every line of this source, OPA's downloader's too, hides it.
	cfg.Logger = redact.Logger(cfg.Logger, cfg.URL)
	cfg.Limits = cmp.Or(cfg.Limits, DefaultLimits)
	cfg.DownloadTimeout = defaults.Positive(cfg.DownloadTimeout, DefaultDownloadTimeout)
	cfg.StallTimeout = defaults.Positive(cfg.StallTimeout, DefaultStallTimeout)
	vc, err := cfg.Keys.VerificationConfig()
	if err != nil {
		return nil, err
	}
	service, path, oci, err := splitURL(cfg.URL)
	if err != nil {
		return nil, err
	}
	restCfg := map[string]any{"url": service, "credentials": map[string]any{"plugin": "arbiter"}}
	if oci {
		restCfg["type"] = "oci"
	}
	rc, _ := json.Marshal(restCfg)
	olog := opalog.New(cfg.Logger.With("bundle", cfg.Name))
	g := &guard{vc: vc, lim: cfg.Limits, timeout: cfg.DownloadTimeout + cfg.LongPoll, stall: cfg.StallTimeout}
	client, err := rest.New(rc, nil, rest.Logger(olog), rest.Name(cfg.Name),
		rest.AuthPluginLookup(func(string) rest.HTTPAuthPlugin { return g }))
	if err != nil {
		return nil, fmt.Errorf("bundle service %s: %w", service, err)
	}
	dcfg, err := pollingConfig(cfg)
	if err != nil {
		return nil, err
	}
	s := &Source{polled: make(chan struct{}), g: g, cfg: cfg, log: cfg.Logger, activate: activate,
		stuck: g.timeout + 3*time.Duration(*dcfg.Polling.MaxDelaySeconds)*time.Second}
	s.status.Name, s.status.URL, s.status.Type = cfg.Name, redact.URL(cfg.URL), "snapshot"
	if oci {
		s.dl = download.NewOCI(dcfg, client, path, "").
			WithCallback(s.onUpdate).
			WithBundleVerificationConfig(vc).
			WithSizeLimitBytes(DefaultMaxFileBytes).
			WithBundlePersistence(true)
	} else {
		s.dl = download.New(dcfg, client, path).
			WithCallback(s.onUpdate).
			WithBundleVerificationConfig(vc).
			WithSizeLimitBytes(DefaultMaxFileBytes).
			WithBundleName(cfg.Name).
			WithBundlePersistence(true) // keeps the tarball: the schemas and tests ride in it
	}
	return s, nil
}

// splitURL turns a --bundle-url into OPA's service URL and resource path.
func splitURL(raw string) (service, path string, oci bool, err error) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "", "", false, fmt.Errorf("bundle URL %s: want http(s)://HOST/PATH, oci://HOST/REPO:TAG or oci+http://HOST/REPO:TAG", redact.URL(raw))
	}
	switch u.Scheme {
	case "http", "https":
		if u.User != nil {
			return "", "", false, errors.New("bundle URL: credentials in the URL would be logged; use a service config")
		}
		path = u.EscapedPath()
		if u.RawQuery != "" {
			path += "?" + u.RawQuery
		}
		return u.Scheme + "://" + u.Host, path, false, nil
	case "oci", "oci+http":
		scheme := "https"
		if u.Scheme == "oci+http" {
			scheme = "http"
		}
		ref := strings.TrimPrefix(u.Path, "/")
		if ref == "" || !strings.Contains(ref, ":") && !strings.Contains(ref, "@") {
			return "", "", false, fmt.Errorf("bundle URL %s: an OCI reference names a tag or digest (REPO:TAG)", redact.URL(raw))
		}
		return scheme + "://" + u.Host, u.Host + "/" + ref, true, nil
	default:
		return "", "", false, fmt.Errorf("bundle URL %s: unsupported scheme %q", redact.URL(raw), u.Scheme)
	}
}

func pollingConfig(cfg SourceConfig) (download.Config, error) {
	secs := func(d time.Duration) *int64 {
		s := max(1, int64((d+time.Second-1)/time.Second))
		return &s
	}
	min, max := defaults.Positive(cfg.MinDelay, 10*time.Second), cfg.MaxDelay
	if max < min {
		max = 2 * min
	}
	trigger := plugins.TriggerPeriodic
	dcfg := download.Config{Trigger: &trigger, Polling: download.PollingConfig{MinDelaySeconds: secs(min), MaxDelaySeconds: secs(max)}}
	if cfg.LongPoll > 0 {
		dcfg.Polling.LongPollingTimeoutSeconds = secs(cfg.LongPoll)
	}
	return dcfg, dcfg.ValidateAndInjectDefaults()
}

// Start begins polling; the first request goes out at once.
func (s *Source) Start(ctx context.Context) {
	s.mu.Lock()
	s.completed = time.Now()
	s.mu.Unlock()
	s.dl.Start(ctx)
}

// Stuck reports a source whose polls have all stalled, or not returned, for
// longer than three polls may take (three longest delays and one whole
// download).
func (s *Source) Stuck(now time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.completed.IsZero() || now.Sub(s.completed) <= s.stuck {
		return nil
	}
	return fmt.Errorf("bundle %s: no poll has completed for %s", s.cfg.Name, now.Sub(s.completed).Round(time.Second))
}

// Stop ends polling and waits for a poll in flight; of a Source never
// started it does nothing (OPA's downloader would wait for a loop that
// never ran).
func (s *Source) Stop(ctx context.Context) {
	s.mu.Lock()
	started := !s.completed.IsZero() // Start sets it
	s.mu.Unlock()
	if started {
		s.dl.Stop(ctx)
	}
}

// Status returns a copy of the bundle's status, its URL and the message
// of a failed poll (Go's HTTP errors quote the URL) redacted.
func (s *Source) Status() Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.status
	st.Message = redact.In(st.Message, s.cfg.URL)
	st.Errors = append([]error(nil), st.Errors...)
	return st
}

// Polled is closed once the first poll has ended, whatever its outcome.
func (s *Source) Polled() <-chan struct{} { return s.polled }

// Failure is what the last poll failed on (Kind NoFailure when none has
// failed since one succeeded). A poll that found the bundle unchanged
// leaves it as it was.
func (s *Source) Failure() Failure {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.failure
	if f.Err != nil {
		f.Err = errors.New(redact.In(f.Err.Error(), s.cfg.URL)) // Go's HTTP errors quote the URL
	}
	return f
}

// Counts returns the totals so far.
func (s *Source) Counts() Counts {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.counts
}

// onUpdate is the downloader's callback, called once per poll. The lock is
// not held while a candidate is read and gated, so /v1/status never waits
// for a gate. A refusal returns nil, as a poll that found nothing new does:
// the downloader then waits the poll delay, where an error would make it
// retry within 100 ms (its backoff after a failed download) and the same
// bundle would be refused again. A download whose bytes are those last
// judged (a server without ETags answers each poll with the whole bundle)
// is not judged again.
func (s *Source) onUpdate(ctx context.Context, u download.Update) error {
	defer s.polled1.Do(func() { close(s.polled) })
	arrived := s.g.arrived.Swap(nil) // this poll's bundle body, if one arrived whole
	s.mu.Lock()
	s.counts.Requests++
	s.status.SetRequest()
	if u.Metrics != nil {
		s.status.Metrics = u.Metrics
	}
	if errors.Is(u.Error, ErrStalled) {
		s.counts.Stalled++
		s.status.SetError(u.Error)
		s.failure = Failure{FailedDownload, u.Error}
		s.mu.Unlock()
		s.log.Error("bundle download stalled and was cut off; the active revision keeps serving", "bundle", s.cfg.Name, "err", u.Error)
		return nil
	}
	s.completed = time.Now()
	if u.Error != nil {
		s.counts.DownloadFailed++
		s.status.SetError(u.Error)
		s.failure = Failure{failedKind(u.Error, arrived), u.Error}
		s.mu.Unlock()
		s.log.Warn("bundle download failed; the active revision keeps serving", "bundle", s.cfg.Name, "err", u.Error)
		return nil // the downloader backs off by itself
	}
	s.status.LastSuccessfulRequest = s.status.LastRequest
	if u.Bundle == nil { // 304, or the OCI digest we already have
		s.counts.NotModified++
		s.status.ETag = cmp.Or(u.ETag, s.status.ETag)
		s.mu.Unlock()
		return nil
	}
	s.status.SetDownloadSuccess()
	s.status.SetBundleSize(u.Size)
	s.status.ETag = u.ETag
	raw, err := readRaw(u.Raw)
	sum := sha256.Sum256(raw)
	if j := s.judged; err == nil && j != nil && j.sum == sum {
		s.counts.Unchanged++
		s.mu.Unlock()
		s.log.Debug("bundle unchanged: the same bytes as the last one judged, not judged again", "bundle", s.cfg.Name, "revision", j.revision, "refused", j.err != nil)
		return nil
	}
	replaced := s.status.ActiveRevision
	s.mu.Unlock()

	var rev *Revision
	if err == nil {
		rev, err = Read(raw, s.g.vc, s.cfg.Name)
	}
	if err != nil {
		kind := failedKind(err, &raw)
		s.mu.Lock()
		s.counts.ReadFailed++
		s.status.SetError(err)
		s.judged = &judgement{sum: sum, err: err}
		s.failure = Failure{kind, err}
		s.mu.Unlock()
		s.log.Error("bundle refused: it does not read or verify; the active revision keeps serving", "bundle", s.cfg.Name, "etag", u.ETag, "err", err)
		return nil
	}
	snap, err := s.activate(ctx, rev)
	s.mu.Lock()
	defer s.mu.Unlock()
	revision := rev.Manifest.Revision
	if err != nil {
		s.counts.GateFailed++
		s.setProblems(err)
		s.failure = Failure{FailedGate, err}
		if le := (*engine.LoadError)(nil); !errors.As(err, &le) || !le.Abandoned {
			s.judged = &judgement{sum: sum, revision: revision, err: err}
		} else {
			s.judged = nil
		}
		s.log.Error("bundle refused by the gate; the active revision keeps serving", "bundle", s.cfg.Name, "revision", revision, "etag", u.ETag, "err", err)
		return nil
	}
	s.judged = &judgement{sum: sum, revision: revision}
	s.counts.Loaded++
	s.failure = Failure{}
	changed := replaced != revision || s.status.ContentHash != snap.Hash
	s.status.SetError(nil)
	s.status.SetActivateSuccess(revision)
	s.status.ContentHash, s.status.Signed = snap.Hash, rev.Signed
	if !changed {
		s.log.Debug("bundle unchanged: the active revision, with the same content", "bundle", s.cfg.Name, "revision", revision, "etag", u.ETag)
		return nil
	}
	s.log.Info("bundle activated", "bundle", s.cfg.Name, "revision", revision, "replaced", cmp.Or(replaced, "(none)"), "etag", u.ETag, "signed", rev.Signed, "size", u.Size)
	return nil
}

// failedKind is what a poll that ended in err failed on. A bundle that
// arrived whole (arrived, nil when none did) and was refused as it was read
// failed on its signature when it reads with its signatures unchecked:
// the key (or its absence) is what refuses it.
func failedKind(err error, arrived *[]byte) FailureKind {
	switch {
	case errors.As(err, new(signatureError)): // refused by the scan, as it arrived
		return FailedSignature
	case arrived == nil:
		return FailedDownload
	}
	if _, rerr := read(*arrived, nil, true, ""); rerr == nil {
		return FailedSignature
	}
	return FailedRead
}

// setProblems reports a refused candidate as OPA reports a bundle that
// does not compile: code bundle_error, one error per problem.
func (s *Source) setProblems(err error) {
	s.status.SetError(err)
	var le *engine.LoadError
	if errors.As(err, &le) {
		s.status.Message = fmt.Sprintf("the candidate revision was refused: %d problem(s)", len(le.Problems))
		s.status.Errors = make([]error, len(le.Problems))
		for i, p := range le.Problems {
			s.status.Errors[i] = problemError{p}
		}
	}
}

// problemError is an engine.Problem as an error that encodes as the
// problem itself ({"file", "line", "message"}).
type problemError struct{ engine.Problem }

func (p problemError) Error() string { return p.String() }

func readRaw(r io.Reader) ([]byte, error) {
	if r == nil {
		return nil, errors.New("the downloader kept no bundle bytes")
	}
	if b, ok := r.(*bytes.Buffer); ok {
		return b.Bytes(), nil
	}
	return io.ReadAll(io.LimitReader(r, 1<<30))
}
