package server

import (
	"context"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// ConnLimiter caps the connections a server holds open, so that idle
// keep-alive sockets can never take every file descriptor of the process
// (117 idle sockets exhausted a 128-descriptor process, and the accept loop
// then spins on EMFILE while reloads cannot open a file). At the cap it
// closes the connection idle the longest to make room; when none is idle,
// the slowest of the connections that are still sending their headers or a
// request body below the minimum rate (64 bodies trickled a byte every few
// seconds locked every other client out); when none is either, the new
// connection waits, and later ones wait in the kernel's backlog.
//
// Use Listener on the server's listener, ConnState as the server's
// ConnState hook and ConnContext as its ConnContext hook (both also see
// connections wrapped in TLS); the handler of New marks the bodies being
// read.
type ConnLimiter struct {
	slots chan struct{}
	rate  int64 // bytes per second below which a connection is slow
	mu    sync.Mutex
	idle  map[*limitedConn]time.Time
	// sending holds the connections waiting for their client's bytes (the
	// headers of a first request, or a body) and their progress.
	sending map[*limitedConn]progress
}

// progress is what a sender has sent since a time: read less what it had
// read then.
type progress struct {
	since time.Time
	read  *atomic.Int64
	base  int64
}

// slowBehind is how far behind the minimum rate a sender must be to be
// closed at the cap: far beyond the jitter of a network, and of a
// connection accepted before its first bytes are read.
const slowBehind = time.Second

// evictRetry is how often a connection waiting at the cap looks again for
// one to close: a sender becomes slow as time passes.
const evictRetry = 100 * time.Millisecond

// NewConnLimiter returns a limiter of max open connections, where a
// connection sending its headers or a body below minRate bytes per second
// may be closed to make room.
func NewConnLimiter(max int, minRate int64) *ConnLimiter {
	return &ConnLimiter{slots: make(chan struct{}, max), rate: minRate, idle: map[*limitedConn]time.Time{}, sending: map[*limitedConn]progress{}}
}

// Listener returns ln with Accept held to the cap.
func (l *ConnLimiter) Listener(ln net.Listener) net.Listener {
	return &limitedListener{Listener: ln, l: l, closed: make(chan struct{})}
}

// ConnState tracks which connections are idle between requests and which
// are still sending the headers of their first request.
func (l *ConnLimiter) ConnState(c net.Conn, st http.ConnState) {
	lc := limited(c)
	if lc == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.idle, lc)
	delete(l.sending, lc)
	switch st {
	case http.StateNew:
		l.sending[lc] = progress{time.Now(), &lc.read, lc.read.Load()}
	case http.StateIdle:
		l.idle[lc] = time.Now()
	}
}

type connKey struct{}

// ConnContext puts the connection in the context of its requests, for the
// handler to say when a body is being read.
func (l *ConnLimiter) ConnContext(ctx context.Context, c net.Conn) context.Context {
	if lc := limited(c); lc != nil {
		return context.WithValue(ctx, connKey{}, lc)
	}
	return ctx
}

// limited finds the limitedConn under c, which may be wrapped in TLS.
func limited(c net.Conn) *limitedConn {
	for {
		if lc, ok := c.(*limitedConn); ok {
			return lc
		}
		u, ok := c.(interface{ NetConn() net.Conn }) // *tls.Conn
		if !ok {
			return nil
		}
		c = u.NetConn()
	}
}

// sendingBody marks the connection of ctx, if any, as sending a body
// whose bytes read counts, or (read nil) as done with it. The body's own
// count, not the connection's: net/http reads the first bytes of a body
// with the headers.
func sendingBody(ctx context.Context, read *atomic.Int64) {
	lc, ok := ctx.Value(connKey{}).(*limitedConn)
	if !ok {
		return
	}
	lc.l.mu.Lock()
	if read != nil {
		lc.l.sending[lc] = progress{time.Now(), read, 0}
	} else {
		delete(lc.l.sending, lc)
	}
	lc.l.mu.Unlock()
}

// evict closes the connection idle the longest, or else the sender
// furthest behind the minimum rate, if any.
func (l *ConnLimiter) evict() {
	l.mu.Lock()
	var victim *limitedConn
	var since time.Time
	for c, t := range l.idle {
		if victim == nil || t.Before(since) {
			victim, since = c, t
		}
	}
	if victim == nil && l.rate > 0 {
		now, worst := time.Now(), slowBehind
		for c, p := range l.sending {
			// How far behind the rate it is since its headers or its body
			// began: a new sender is not, a trickler more every second.
			sent := float64(p.read.Load()-p.base) / float64(l.rate)
			if behind := now.Sub(p.since) - time.Duration(sent*float64(time.Second)); behind > worst {
				victim, worst = c, behind
			}
		}
	}
	if victim != nil {
		delete(l.idle, victim)
		delete(l.sending, victim)
	}
	l.mu.Unlock()
	if victim != nil {
		_ = victim.Close()
	}
}

type limitedListener struct {
	net.Listener
	l         *ConnLimiter
	closeOnce sync.Once
	closed    chan struct{}
}

func (ll *limitedListener) Accept() (net.Conn, error) {
	// Accept first: a connection past the cap is a caller waiting, and only
	// then is another worth closing. At most one connection over the cap
	// is open at a time (this one, while it waits for its slot).
	c, err := ll.Listener.Accept()
	if err != nil {
		return nil, err
	}
	for {
		select {
		case ll.l.slots <- struct{}{}:
			return &limitedConn{Conn: c, l: ll.l}, nil
		default:
		}
		ll.l.evict()
		select {
		case ll.l.slots <- struct{}{}:
			return &limitedConn{Conn: c, l: ll.l}, nil
		case <-ll.closed:
			_ = c.Close()
			return nil, net.ErrClosed
		case <-time.After(evictRetry):
		}
	}
}

func (ll *limitedListener) Close() error {
	ll.closeOnce.Do(func() { close(ll.closed) })
	return ll.Listener.Close()
}

type limitedConn struct {
	net.Conn
	l    *ConnLimiter
	once sync.Once
	read atomic.Int64 // bytes read from the client
}

func (c *limitedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.read.Add(int64(n))
	return n, err
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.l.mu.Lock()
		delete(c.l.idle, c)
		delete(c.l.sending, c)
		c.l.mu.Unlock()
		<-c.l.slots
	})
	return err
}

// paceBodies holds every request body to the minimum rate: once
// Config.BodyGrace has passed, a body must have averaged Config.MinBodyRate
// bytes per second since the request began, or its read deadline passes.
// The deadline moves forward as bytes arrive, and never past
// Config.RequestTimeout from the start; a whole body lifts it. A body
// trickled a byte every few seconds is thus cut off after the grace instead
// of holding its connection, and its slot under the cap, for the whole
// request timeout.
func (s *server) paceBodies(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body != nil && r.Body != http.NoBody {
			start := time.Now()
			b := &pacedBody{ReadCloser: r.Body, ctx: r.Context(), rc: http.NewResponseController(w),
				rate: s.cfg.MinBodyRate, paced: start.Add(s.cfg.BodyGrace), limit: start.Add(s.cfg.RequestTimeout)}
			sendingBody(b.ctx, &b.n)
			_ = b.rc.SetReadDeadline(b.deadline())
			r.Body = b
		}
		next.ServeHTTP(w, r)
	})
}

type pacedBody struct {
	io.ReadCloser
	ctx          context.Context
	rc           *http.ResponseController
	rate         int64
	paced, limit time.Time // the grace's end; the request's deadline
	n            atomic.Int64
	done         bool
}

func (b *pacedBody) deadline() time.Time {
	if d := b.paced.Add(time.Duration(float64(b.n.Load()) / float64(b.rate) * float64(time.Second))); d.Before(b.limit) {
		return d
	}
	return b.limit
}

func (b *pacedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	switch {
	case b.done:
	case err != nil:
		// Whole or failed: the connection is no longer a sender. After a
		// whole body the only read is net/http's watch for the client
		// going away while the request runs: no deadline of the body's
		// must end that request (its context cancelled), only its own.
		b.done = true
		sendingBody(b.ctx, nil)
		if err == io.EOF {
			_ = b.rc.SetReadDeadline(time.Time{})
		}
	case n > 0:
		_ = b.rc.SetReadDeadline(b.deadline())
	}
	return n, err
}
