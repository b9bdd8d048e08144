// Package pgtest runs a throwaway PostgreSQL cluster for tests: initdb into
// a temporary folder, the server on a free loopback port (its socket in
// that folder), run as the postgres user when the test runs as root (the
// server refuses root), stopped by its process id. A package's tests share
// one cluster (Main, in TestMain) and take a fresh database each (DB); a
// test that stops the server (an outage) starts a cluster of its own
// (Start). When PostgreSQL is not installed the tests skip, except under
// CI=1, where they fail: CI installs it (.ci/run).
package pgtest

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/arbiter-dev/arbiter/internal/ruleedit"
	"github.com/jackc/pgx/v5"
)

// Cluster is one running (or stopped) PostgreSQL server and its data folder.
type Cluster struct {
	dir  string // data folder and socket folder, both inside it
	bin  string // folder of initdb and postgres
	Port int
	cred *syscall.Credential // nil: run as ourselves

	mu   sync.Mutex
	cmd  *exec.Cmd     // the postmaster, nil when stopped
	done chan struct{} // closed when it exits
}

var (
	dbSeq   atomic.Int64
	errMain error = errors.New("no pgtest.Main in TestMain")
)

// Bin finds the folder of PostgreSQL's server binaries: on PATH, or where
// Debian's postgresql package puts them (/usr/lib/postgresql/N/bin).
func Bin() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		if _, err := exec.LookPath("postgres"); err == nil {
			return filepath.Dir(p), nil
		}
	}
	found, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	if len(found) > 0 {
		return filepath.Dir(found[len(found)-1]), nil // the highest version
	}
	return "", errors.New("PostgreSQL's initdb is neither on PATH nor under /usr/lib/postgresql/*/bin (Debian: apt-get install postgresql)")
}

// Skip skips t when PostgreSQL is missing (why), or fails it under CI.
func Skip(t testing.TB, why error) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatalf("CI must run the PostgreSQL tests: %v", why)
	}
	t.Skipf("no PostgreSQL here: %v", why)
}

// Start initialises and starts a cluster of t's own, stopped and removed
// when t ends; it skips t when PostgreSQL is missing (fails under CI), and
// under -short (ruleedit).
func Start(t testing.TB) *Cluster {
	t.Helper()
	ruleedit.Skip(t) // the decision store is not about the rules
	c, err := New()
	if err != nil {
		if _, missing := errors.AsType[*missingError](err); missing {
			Skip(t, err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Remove(); err != nil {
			t.Errorf("pgtest: %v", err)
		}
	})
	return c
}

type missingError struct{ error }

// New initialises and starts a cluster in a new temporary folder; Remove
// stops it and removes the folder.
func New() (*Cluster, error) {
	bin, err := Bin()
	if err != nil {
		return nil, &missingError{err}
	}
	dir, err := os.MkdirTemp("", "pgtest-")
	if err != nil {
		return nil, err
	}
	c := &Cluster{dir: dir, bin: bin}
	if err := c.init(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	// A free port can be taken between choosing it and listening on it (by
	// another test process): a few tries.
	for try := 0; ; try++ {
		if c.Port, err = freePort(); err == nil {
			if err = c.Restart(); err == nil {
				return c, nil
			}
		}
		if try == 2 {
			os.RemoveAll(dir)
			return nil, err
		}
	}
}

func (c *Cluster) init() error {
	if os.Geteuid() == 0 { // the server refuses to run as root
		u, err := user.Lookup("postgres")
		if err != nil {
			return fmt.Errorf("pgtest: running as root, and no postgres user to run the server as: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		c.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(c.dir, uid, gid); err != nil {
			return err
		}
	}
	out, err := c.command("initdb", "-D", c.data(), "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8", "--locale=C").CombinedOutput()
	if err != nil {
		return fmt.Errorf("pgtest: initdb: %v\n%s", err, out)
	}
	return nil
}

func (c *Cluster) data() string { return filepath.Join(c.dir, "data") }

func (c *Cluster) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(c.bin, name), args...)
	cmd.Dir = c.dir
	if c.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	}
	return cmd
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Restart starts the server again on its port after Stop (New starts it).
// It returns once the server accepts connections.
func (c *Cluster) Restart() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cmd != nil {
		return errors.New("pgtest: the server is running")
	}
	logf, err := os.OpenFile(filepath.Join(c.dir, "server.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o666)
	if err != nil {
		return err
	}
	defer logf.Close()
	// Durability is not what these tests prove: no fsync, small memory, so
	// that the cluster is quick and light beside the other tests.
	cmd := c.command("postgres", "-D", c.data(), "-p", strconv.Itoa(c.Port),
		"-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories="+c.dir,
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
		"-c", "shared_buffers=32MB", "-c", "max_connections=100")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("pgtest: postgres: %w", err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	c.cmd, c.done = cmd, done
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		conn, err := pgx.Connect(ctx, c.URL("postgres"))
		if err == nil {
			conn.Close(ctx)
			return nil
		}
		select {
		case <-done:
			c.cmd = nil
			return fmt.Errorf("pgtest: postgres exited on start:\n%s", c.logTail())
		case <-ctx.Done():
			c.stopLocked()
			return fmt.Errorf("pgtest: postgres accepted no connection in 30s: %v\n%s", err, c.logTail())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (c *Cluster) logTail() string {
	b, _ := os.ReadFile(filepath.Join(c.dir, "server.log"))
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// Stop stops the server by its process id (a fast shutdown: connections
// are cut, as in an outage) and waits until it has exited.
func (c *Cluster) Stop() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stopLocked()
}

func (c *Cluster) stopLocked() error {
	if c.cmd == nil {
		return nil
	}
	// The postmaster's id is the first line of postmaster.pid, and is the
	// process this package started.
	if err := c.cmd.Process.Signal(syscall.SIGINT); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	select {
	case <-c.done:
	case <-time.After(30 * time.Second):
		c.cmd.Process.Kill()
		<-c.done
	}
	c.cmd = nil
	return nil
}

// Remove stops the server and removes its folder.
func (c *Cluster) Remove() error {
	return errors.Join(c.Stop(), os.RemoveAll(c.dir))
}

// URL is the connection URL of database db.
func (c *Cluster) URL(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", c.Port, db)
}

// DB creates a fresh database for t and returns its URL. A nil Cluster (Main
// found no PostgreSQL) skips t, or fails it under CI; -short skips it, as
// Start.
func (c *Cluster) DB(t testing.TB) string {
	t.Helper()
	ruleedit.Skip(t) // the decision store is not about the rules
	if c == nil {
		if _, missing := errors.AsType[*missingError](errMain); missing {
			Skip(t, errMain)
		}
		t.Fatalf("pgtest: the package's cluster did not start: %v", errMain)
	}
	name := fmt.Sprintf("t%d_%d", os.Getpid(), dbSeq.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return c.URL(name)
}

// Main runs a package's tests with one cluster shared by them in *c (nil
// when PostgreSQL is missing or did not start: DB then skips, or fails
// under CI), and removes it afterwards; under -short, where DB skips, it
// starts none unless benchmarks run. Use it in TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(pgtest.Main(m, &cluster)) }
func Main(m *testing.M, c **Cluster) int {
	flag.Parse()
	if testing.Short() && flag.Lookup("test.bench").Value.String() == "" {
		return m.Run()
	}
	cl, err := New()
	errMain = err
	if err != nil {
		fmt.Fprintln(os.Stderr, "pgtest:", strings.TrimSpace(err.Error()))
	}
	*c = cl
	code := m.Run()
	if cl != nil {
		if err := cl.Remove(); err != nil {
			fmt.Fprintln(os.Stderr, "pgtest:", err)
			if code == 0 {
				code = 1
			}
		}
	}
	return code
}
