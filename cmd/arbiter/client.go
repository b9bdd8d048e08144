package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/arbiter-dev/arbiter/engine"
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
	server, token, caFile, format string
}

func (f *clientFlags) register(c *command) {
	c.StringVar(&f.server, "server", defaultServer, "the running arbiter serve: http(s)://HOST:PORT")
	c.StringVar(&f.token, "token", "", "bearer token for a server with --auth-token-file (prefer ARBITER_TOKEN: a flag shows in ps)")
	c.StringVar(&f.caFile, "tls-ca-file", "", "PEM CA certificates that verify an https server (default: the system's)")
	c.StringVar(&f.format, "format", "text", "text, or json (the server's answer as it is)")
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
	if f.format != "text" && f.format != "json" {
		return nil, fmt.Errorf("--format %q: want text or json", f.format)
	}
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

// call sends body (nil: none) to path and decodes a 2xx answer into out.
// With --format json the answer is printed as it is and printed reports
// false. Any other answer is reported on stderr with its error code and
// message (exitRefused); a server that cannot be reached is exitError.
func (c *client) call(ctx context.Context, method, path string, body any, out any) (printed bool, code int) {
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
	if c.flags.format == "json" {
		var v any
		if json.Unmarshal(raw, &v) != nil {
			return false, c.fail(fmt.Errorf("the server answered %s with no JSON", resp.Status))
		}
		writeJSON(c.stdout, v)
		return true, exitOK
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return false, c.fail(fmt.Errorf("the server's answer: %w", err))
	}
	return false, exitOK
}

func (c *client) fail(err error) int {
	fmt.Fprintf(c.stderr, "arbiter %s: %v\n", c.name, err)
	return exitError
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
		fmt.Fprintf(c.stderr, "arbiter %s: the server answered %s\n", c.name, status)
		return exitRefused
	}
	code, msg := string(doc.Error.Code), doc.Error.Message
	if code == "" {
		code, msg = doc.Code, doc.Message
	}
	fmt.Fprintf(c.stderr, "arbiter %s: %s: %s\n", c.name, code, msg)
	for _, p := range doc.Problems {
		fmt.Fprintf(c.stderr, "  %s\n", p)
	}
	if doc.Promotion != nil {
		for _, r := range doc.Promotion.Refusals {
			fmt.Fprintf(c.stderr, "  %s\n", r)
		}
	}
	return exitRefused
}

// clientCommand parses a command for the running server: its flags, and
// exactly nargs arguments.
func clientCommand(name, synopsis string, nargs int, args []string, stdout, stderr io.Writer) (*client, []string, int, bool) {
	c := newCommand(name, synopsis)
	var f clientFlags
	f.register(c)
	if done, code := c.parse(args, stdout, stderr, exitError); done {
		return nil, nil, code, false
	}
	if c.NArg() != nargs {
		fmt.Fprintf(stderr, "arbiter %s: want %d argument(s), got %q\n", name, nargs, c.Args())
		return nil, nil, exitError, false
	}
	cl, err := f.client(name, stdout, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "arbiter %s: %v\n", name, err)
		return nil, nil, exitError, false
	}
	return cl, c.Args(), 0, true
}

// statusView is what `arbiter status` shows of GET /v1/status.
type statusView struct {
	Revision   string              `json:"policy_revision"`
	Origin     string              `json:"policy_origin"`
	LoadedAt   *time.Time          `json:"loaded_at"`
	Decisions  []string            `json:"decisions"`
	LastReload engine.ReloadStatus `json:"last_reload"`
	Reload     string              `json:"reload"`
	Bundles    map[string]struct {
		ActiveRevision string `json:"active_revision"`
		Code           string `json:"code"`
		Message        string `json:"message"`
	} `json:"bundles"`
	UptimeSeconds float64 `json:"uptime_seconds"`
}

func cmdStatus(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) int {
	cl, _, code, ok := clientCommand("status", "[--server URL] [--format text|json]", 0, args, stdout, stderr)
	if !ok {
		return code
	}
	var st statusView
	if printed, code := cl.call(ctx, http.MethodGet, "/v1/status", nil, &st); printed || code != exitOK {
		return code
	}
	fmt.Fprintf(stdout, "revision   %s\n", orNone(st.Revision))
	fmt.Fprintf(stdout, "origin     %s\n", orNone(st.Origin))
	fmt.Fprintf(stdout, "decisions  %s\n", orNone(strings.Join(st.Decisions, ", ")))
	fmt.Fprintf(stdout, "reload     %s\n", st.Reload)
	fmt.Fprintf(stdout, "last       %s\n", reloadLine(st.LastReload))
	writeProblems(stdout, "  ", st.LastReload.Problems)
	for name, b := range st.Bundles {
		line := fmt.Sprintf("bundle     %s: %s", name, orNone(b.ActiveRevision))
		if b.Code != "" {
			line += fmt.Sprintf(" (%s: %s)", b.Code, b.Message)
		}
		fmt.Fprintln(stdout, line)
	}
	fmt.Fprintf(stdout, "uptime     %s\n", (time.Duration(st.UptimeSeconds) * time.Second).String())
	return exitOK
}

func cmdReloads(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) int {
	cl, _, code, ok := clientCommand("reloads", "[--server URL] [--format text|json]", 0, args, stdout, stderr)
	if !ok {
		return code
	}
	var doc struct {
		Reloads []engine.ReloadStatus `json:"reloads"`
	}
	if printed, code := cl.call(ctx, http.MethodGet, "/v1/reloads", nil, &doc); printed || code != exitOK {
		return code
	}
	for _, st := range doc.Reloads {
		fmt.Fprintln(stdout, reloadLine(st))
		writeProblems(stdout, "  ", st.Problems)
	}
	return exitOK
}

// reloadLine is one reload attempt on one line: when, what asked, and what
// it did.
func reloadLine(st engine.ReloadStatus) string {
	var what string
	switch {
	case !st.OK:
		what = fmt.Sprintf("refused (%d problem(s)); %s keeps serving", len(st.Problems), orNone(st.Revision))
	case st.Promotion != nil:
		what = fmt.Sprintf("promoted %s by %s, replacing %s", st.Revision, orNone(st.Promotion.By), orNone(st.Promotion.From))
	case st.Changed:
		what = "activated " + st.Revision
	default:
		what = "unchanged " + orNone(st.Revision)
	}
	line := fmt.Sprintf("%s  %-8s %s", st.At.UTC().Format(time.RFC3339), st.Trigger, what)
	if st.Origin != "" {
		line += "  from " + st.Origin
	}
	return line
}

func writeProblems(w io.Writer, indent string, probs []engine.Problem) {
	for _, p := range probs {
		fmt.Fprintf(w, "%s%s\n", indent, p)
	}
}

const shadowSynopsis = "load DIR|BUNDLE [--schemas DIR] [--tests DIR] | status | promote [--force] [--revision REV] | clear  [client flags]"

// shadowFlags are the flags of arbiter shadow's subcommands, one set: -h
// lists them all, and a subcommand refuses those that are not its own.
type shadowFlags struct {
	clientFlags
	schemas, tests, revision string
	force                    bool
}

// shadowOwn are the flags only some subcommands take.
var shadowOwn = map[string][]string{"load": {"schemas", "tests"}, "promote": {"force", "revision"}}

// cmdShadow drives the candidate in shadow of a running server (the
// /v1/shadow routes): load, status, promote, clear.
func cmdShadow(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) int {
	sub := ""
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		sub, args = args[0], args[1:]
	}
	c := newCommand("shadow", shadowSynopsis)
	var f shadowFlags
	f.register(c)
	c.StringVar(&f.schemas, "schemas", "", "load: schema folder of a folder candidate (default: the server's)")
	c.StringVar(&f.tests, "tests", "", "load: test folder that gates a folder candidate (default: the server's)")
	c.BoolVar(&f.force, "force", false, "promote: even when the promotion gate refuses (recorded as forced)")
	c.StringVar(&f.revision, "revision", "", "promote: only if the candidate in shadow is this revision (the one whose report you read)")
	if done, code := c.parse(reorder(args), stdout, stderr, exitError); done {
		return code
	}
	nargs := map[string]int{"load": 1, "status": 0, "promote": 0, "clear": 0}
	want, known := nargs[sub]
	var stray []string
	c.Visit(func(fl *flag.Flag) {
		for other, own := range shadowOwn {
			if other != sub && slices.Contains(own, fl.Name) {
				stray = append(stray, "--"+fl.Name)
			}
		}
	})
	switch {
	case !known:
		fmt.Fprintf(stderr, "arbiter shadow: want load, status, promote or clear\n")
		return exitError
	case c.NArg() != want:
		fmt.Fprintf(stderr, "arbiter shadow %s: want %d argument(s), got %q\n", sub, want, c.Args())
		return exitError
	case len(stray) > 0:
		fmt.Fprintf(stderr, "arbiter shadow %s: %s is not a flag of %s\n", sub, strings.Join(stray, ", "), sub)
		return exitError
	}
	cl, err := f.client("shadow "+sub, stdout, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "arbiter shadow %s: %v\n", sub, err)
		return exitError
	}
	switch sub {
	case "load":
		return shadowLoad(ctx, cl, c.Arg(0), &f)
	case "status":
		return shadowStatus(ctx, cl)
	case "promote":
		return shadowPromote(ctx, cl, &f)
	default:
		return shadowClear(ctx, cl)
	}
}

// shadowLoad puts the revision of a policy folder (with the server's
// schemas and tests unless given) or of a bundle file in shadow. The paths
// are the server's: made absolute here, for a server on the same machine.
func shadowLoad(ctx context.Context, cl *client, path string, f *shadowFlags) int {
	body := map[string]string{}
	for k, v := range map[string]string{"policies": path, "schemas": f.schemas, "tests": f.tests} {
		if v == "" {
			continue
		}
		abs, err := filepath.Abs(v)
		if err != nil {
			return cl.fail(err)
		}
		body[k] = abs
	}
	fi, err := os.Stat(body["policies"])
	if err != nil {
		return cl.fail(err)
	}
	if !fi.IsDir() {
		if f.schemas != "" || f.tests != "" {
			return cl.fail(errors.New("a bundle carries its schemas and tests: --schemas and --tests are for a folder"))
		}
		body = map[string]string{"bundle": body["policies"]}
	}
	var doc struct {
		Candidate candidateView `json:"candidate"`
	}
	if printed, code := cl.call(ctx, http.MethodPost, "/v1/shadow", body, &doc); printed || code != exitOK {
		return code
	}
	fmt.Fprintf(cl.stdout, "in shadow: %s from %s\n", doc.Candidate.Revision, doc.Candidate.Origin)
	return exitOK
}

// reorder puts flags before arguments, so that `shadow load DIR --tests T`
// parses as `shadow load --tests T DIR` (the flag package stops at the
// first argument).
func reorder(args []string) []string {
	var flags, rest []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			return append(append(flags, "--"), append(rest, args[i+1:]...)...)
		case strings.HasPrefix(a, "-") && a != "-":
			flags = append(flags, a)
			name := strings.TrimLeft(a, "-")
			if !strings.Contains(a, "=") && name != "force" && name != "h" && name != "help" && i+1 < len(args) {
				flags, i = append(flags, args[i+1]), i+1
			}
		default:
			rest = append(rest, a)
		}
	}
	return append(flags, rest...)
}

type candidateView struct {
	Revision  string    `json:"policy_revision"`
	Origin    string    `json:"origin"`
	LoadedBy  string    `json:"loaded_by"`
	Decisions []string  `json:"decisions"`
	LoadedAt  time.Time `json:"loaded_at"`
}

func shadowStatus(ctx context.Context, cl *client) int {
	stdout := cl.stdout
	var doc struct {
		Candidate  *candidateView `json:"candidate"`
		Live       string         `json:"live_revision"`
		Stats      shadow.Stats   `json:"stats"`
		Promotable bool           `json:"promotable"`
		Refusals   []string       `json:"refusals"`
		Progress   string         `json:"progress"`
		Report     *shadow.Report `json:"report"`
	}
	if printed, code := cl.call(ctx, http.MethodGet, "/v1/shadow", nil, &doc); printed || code != exitOK {
		return code
	}
	if doc.Candidate == nil {
		fmt.Fprintf(stdout, "no candidate in shadow; live %s\n", orNone(doc.Live))
		return exitOK
	}
	fmt.Fprintf(stdout, "candidate  %s from %s (live %s)\n", doc.Candidate.Revision, doc.Candidate.Origin, orNone(doc.Live))
	s := doc.Stats
	fmt.Fprintf(stdout, "gate       %s", doc.Progress)
	if doc.Promotable {
		fmt.Fprintln(stdout, ": promotable")
	} else {
		fmt.Fprintln(stdout, ": not promotable")
		for _, r := range doc.Refusals {
			fmt.Fprintf(stdout, "  %s\n", r)
		}
	}
	fmt.Fprintf(stdout, "stats      %d sampled, %d judged, %d dropped, %d expired, %d abandoned, %d unjudged, %d queued\n",
		s.Sampled, s.Judged, s.Dropped, s.Expired, s.Abandoned, s.Unjudged, s.Queued)
	if doc.Report != nil {
		doc.Report.WriteText(stdout)
	}
	return exitOK
}

func shadowPromote(ctx context.Context, cl *client, f *shadowFlags) int {
	stdout, force, revision := cl.stdout, f.force, f.revision
	var doc struct {
		Promotion shadow.Promotion `json:"promotion"`
	}
	if printed, code := cl.call(ctx, http.MethodPost, "/v1/shadow/promote", map[string]any{"force": force, "revision": revision}, &doc); printed || code != exitOK {
		return code
	}
	p := doc.Promotion
	how := "promoted"
	if p.Forced {
		how = "promoted (forced past the gate)"
	}
	fmt.Fprintf(stdout, "%s %s, replacing %s\n", how, p.Revision, orNone(p.From))
	for _, r := range p.Refusals {
		fmt.Fprintf(stdout, "  %s\n", r)
	}
	return exitOK
}

func shadowClear(ctx context.Context, cl *client) int {
	stdout := cl.stdout
	var doc struct {
		Cleared *candidateView `json:"cleared"`
	}
	if printed, code := cl.call(ctx, http.MethodDelete, "/v1/shadow", nil, &doc); printed || code != exitOK {
		return code
	}
	if doc.Cleared == nil {
		fmt.Fprintln(stdout, "no candidate was in shadow")
		return exitOK
	}
	fmt.Fprintf(stdout, "cleared %s\n", doc.Cleared.Revision)
	return exitOK
}
