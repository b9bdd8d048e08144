package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/arbiter-dev/arbiter/decisionlog"
	"github.com/arbiter-dev/arbiter/engine"
	"github.com/arbiter-dev/arbiter/internal/ruleedit"
)

// quickArgs serves a copy of the repository's folders without the reload
// gate (the policy tests run elsewhere): the server is up in a tenth of a
// second instead of one and a half. The decision log goes to a temporary file.
func quickArgs(t *testing.T) (args []string, logPath string) {
	t.Helper()
	logPath = filepath.Join(t.TempDir(), "decisions.log")
	return append(folderArgs(copyRepo(t)), "--tests", "", "--decision-log", logPath), logPath
}

// decidedFixture is the first repository fixture that records a result: a
// correct answer to it is a decision that a broken server is unlikely to
// produce by chance. Which decision and case it is, the fixtures say.
func decidedFixture(t *testing.T) engine.Fixture {
	t.Helper()
	fixtures, err := engine.LoadFixtures(filepath.Join("..", "..", "policy_test"))
	if err != nil {
		t.Fatal(err)
	}
	for _, fx := range fixtures {
		if fx.Input != nil && fx.WantResult != nil {
			return fx
		}
	}
	t.Fatal("no fixture records a result")
	return engine.Fixture{}
}

// tryFixture posts fx and returns the answer, and what is wrong with it
// when it is a decision that fx does not want ("" otherwise). It never
// fails the test itself, so goroutines may call it.
func tryFixture(client *http.Client, url string, fx engine.Fixture, header ...string) (answer, string, error) {
	req, err := http.NewRequest("POST", url+"/v1/decisions/"+fx.Decision, bytes.NewReader(fx.RequestBody()))
	if err != nil {
		return answer{}, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		return answer{}, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return answer{}, "", err
	}
	a := answer{status: resp.StatusCode, id: resp.Header.Get("X-Arbiter-Decision-Id"), body: b}
	if a.status != http.StatusOK {
		return a, "", nil
	}
	var env struct {
		Result json.RawMessage `json:"result"`
	}
	if err := json.Unmarshal(b, &env); err != nil {
		return a, fmt.Sprintf("200 without an envelope: %s", b), nil
	}
	return a, engine.CheckOutcome(fx, &engine.Decision{Result: env.Result}, nil), nil
}

// decideFixture is tryFixture for the test goroutine: a transport error or a
// wrong decision fails the test.
func decideFixture(t *testing.T, client *http.Client, url string, fx engine.Fixture, header ...string) answer {
	t.Helper()
	a, wrong, err := tryFixture(client, url, fx, header...)
	if err != nil {
		t.Fatalf("POST %s: %v", fx.Name, err)
	}
	if wrong != "" {
		t.Fatalf("%s: %s", fx.Name, wrong)
	}
	return a
}

// TestTrickledBodyIsCutOff sends a request body one byte every 100 ms over
// a raw connection: the server's read timeout (2 s here) must cut it off,
// without a decision and with request_timeout (408), logged without its
// partial body, while the server keeps answering other requests.
func TestTrickledBodyIsCutOff(t *testing.T) {
	ruleedit.Skip(t)
	t.Parallel()
	const readTimeout = 2 * time.Second
	args, logPath := quickArgs(t)
	srv := startServer(t, append(args, "--read-timeout", readTimeout.String())...)
	fx := decidedFixture(t)
	body := fx.RequestBody()

	conn, err := net.Dial("tcp", strings.TrimPrefix(srv.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	start := time.Now()
	fmt.Fprintf(conn, "POST /v1/decisions/"+fx.Decision+" HTTP/1.1\r\nHost: arbiter\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", len(body))

	var sent atomic.Int64
	var answered atomic.Int64 // other answers while the trickled request was open
	var cutOff atomic.Bool
	otherAnswered := make(chan struct{}) // closed at the first other answer
	writerDone := make(chan error, 1)
	go func() {
		for i, c := range body {
			if _, err := conn.Write([]byte{c}); err != nil {
				writerDone <- err
				return
			}
			sent.Add(1)
			if i == 0 {
				// The trickled request is open: it goes on only once
				// another caller has been answered meanwhile.
				<-otherAnswered
			}
			time.Sleep(100 * time.Millisecond)
		}
		writerDone <- nil
	}()

	// Meanwhile, other callers are answered as usual.
	readerDone := make(chan struct{})
	otherDone := make(chan struct{})
	go func() {
		defer close(otherDone)
		client := &http.Client{Timeout: 5 * time.Second}
		for {
			select {
			case <-readerDone:
				return
			default:
			}
			a, wrong, err := tryFixture(client, srv.url, fx)
			if err != nil || a.status != http.StatusOK || wrong != "" {
				t.Errorf("another caller during the trickle: %v %d %s %s", err, a.status, a.body, wrong)
				return
			}
			if cutOff.Load() {
				continue
			}
			if answered.Add(1) == 1 {
				close(otherAnswered)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()

	// The server either answers the trickled request with an error and
	// closes, or just closes: in no case does it decide. The test waits for
	// that event; the read deadlines below are hang guards only (the read
	// timeout plus a wide margin), never a measure of how fast it happens.
	const hangGuard = readTimeout + time.Minute
	_ = conn.SetReadDeadline(time.Now().Add(hangGuard))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	cutOff.Store(true)
	cut := time.Since(start)
	close(readerDone)
	<-otherDone
	switch {
	case err == nil:
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Fatalf("the trickled request was decided: %s", b)
		}
		var doc engine.Document
		if json.Unmarshal(b, &doc) != nil || doc.Error.Code != "request_timeout" || resp.StatusCode != http.StatusRequestTimeout {
			t.Errorf("answer to the trickled request: %d %s", resp.StatusCode, b)
		}
		// After an answer to an unread body the server closes the
		// connection: the read returns EOF or a reset, and no byte.
		_ = conn.SetReadDeadline(time.Now().Add(hangGuard))
		if n, err := conn.Read(make([]byte, 1)); err == nil || isTimeout(err) {
			t.Errorf("the connection stayed open after the 408 answer (read %d bytes, %v; hang guard %s)", n, err, hangGuard)
		}
	case isTimeout(err):
		t.Fatalf("the server neither answered nor closed the trickled request (hang guard %s)", hangGuard)
	default:
		// Connection closed or reset without an answer: cut off too.
	}
	if n := sent.Load(); n >= int64(len(body)) {
		t.Errorf("the whole body (%d bytes) went through", n)
	}
	if answered.Load() < 1 {
		t.Errorf("no other decision was answered while the trickled request was open")
	}
	t.Logf("cut off after %s and %d of %d bytes; %d other decisions meanwhile (%v)", cut.Round(time.Millisecond), sent.Load(), len(body), answered.Load(), err)

	// Still serving afterwards.
	if a := decideFixture(t, &http.Client{Timeout: 5 * time.Second}, srv.url, fx); a.status != http.StatusOK {
		t.Fatalf("after the trickle: %d %s", a.status, a.body)
	}
	srv.stop(t)
	var cutRecs []decisionlog.Record
	for _, rec := range readDecisionLog(t, logPath) {
		if rec.Error != nil {
			cutRecs = append(cutRecs, rec)
		}
	}
	if len(cutRecs) != 1 || cutRecs[0].Error.Code != "request_timeout" || cutRecs[0].Input != nil || cutRecs[0].BodyBase64 != "" || cutRecs[0].BodySize <= 0 || cutRecs[0].BodySize >= int64(len(body)) {
		t.Errorf("records of the cut-off request: %+v, want one request_timeout with the size received and no body", cutRecs)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// trickle opens a connection that sends headStart bytes at once and then
// one more every 100 ms: of the headers of a request (an endless header
// line) or, after whole headers, of its body. The channel receives once the
// server closes the connection: nil, or what is wrong with how it ended (a
// decision, or the hang guard passed).
func trickle(t *testing.T, url, decision string, body bool, headStart int) <-chan error {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	ended := make(chan error, 1)
	t.Cleanup(func() { conn.Close() })
	head := "POST /v1/decisions/" + decision + " HTTP/1.1\r\nHost: arbiter\r\nContent-Type: application/json\r\n"
	if body {
		head += fmt.Sprintf("Content-Length: %d\r\n\r\n", headStart+1<<20)
	} else {
		head += "X-Pad: "
	}
	if headStart == 0 && !body {
		head = head[:1] // a trickle from the request's first byte
	}
	if _, err := io.WriteString(conn, head+strings.Repeat(" ", headStart)); err != nil {
		t.Fatal(err)
	}
	go func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for range tick.C {
			if _, err := conn.Write([]byte{' '}); err != nil {
				return
			}
		}
	}()
	go func() {
		_ = conn.SetReadDeadline(time.Now().Add(time.Minute)) // hang guard: the server's own deadlines are 10 minutes
		b, err := io.ReadAll(conn)
		switch {
		case isTimeout(err):
			ended <- fmt.Errorf("still open after the hang guard (read %q)", b)
		case bytes.HasPrefix(b, []byte("HTTP/1.1 200")):
			ended <- fmt.Errorf("decided: %q", b)
		default:
			ended <- nil // closed, reset, or answered with an error
		}
	}()
	return ended
}

// TestSlowConnectionsCannotLockOut is issue 18's lockout: with the
// connection cap full of clients sending their headers or a body a byte at
// a time, a new client is still answered, because at the cap the
// connection furthest behind --min-body-rate is closed to make room. The
// server's own deadlines are 10 minutes here, so only that can make room
// within the tests' hang guards. Attackers that reopen their connections
// (with a head start, so that they are not yet behind) close the older
// ones; a caller is answered each time.
func TestSlowConnectionsCannotLockOut(t *testing.T) {
	ruleedit.Skip(t)
	t.Parallel()
	const maxConns = 4
	args, _ := quickArgs(t)
	srv := startServer(t, append(args, "--max-connections", strconv.Itoa(maxConns), "--min-body-rate", "100",
		"--read-header-timeout", "10m", "--read-timeout", "10m", "--request-timeout", "10m")...)
	fx := decidedFixture(t)
	var first []<-chan error
	for i := range maxConns {
		first = append(first, trickle(t, srv.url, fx.Decision, i%2 == 0, 0))
	}
	client := &http.Client{Timeout: time.Minute, Transport: &http.Transport{DisableKeepAlives: true}}
	for i := range maxConns {
		if a := decideFixture(t, client, srv.url, fx); a.status != http.StatusOK {
			t.Fatalf("caller %d beside %d slow connections: %d %s", i, maxConns, a.status, a.body)
		}
		// 3000 bytes ahead of 100 bytes/s: not behind for 30 s.
		trickle(t, srv.url, fx.Decision, i%2 == 0, 3000)
	}
	// The reopened connections hold every slot: the first ones are closed.
	for i, ended := range first {
		if err := <-ended; err != nil {
			t.Errorf("slow connection %d: %v", i, err)
		}
	}
}

// TestSlowBodyIsCutOffAtMinRate: without pressure on the cap, a body
// trickled below --min-body-rate, and headers trickled, are cut off once
// --read-header-timeout has passed, not at --read-timeout (10 minutes here,
// beyond the hang guard).
func TestSlowBodyIsCutOffAtMinRate(t *testing.T) {
	ruleedit.Skip(t)
	t.Parallel()
	args, _ := quickArgs(t)
	srv := startServer(t, append(args, "--min-body-rate", "100", "--read-header-timeout", "1s",
		"--read-timeout", "10m", "--request-timeout", "10m")...)
	fx := decidedFixture(t)
	for _, body := range []bool{true, false} {
		if err := <-trickle(t, srv.url, fx.Decision, body, 0); err != nil {
			t.Errorf("trickled (body %v): %v", body, err)
		}
	}
	if a := decideFixture(t, &http.Client{Timeout: time.Minute}, srv.url, fx); a.status != http.StatusOK {
		t.Fatalf("after the trickles: %d %s", a.status, a.body)
	}
}
