package server

import (
	"net"
	"net/http"
	"sync"
	"time"
)

// ConnLimiter caps the connections a server holds open, so that idle
// keep-alive sockets can never take every file descriptor of the process
// (117 idle sockets exhausted a 128-descriptor process, and the accept loop
// then spins on EMFILE while reloads cannot open a file). At the cap it
// closes the connection idle the longest to make room; when none is idle,
// the new connection waits for one to close, and later ones wait in the
// kernel's backlog.
//
// Use Listener on the server's listener and ConnState as the server's
// ConnState hook (it also sees connections wrapped in TLS).
type ConnLimiter struct {
	slots chan struct{}
	mu    sync.Mutex
	idle  map[*limitedConn]time.Time
}

// NewConnLimiter returns a limiter of max open connections.
func NewConnLimiter(max int) *ConnLimiter {
	return &ConnLimiter{slots: make(chan struct{}, max), idle: map[*limitedConn]time.Time{}}
}

// Listener returns ln with Accept held to the cap.
func (l *ConnLimiter) Listener(ln net.Listener) net.Listener {
	return &limitedListener{Listener: ln, l: l, closed: make(chan struct{})}
}

// ConnState tracks which connections are idle between requests.
func (l *ConnLimiter) ConnState(c net.Conn, st http.ConnState) {
	for {
		if lc, ok := c.(*limitedConn); ok {
			l.mu.Lock()
			if st == http.StateIdle {
				l.idle[lc] = time.Now()
			} else {
				delete(l.idle, lc)
			}
			l.mu.Unlock()
			return
		}
		u, ok := c.(interface{ NetConn() net.Conn }) // *tls.Conn
		if !ok {
			return
		}
		c = u.NetConn()
	}
}

// evictIdle closes the connection idle the longest, if any.
func (l *ConnLimiter) evictIdle() {
	l.mu.Lock()
	var oldest *limitedConn
	var since time.Time
	for c, t := range l.idle {
		if oldest == nil || t.Before(since) {
			oldest, since = c, t
		}
	}
	if oldest != nil {
		delete(l.idle, oldest)
	}
	l.mu.Unlock()
	if oldest != nil {
		_ = oldest.Close()
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
	// then is an idle one worth closing. At most one connection over the cap
	// is open at a time (this one, while it waits for its slot).
	c, err := ll.Listener.Accept()
	if err != nil {
		return nil, err
	}
	select {
	case ll.l.slots <- struct{}{}:
	default:
		ll.l.evictIdle()
		select {
		case ll.l.slots <- struct{}{}:
		case <-ll.closed:
			_ = c.Close()
			return nil, net.ErrClosed
		}
	}
	return &limitedConn{Conn: c, l: ll.l}, nil
}

func (ll *limitedListener) Close() error {
	ll.closeOnce.Do(func() { close(ll.closed) })
	return ll.Listener.Close()
}

type limitedConn struct {
	net.Conn
	l    *ConnLimiter
	once sync.Once
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.l.mu.Lock()
		delete(c.l.idle, c)
		c.l.mu.Unlock()
		<-c.l.slots
	})
	return err
}
