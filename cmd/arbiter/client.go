package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/arbiter-dev/arbiter/engine"
	"github.com/arbiter-dev/arbiter/engine/live"
	"github.com/arbiter-dev/arbiter/shadow"
)

// exitRefused: a command for the running server got an error answer (its
// code and message are printed).
const exitRefused = 2

// defaultServer is where the commands for a running server find it: the
// address `arbiter serve` listens on by default.
const defaultServer = "http://127.0.0.1:8181"

// clientFlags are the flags of the commands that talk to a running server.
type clientFlags struct {
	server, token, caFile string
	format                *string
}

func (f *clientFlags) register(c *command) {
	c.StringVar(&f.server, "server", defaultServer, "the running arbiter serve: http(s)://HOST:PORT")
	c.StringVar(&f.token, "token", "", "bearer token for a server with --auth-token-file (prefer ARBITER_TOKEN: a flag shows in ps)")
	c.StringVar(&f.caFile, "tls-ca-file", "", "PEM CA certificates that verify an https server (default: the system's)")
	f.format = c.format("text", "text, or json (the server's answer as it is)")
	c.fromEnv("server", "token", "tls-ca-file")
}

// client is a command's connection to the running server.
type client struct {
	flags  *clientFlags
	name   string // the command, in messages
	http   *http.Client
	stdout io.Writer
	stderr io.Writer
}

func (f *clientFlags) client(name string, stdout, stderr io.Writer) (*client, error) {
	if !strings.HasPrefix(f.server, "http://") && !strings.HasPrefix(f.server, "https://") {
		return nil, fmt.Errorf("--server %q: want http(s)://HOST:PORT", f.server)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if f.caFile != "" {
		pem, err := os.ReadFile(f.caFile)
		if err != nil {
			return nil, err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--tls-ca-file %s: no PEM certificate", f.caFile)
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	return &client{flags: f, name: name, http: &http.Client{Transport: tr}, stdout: stdout, stderr: stderr}, nil
}

// maxAnswer bounds what a command reads of an answer.
const maxAnswer = 64 << 20

// call sends body (nil: none) to path and decodes a 2xx answer into each
// of outs.
// With --format json the answer is printed as it is and printed reports
// false. Any other answer is reported on stderr with its error code and
// message (exitRefused); a server that cannot be reached is exitError.
func (c *client) call(ctx context.Context, method, path string, body any, outs ...any) (printed bool, code int) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return false, c.fail(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimSuffix(c.flags.server, "/")+path, rd)
	if err != nil {
		return false, c.fail(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.flags.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.flags.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return false, c.fail(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return false, c.fail(err)
	}
	if resp.StatusCode/100 != 2 {
		return false, c.refused(resp.Status, raw)
	}
	if *c.flags.format == "json" {
		var v any
		if json.Unmarshal(raw, &v) != nil {
			return false, c.fail(fmt.Errorf("the server answered %s with no JSON", resp.Status))
		}
		writeJSON(c.stdout, v)
		return true, exitOK
	}
	for _, out := range outs {
		if err := json.Unmarshal(raw, out); err != nil {
			return false, c.fail(fmt.Errorf("the server's answer: %w", err))
		}
	}
	return false, exitOK
}

func (c *client) fail(err error) int {
	return say(c.stderr, exitError, "arbiter %s: %v", c.name, err)
}

// refused prints an error answer: the code and message of its error
// document (the contract's {"error": {...}}, or OPA's {"code", "message"}),
// then what it lists: a refused candidate's problems, a refused
// promotion's refusals.
func (c *client) refused(status string, raw []byte) int {
	var doc struct {
		Code    string              `json:"code"`
		Message string              `json:"message"`
		Error   engine.DocumentBody `json:"error"`
		// Problems: POST /v1/shadow refused the candidate.
		Problems []engine.Problem `json:"problems"`
		// Promotion: POST /v1/shadow/promote refused it.
		Promotion *shadow.Promotion `json:"promotion"`
	}
	if json.Unmarshal(raw, &doc) != nil || doc.Error.Code == "" && doc.Code == "" {
		return say(c.stderr, exitRefused, "arbiter %s: the server answered %s", c.name, status)
	}
	code, msg := string(doc.Error.Code), doc.Error.Message
	if code == "" {
		code, msg = doc.Code, doc.Message
	}
	fmt.Fprintf(c.stderr, "arbiter %s: %s: %s\n", c.name, code, msg)
	writeIndented(c.stderr, doc.Problems)
	if doc.Promotion != nil {
		writeIndented(c.stderr, doc.Promotion.Refusals)
	}
	return exitRefused
}

// clientCommand is a command for the running server that takes nargs
// arguments; run gets the client and the arguments.
func clientCommand(use, short, long string, nargs int, run func(ctx context.Context, cl *client, args []string) int) *command {
	c := newCommand(use, short, long, exitError)
	var f clientFlags
	f.register(c)
	c.run = func(ctx context.Context, _ io.Reader, stdout, stderr io.Writer) int {
		name := strings.TrimPrefix(c.CommandPath(), "arbiter ")
		if c.NArg() != nargs {
			return say(stderr, exitError, "arbiter %s: want %d argument(s), got %q", name, nargs, c.Args())
		}
		cl, err := f.client(name, stdout, stderr)
		if err != nil {
			return say(stderr, exitError, "arbiter %s: %v", name, err)
		}
		return run(ctx, cl, c.Args())
	}
	return c
}

// reloadLine is one reload attempt on one line: when, what asked, what it
// did, and the rest of what its JSON holds (reloadDetails).
func reloadLine(st live.ReloadStatus) string {
	var what string
	switch {
	case !st.OK:
		what = fmt.Sprintf("refused (%d problem(s)); %s keeps serving", len(st.Problems), orNone(st.Revision))
	case st.Promotion != nil:
		what = fmt.Sprintf("%s %s by %s, replacing %s", promoted(st.Promotion.Forced), st.Revision, orNone(st.Promotion.By), orNone(st.Promotion.From))
	case st.Changed:
		what = "activated " + st.Revision
	default:
		what = "unchanged " + orNone(st.Revision)
	}
	line := fmt.Sprintf("%s  %-8s %s", st.At.UTC().Format(time.RFC3339), st.Trigger, what)
	if st.Origin != "" {
		line += "  from " + st.Origin
	}
	return line + reloadDetails(st)
}

// promoted says how a promotion went live: past a refusing gate, forced.
func promoted(forced bool) string {
	if forced {
		return "promoted (forced)"
	}
	return "promoted"
}

// reloadDetails is what reloadLine's words leave out of a reload attempt:
// its candidate, the revision it replaced, how long it took, the triggers
// it answered, the files it skipped and its promotion's record.
func reloadDetails(st live.ReloadStatus) string {
	var b strings.Builder
	fmt.Fprintf(&b, "  (in %s", st.Duration)
	if st.Candidate != "" {
		fmt.Fprintf(&b, ", candidate %s", st.Candidate)
	}
	if st.From != "" {
		fmt.Fprintf(&b, ", replacing %s", st.From)
	}
	if st.Coalesced > 0 {
		fmt.Fprintf(&b, ", %d triggers", st.Coalesced)
	}
	b.WriteString(")")
	for _, f := range st.Skipped {
		fmt.Fprintf(&b, "\n  skipped %s: %s", f.File, f.Reason)
	}
	if p := st.Promotion; p != nil {
		fmt.Fprintf(&b, "\n  promotion of %s at %s from %s; the source had %s", p.Revision, p.At.UTC().Format(time.RFC3339Nano), orNone(p.Origin), orNone(p.SourceRevision))
	}
	return b.String()
}

// writeIndented prints each of items on a line of its own, indented under
// what it belongs to (problems, refusals).
func writeIndented[T any](w io.Writer, items []T) {
	for _, it := range items {
		fmt.Fprintf(w, "  %v\n", it)
	}
}
