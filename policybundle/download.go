package policybundle

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/open-policy-agent/opa/v1/bundle"
	"github.com/open-policy-agent/opa/v1/plugins/rest"
)

// ErrStalled is the error of a download that missed its deadline or its
// minimum rate.
var ErrStalled = errors.New("bundle download stalled")

// stallBytes is the progress that extends a download's stall timeout: its
// minimum rate is stallBytes per StallTimeout.
const stallBytes = 1 << 10

// Default deadlines of one download (SourceConfig leaves them zero).
const (
	DefaultDownloadTimeout = time.Minute
	DefaultStallTimeout    = 10 * time.Second
)

// guard is OPA's HTTP client for a bundle service with every response read
// whole under a deadline and a minimum rate, bounded in size, and a gzip
// body (the bundle: over HTTP, or the OCI layer) scanned within the limits
// before OPA's reader sees it. It plugs in as OPA's custom credentials
// plugin, the one hook both of OPA's downloaders take.
type guard struct {
	vc             *bundle.VerificationConfig
	lim            Limits
	timeout, stall time.Duration
	// arrived is the last bundle body that passed the scan, until the
	// poll's callback takes it: when OPA's reader then refuses it, whether
	// it reads without its signatures checked tells the key's fault from
	// the bundle's (Source.Failure).
	arrived atomic.Pointer[[]byte]
}

func (g *guard) NewClient(c rest.Config) (*http.Client, error) {
	c.Credentials.Plugin = nil
	plain, err := c.AuthPlugin(nil) // OPA's client without credentials
	if err != nil {
		return nil, err
	}
	hc, err := plain.NewClient(c)
	if err != nil {
		return nil, err
	}
	hc.Transport = guardTransport{g, hc.Transport}
	return hc, nil
}

func (*guard) Prepare(*http.Request) error { return nil }

type guardTransport struct {
	*guard
	base http.RoundTripper
}

func (g guardTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx, cancel := context.WithCancelCause(req.Context())
	defer cancel(nil)
	deadline := time.AfterFunc(g.timeout, func() {
		cancel(fmt.Errorf("%w: not complete within %s", ErrStalled, g.timeout))
	})
	defer deadline.Stop()
	resp, err := g.base.RoundTrip(req.WithContext(ctx))
	if err != nil {
		return nil, cause(ctx, err)
	}
	defer resp.Body.Close()
	raw, err := g.read(ctx, cancel, resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode == http.StatusOK && bytes.HasPrefix(raw, []byte{0x1f, 0x8b}) {
		if err := scan(raw, g.vc, g.lim); err != nil {
			return nil, err
		}
		g.arrived.Store(&raw)
	}
	resp.Body = io.NopCloser(bytes.NewReader(raw)) // ContentLength stays: a HEAD answer carries one without a body
	return resp, nil
}

// read reads body whole, at most lim.Bytes, failing the request when
// stallBytes do not arrive within the stall timeout.
func (g guardTransport) read(ctx context.Context, cancel context.CancelCauseFunc, body io.Reader) ([]byte, error) {
	stall := time.AfterFunc(g.stall, func() {
		cancel(fmt.Errorf("%w: fewer than %d bytes in %s", ErrStalled, stallBytes, g.stall))
	})
	defer stall.Stop()
	var buf bytes.Buffer
	chunk := make([]byte, 32<<10)
	progress := 0
	for {
		n, err := body.Read(chunk)
		buf.Write(chunk[:n])
		if int64(buf.Len()) > g.lim.Bytes {
			return nil, fmt.Errorf("bundle download refused: larger than %d bytes", g.lim.Bytes)
		}
		if progress += n; progress >= stallBytes {
			progress = 0
			stall.Reset(g.stall)
		}
		if err == io.EOF {
			return buf.Bytes(), nil
		}
		if err != nil {
			return nil, cause(ctx, err)
		}
	}
}

// cause is the reason ctx was cancelled, when it was, else err.
func cause(ctx context.Context, err error) error {
	if c := context.Cause(ctx); c != nil && ctx.Err() != nil {
		return c
	}
	return err
}
