// Package ui serves the pages that reliability engineers open instead of
// grepping the decision log: recent decisions with filters and live
// updates, one decision with its input, result and the explanation with
// evidence, "what if" on an edited input against the live revision and the
// shadow candidate side by side, and the policy status with the reload
// history.
//
// The pages are HTML rendered on the server (html/template) from embedded
// files; one small script of our own (static/ui.js) adds the live rows and
// loading a file into the paste box. Every form works without it. Nothing
// is fetched from elsewhere, and the Content-Security-Policy says so.
//
// The package knows no decision, rule, field or reason: everything it shows
// comes from the decision log's records, the engine's Snapshot and the
// explanation. It declares what it needs as small interfaces; the server
// wires them.
package ui

import (
	"bytes"
	"cmp"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"html/template"
	"io/fs"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/go-chi/chi/v5"

	"github.com/arbiter-dev/arbiter/decisionlog"
	"github.com/arbiter-dev/arbiter/decisionstore"
	"github.com/arbiter-dev/arbiter/diff"
	"github.com/arbiter-dev/arbiter/engine"
	"github.com/arbiter-dev/arbiter/engine/live"
	"github.com/arbiter-dev/arbiter/internal/defaults"
	"github.com/arbiter-dev/arbiter/internal/jsonenc"
	"github.com/arbiter-dev/arbiter/shadow"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Recent is the source of recent decisions (a *Ring).
type Recent interface {
	Query(f Filter, before uint64, limit int) Page
	Get(id string) (Entry, bool)
	Values(max int) map[string][]string
	Subscribe() (<-chan Entry, func())
	// Refusals charts the refusals among its decisions (Ring.Refusals).
	Refusals(q decisionstore.RefusalQuery) decisionstore.Refusals
}

// Archive finds a decision that the ring no longer holds (a LogFile).
type Archive interface {
	// Lookup returns the decision of id and the shadow candidates'
	// answers to it found beside it.
	Lookup(id string) (decisionlog.Record, []decisionlog.Shadow, bool, error)
}

// Decider decides without logging anything: explanations of logged
// decisions and what-if evaluations are never real decisions.
type Decider interface {
	Decide(ctx context.Context, name string, body []byte, opts engine.Options) (*engine.Decision, error)
	Snapshot() *engine.Snapshot
}

// Reloads is the history of reload attempts, newest first.
type Reloads interface {
	ReloadHistory() []live.ReloadStatus
}

// Shadow is a candidate revision evaluated beside the live one: package
// shadow's Shadow. A what-if decides directly on the candidate's Snapshot,
// so nothing is logged or judged.
type Shadow interface {
	// Candidate is the candidate in shadow, nil when none is loaded.
	Candidate() *shadow.Candidate
	// Report is the impact of the candidate on the live decisions it was
	// shown, as GET /v1/shadow reports it; false when there is none.
	Report() (shadow.Report, bool)
	// Proofs are the semantic diff's verdicts on the candidate.
	Proofs() shadow.Proofs
}

// ShadowSummary is the impact of a shadow candidate (its report: how many
// live decisions it was shown, and how many fell in each class of change,
// with a few example decision ids) and the promotion gate's verdict on it.
type ShadowSummary struct {
	Report shadow.Report
	// Promotable says whether the gate would promote it now, Refusals
	// why not, and Evidence the gate's strongest evidence per class.
	Promotable bool
	Refusals   []string
	Evidence   []shadow.Evidence
}

// Diffs are the semantic diffs of revisions (package diff's Runner): of
// each revision made live against the one it replaced, and of the shadow
// candidate against the live one.
type Diffs interface {
	Get(old, new string) (diff.Status, bool)
	Shadow() (diff.Status, bool)
}

// Config is what New needs. Recent and Decider are required.
type Config struct {
	Recent  Recent
	Archive Archive // may be nil
	// Store, when the server has a decision store, is every replica's
	// decisions: the list and a decision's page read it (live rows stay
	// Recent's). nil: the pages show this replica's ring.
	Store   Store
	Decider Decider
	Reloads Reloads // may be nil
	Shadow  Shadow  // may be nil: no shadow evaluation in this process
	// ShadowGate is the default promotion gate, whose verdict the policy
	// page shows beside the candidate's report.
	ShadowGate shadow.Gate
	Diffs      Diffs // may be nil: no diff runs in this process
	Logger     *slog.Logger

	// Prefix is where the pages are mounted; default "/ui".
	Prefix string
	// PageSize is the number of rows of one page of decisions; default 50.
	PageSize int
	// MaxBodyBytes bounds one what-if input, as the API bounds a body;
	// default 16 MiB.
	MaxBodyBytes int64
	// EvalTimeout bounds one what-if request; default 30s.
	EvalTimeout time.Duration
	// Login says that the API needs a bearer token, so the pages offer a
	// login form that keeps it in a cookie (see Bridge).
	Login bool
	// Closing, when closed, ends every live stream (/events): the server
	// is shutting down, and a graceful stop must not wait for a page that
	// would stay open forever. nil: streams end with their request only.
	Closing <-chan struct{}
	// TraceURL, when set, makes a decision's trace id a link: the URL with
	// TraceIDPlaceholder replaced by the id (a trace in Jaeger, Tempo...).
	// Empty: the id is plain text.
	TraceURL string
}

// TraceIDPlaceholder is what Config.TraceURL holds where the trace id goes.
const TraceIDPlaceholder = "{trace_id}"

// DefaultPageSize is the number of decisions on one page.
const DefaultPageSize = 50

// storeTimeout bounds the reading of one page from a decision store: a
// stopped database shows an error page, not a page that never loads.
const storeTimeout = 10 * time.Second

type handler struct {
	cfg   Config
	pages map[string]*template.Template
	log   *slog.Logger
}

// New returns the handler of every page under cfg.Prefix. It does not
// authenticate: mount it behind the API's authentication (Bridge lets a
// browser carry the token).
func New(cfg Config) http.Handler {
	defaults.Set(&cfg.Prefix, "/ui")
	defaults.Set(&cfg.PageSize, DefaultPageSize)
	defaults.Set(&cfg.MaxBodyBytes, 16<<20)
	defaults.Set(&cfg.EvalTimeout, 30*time.Second)
	cfg.Logger = cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	h := &handler{cfg: cfg, log: cfg.Logger}
	h.pages = parseTemplates(cfg.Prefix, h.toneFor)

	static, _ := fs.Sub(staticFS, "static")
	fileServer := http.StripPrefix(cfg.Prefix+"/static/", http.FileServer(http.FS(static)))

	r := chi.NewRouter()
	r.Use(securityHeaders)
	p := cfg.Prefix
	home := func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, p+"/decisions", http.StatusSeeOther) }
	r.Get(p, home)
	r.Get(p+"/", home)
	r.Get(p+"/decisions", h.list)
	r.Get(p+"/decisions/{id}", h.decision)
	r.Post(p+"/decisions/{id}", h.decision) // what-if on this decision's input
	r.Get(p+"/runs/{runId}", h.run)
	r.Get(p+"/charts", h.charts)
	r.Get(p+"/whatif", h.whatif)
	r.Post(p+"/whatif", h.whatif)
	r.Get(p+"/events", h.events)
	r.Get(p+"/policy", h.policy)
	r.Get(p+"/login", h.login)
	r.Post(p+"/login", h.login)
	r.Post(p+"/logout", h.logout)
	r.Get(p+"/static/*", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		fileServer.ServeHTTP(w, r)
	})
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		h.render(w, r, http.StatusNotFound, "error", page{Title: "Not found", Message: "There is no page at " + r.URL.Path + "."})
	})
	return r
}

// securityHeaders forbid anything the pages do not load from this server,
// framing, and caching of pages that show inputs.
func securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "same-origin")
		h.Set("X-Frame-Options", "DENY")
		if !strings.Contains(r.URL.Path, "/static/") {
			h.Set("Cache-Control", "no-store")
		}
		next.ServeHTTP(w, r)
	})
}

// sameOrigin refuses a form post from another site: the pages accept a
// token cookie, which a browser would attach to a cross-site post (the
// cookie is SameSite=Strict too). A browser says where a request comes
// from in Sec-Fetch-Site; without it, the Origin must be this host. A
// client that sends neither (curl with a bearer token) is no browser.
func sameOrigin(r *http.Request) bool {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" {
		return site == "same-origin" || site == "none"
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	u, err := url.Parse(origin)
	return err == nil && u.Host == r.Host
}

// page is what every template gets.
type page struct {
	Title   string
	Nav     string // the current section
	Message string
	Login   bool
	Data    any
}

func (h *handler) render(w http.ResponseWriter, r *http.Request, status int, name string, p page) {
	p.Login = h.cfg.Login
	b, err := h.execute(name, "layout", p)
	if err != nil {
		h.log.Error("ui: rendering a page failed", "page", name, "err", err)
		http.Error(w, "rendering the page failed", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// execute renders the template name of a page through visible: every page
// and every live row is written by it.
func (h *handler) execute(pageName, name string, data any) ([]byte, error) {
	var buf bytes.Buffer
	if err := h.pages[pageName].ExecuteTemplate(&buf, name, data); err != nil {
		return nil, err
	}
	return visible(buf.Bytes()), nil
}

// visible escapes, as \uXXXX (a JSON string's escape, so a what-if input
// posted again means the same), each character that is itself invisible
// but changes what a reader sees: the bidirectional controls (U+202E shows
// "\u202ea3f7-nur" as "run-7f3a"), the other format characters (zero
// widths, U+FEFF), line separators and the controls but tab, LF and CR,
// which HTML lays out as white space. The templates hold none of them, so
// each one in a page came from a value: this is where every value printed
// is escaped.
func visible(b []byte) []byte {
	var out []byte
	start := 0
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == '\t' || r == '\n' || r == '\r' || !unicode.IsControl(r) && !unicode.In(r, unicode.Cf, unicode.Zl, unicode.Zp) {
			i += n
			continue
		}
		out = append(out, b[start:i]...)
		for _, u := range utf16.AppendRune(nil, r) {
			out = fmt.Appendf(out, `\u%04x`, u)
		}
		i += n
		start = i
	}
	if out == nil {
		return b
	}
	return append(out, b[start:]...)
}

// ---- recent decisions ----

type listData struct {
	decisions  // the page's rows: Page, More, Stored and StoreDown
	Form       url.Values
	Choices    map[string][]string
	Newest     bool
	OlderURL   string
	NewestURL  string
	EventsURL  string
	ChartURL   string // the charts of the same filter
	PageSize   int
	Rows       []row
	FilterNote string
}

// row is one decision in a table.
type row struct {
	Entry
	URL string
	// Cursor is the row's place, for the "Older" link that follows it.
	Cursor string
	Fleet  bool // the rows are every replica's: a replica column
	// Shown are the reasons shown in the row: the first, and the one the
	// filter asked for when it is another; More counts the others.
	Shown []string
	More  int
	// Run is the run id of its input, RunURL its run's page.
	Run    string
	RunURL string
}

func (h *handler) rowOf(e Entry, f Filter, ptrs RunPointers) row {
	r := row{Entry: e, URL: h.cfg.Prefix + "/decisions/" + url.PathEscape(e.Record.DecisionID)}
	if r.Run = runIDOf(e, ptrs); r.Run != "" {
		r.RunURL = h.runURL(r.Run)
	}
	if h.cfg.Store != nil {
		r.Cursor, r.Fleet = storeCursor(e), true
	} else {
		r.Cursor = strconv.FormatUint(e.Seq, 10)
	}
	if len(e.Reasons) > 0 {
		r.Shown = []string{e.Reasons[0]}
		for _, rs := range e.Reasons[1:] {
			if rs == f.Reason && rs != "" && rs != e.Reasons[0] {
				r.Shown = append(r.Shown, rs)
			}
		}
		r.More = len(e.Reasons) - len(r.Shown)
	}
	return r
}

// parseFilter reads the filter of a query string; times are UTC, as the
// form's datetime-local fields or RFC 3339. A time that is not one is
// left out, and said (the note); an input filter that is not one makes
// the filter match nothing (refused), never everything.
func parseFilter(q url.Values) (f Filter, note string, refused bool) {
	f = Filter{
		Decision: q.Get("decision"), Outcome: q.Get("outcome"), Reason: q.Get("reason"),
		Revision: q.Get("revision"), Caller: q.Get("caller"), Replica: q.Get("replica"),
		Path: q.Get("path"),
	}
	var bad []string
	for _, in := range q["input"] {
		if strings.TrimSpace(in) == "" {
			continue
		}
		m, err := decisionstore.ParseInputMatch(in)
		if err != nil {
			bad, refused = append(bad, err.Error()), true
			continue
		}
		f.Input = append(f.Input, m)
	}
	for _, t := range []struct {
		key string
		dst *time.Time
	}{{"since", &f.Since}, {"until", &f.Until}} {
		v := strings.TrimSpace(q.Get(t.key))
		if v == "" {
			continue
		}
		tm, ok := parseTime(v)
		if !ok {
			bad = append(bad, fmt.Sprintf("%s %q is not a time (want 2006-01-02T15:04, UTC)", t.key, v))
			continue
		}
		*t.dst = tm
	}
	return f, strings.Join(bad, "; "), refused
}

// parseFilter is the package's parseFilter with the run filter (run=ID): the
// decisions whose input names the run, each at its decision's pointer
// (ptrs). With no decision that names a run, the filter matches nothing.
func (h *handler) parseFilter(q url.Values, ptrs RunPointers) (f Filter, note string, refused bool) {
	f, note, refused = parseFilter(q)
	if run := strings.TrimSpace(q.Get("run")); run != "" {
		if len(ptrs) == 0 {
			msg := "run: no decision of the live revision names a run (an input schema property marked " + engine.RunIDKeyword + ")"
			return f, strings.TrimPrefix(note+"; "+msg, "; "), true // joined as the charts' notes are
		}
		f.AnyInput = runFilter(run, ptrs)
	}
	return f, note, refused
}

func parseTime(v string) (time.Time, bool) {
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02T15:04", "2006-01-02"} {
		if t, err := time.ParseInLocation(layout, v, time.UTC); err == nil {
			return t.UTC(), true
		}
	}
	return time.Time{}, false
}

// filterQuery is the query string of f's form fields (without the cursor).
func filterQuery(q url.Values) url.Values {
	return formValues(q, "decision", "outcome", "reason", "revision", "caller", "replica", "path", "run", "since", "until")
}

// formValues are q's non-empty values of keys and of input.
func formValues(q url.Values, keys ...string) url.Values {
	out := url.Values{}
	for _, k := range keys {
		if v := q.Get(k); v != "" {
			out.Set(k, v)
		}
	}
	for _, v := range q["input"] {
		if v != "" {
			out.Add("input", v)
		}
	}
	return out
}

func (h *handler) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	ptrs := h.runPointers()
	f, bad, refused := h.parseFilter(q, ptrs)
	fq := filterQuery(q)
	d := listData{Form: q, PageSize: h.cfg.PageSize, Newest: q.Get("before") == "", FilterNote: bad, decisions: decisions{Stored: h.cfg.Store != nil}}
	if !refused { // else no rows: a filter that could not be read matches nothing
		var err error
		d.decisions, err = h.readDecisions(r.Context(), f, q.Get("before"), h.cfg.PageSize, func(ctx context.Context) (StorePage, error) {
			return h.cfg.Store.List(ctx, f, q.Get("before"), h.cfg.PageSize, ptrs)
		})
		if err != nil {
			h.badCursor(w, r, "the newest decisions")
			return
		}
	}
	d.Choices = h.choices(r.Context())
	for i, e := range d.Page.Entries {
		row := h.rowOf(e, f, ptrs)
		row.Cursor, row.Fleet = d.Cursors[i], row.Fleet && !d.StoreDown
		d.Rows = append(d.Rows, row)
	}
	d.NewestURL = h.listURL(fq)
	if d.Older != "" {
		d.OlderURL = h.listURL(fq, "before", d.Older)
	}
	d.EventsURL = h.cfg.Prefix + "/events" + encodeQuery(fq)
	d.ChartURL = h.cfg.Prefix + "/charts" + encodeQuery(fq)
	h.render(w, r, http.StatusOK, "decisions", page{Title: "Recent decisions", Nav: "decisions", Data: d})
}

// decisions is one page of decisions, newest first: every replica's from
// the store when there is one (Stored), else (or when it cannot be read:
// StoreDown) this replica's from the ring.
type decisions struct {
	Page    Page     // Entries, Matched and, of the ring, Total
	Cursors []string // the entries' places
	Older   string   // the next page's cursor, "" when there is none
	More    bool     // more than Page.Matched match (a store's bound)
	Stored  bool
	// StoreDown: the store could not be read, and the page is this
	// replica's own decisions instead, from the newest.
	StoreDown bool
}

// readDecisions is the one reader of the pages' decisions: the store's
// page (read) when there is a store, else the ring's of up to limit
// entries that match f before the ring's cursor before. Its only error is
// ErrBadCursor, a store's answer to a cursor it never gave.
func (h *handler) readDecisions(ctx context.Context, f Filter, before string, limit int, read func(context.Context) (StorePage, error)) (decisions, error) {
	if h.cfg.Store != nil {
		sp, err := fromStore(ctx, h, "ui: reading the decision store failed", read)
		if err == nil || errors.Is(err, ErrBadCursor) {
			return decisions{Page: Page{Entries: sp.Entries, Matched: sp.Matched}, Cursors: sp.Cursors, Older: sp.Older, More: sp.More, Stored: true}, err
		}
		before = "" // a store's cursor means nothing to the ring
	}
	b, _ := strconv.ParseUint(before, 10, 64)
	d := decisions{Page: h.cfg.Recent.Query(f, b, limit), StoreDown: h.cfg.Store != nil}
	for _, e := range d.Page.Entries {
		d.Cursors = append(d.Cursors, strconv.FormatUint(e.Seq, 10))
	}
	if d.Page.Older != 0 {
		d.Older = strconv.FormatUint(d.Page.Older, 10)
	}
	return d, nil
}

// fromStore reads the decision store within storeTimeout (a stopped
// database shows an error page, not a page that never loads), logging a
// failure (msg) other than a bad cursor.
func fromStore[T any](ctx context.Context, h *handler, msg string, read func(context.Context) (T, error)) (T, error) {
	ctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	v, err := read(ctx)
	if err != nil && !errors.Is(err, ErrBadCursor) {
		h.log.Warn(msg, "err", err)
	}
	return v, err
}

// badCursor answers a page link whose cursor the store never gave.
func (h *handler) badCursor(w http.ResponseWriter, r *http.Request, from string) {
	h.render(w, r, http.StatusBadRequest, "error", page{Title: "No such page", Nav: "decisions",
		Message: "The link's page cursor is not one this page gave. Start again from " + from + "."})
}

// listURL is the list of decisions of the query q with kv's keys set to
// their values (key, value, ...).
func (h *handler) listURL(q url.Values, kv ...string) string {
	q = maps.Clone(q)
	for i := 0; i+1 < len(kv); i += 2 {
		q.Set(kv[i], kv[i+1])
	}
	return h.cfg.Prefix + "/decisions" + encodeQuery(q)
}

func encodeQuery(q url.Values) string {
	if len(q) == 0 {
		return ""
	}
	return "?" + q.Encode()
}

// choices are the values the filter form offers: those in the store (or,
// without one or when it cannot be read, the ring), and the decisions and
// reasons of the live revision.
func (h *handler) choices(ctx context.Context) map[string][]string {
	var c map[string][]string
	if h.cfg.Store != nil {
		c, _ = fromStore(ctx, h, "ui: reading the decision store's filter values failed", func(ctx context.Context) (map[string][]string, error) {
			return h.cfg.Store.Values(ctx, 200)
		})
	}
	if c == nil {
		c = h.cfg.Recent.Values(200)
	}
	if snap := h.cfg.Decider.Snapshot(); snap != nil {
		for _, d := range snap.Decisions() {
			c["decision"] = append(c["decision"], d.Name)
			for _, rule := range d.Rules {
				c["reason"] = append(c["reason"], rule.Reason)
			}
		}
	}
	c["outcome"] = append(c["outcome"], OutcomeError)
	for k, vs := range c {
		slices.Sort(vs)
		c[k] = slices.Compact(vs) // each value once, wherever it came from
	}
	return c
}

// events streams rows of new decisions that match the page's filter, as
// server-sent events, until the page goes away or the server shuts down.
func (h *handler) events(w http.ResponseWriter, r *http.Request) {
	ptrs := h.runPointers()
	f, _, refused := h.parseFilter(r.URL.Query(), ptrs)
	rc := http.NewResponseController(w)
	// The stream outlives the server's write timeout, by design.
	_ = rc.SetWriteDeadline(time.Time{})
	ch, stop := h.cfg.Recent.Subscribe()
	defer stop()
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)

	// A reconnecting page sends the last row it has: catch up from there.
	if last, err := strconv.ParseUint(r.Header.Get("Last-Event-ID"), 10, 64); err == nil && last > 0 {
		for _, e := range slices.Backward(h.cfg.Recent.Query(f, 0, h.cfg.PageSize).Entries) {
			if e.Seq > last && h.sendRow(w, e, f, ptrs) != nil {
				return
			}
		}
	}
	if _, err := fmt.Fprint(w, ": live\n\n"); err != nil || rc.Flush() != nil {
		return
	}
	keepalive := time.NewTicker(20 * time.Second)
	defer keepalive.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-h.cfg.Closing:
			return
		case <-keepalive.C:
			if _, err := fmt.Fprint(w, ": keepalive\n\n"); err != nil || rc.Flush() != nil {
				return
			}
		case e := <-ch:
			if refused || !match(f, e) {
				continue
			}
			if err := h.sendRow(w, e, f, ptrs); err != nil || rc.Flush() != nil {
				return
			}
		}
	}
}

func (h *handler) sendRow(w http.ResponseWriter, e Entry, f Filter, ptrs RunPointers) error {
	row, err := h.execute("decisions", "row", h.rowOf(e, f, ptrs))
	if err != nil {
		return err
	}
	// The row is one JSON string (ui.js parses it): a CR or LF of a value
	// would otherwise end the line, and a CR is a line end to EventSource
	// that splitting on LF misses, letting a value forge fields (an id).
	out := fmt.Appendf(nil, "id: %d\nevent: decision\ndata: ", e.Seq)
	out = jsonenc.AppendString(out, strings.TrimSpace(string(row)))
	_, err = w.Write(append(out, "\n\n"...))
	return err
}

// ---- one decision ----

type decisionData struct {
	Entry        Entry
	InputText    string
	ResultText   string
	Explained    *evaluation // the live revision's explanation of the logged input
	SameResult   bool
	LiveRevision string
	Masked       bool
	WhatIf       *whatIfData
	TraceURL     string // the link of the record's trace id; empty: none
	// Run is the run id its input names, RunURL the run's page.
	Run, RunURL string
	// Shadow is what the shadow candidates answered to it.
	Shadow shadowView
}

// traceLink is where Config.TraceURL shows the trace id, or "" without a
// TraceURL or when id is not a W3C trace id: a record read back from the
// log file or the store is shown, never trusted. A W3C id is 32 lower-case
// hex digits, which a URL needs no escape for; it is escaped all the same.
func (h *handler) traceLink(id string) string {
	if h.cfg.TraceURL == "" || len(id) != 32 || strings.Trim(id, "0123456789abcdef") != "" {
		return ""
	}
	return strings.ReplaceAll(h.cfg.TraceURL, TraceIDPlaceholder, url.PathEscape(id))
}

func (h *handler) decision(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "id")
	e, ok := h.cfg.Recent.Get(id)
	var storeErr error
	if (!ok || e.InputDropped) && h.cfg.Store != nil {
		// Another replica's decision, or this one's input that the ring
		// gave up: the store has every replica's, whole.
		ctx, cancel := context.WithTimeout(r.Context(), storeTimeout)
		se, found, err := h.cfg.Store.Get(ctx, id)
		cancel()
		if err != nil {
			h.log.Warn("ui: reading the decision store failed", "err", err)
			storeErr = err
		}
		if found {
			se.Seq = e.Seq
			e, ok = se, true
		}
	}
	if (!ok || e.InputDropped) && h.cfg.Archive != nil {
		rec, shadows, found, err := h.cfg.Archive.Lookup(id)
		if err != nil {
			h.log.Warn("ui: reading the decision log failed", "err", err)
		}
		if found {
			// The log's answers are the ring's own records, whole: those
			// of the ring only when the log's lookahead missed them (and
			// never appended to, which would write into the ring's array).
			if len(shadows) == 0 {
				shadows = e.Shadows
			}
			e = Entry{Seq: e.Seq, Record: rec, Replica: e.Replica, Shadows: shadows}
			e.Outcome, e.Reasons = rec.Summary(outcomeKey(h.cfg.Decider, rec.Decision))
			ok = true
		}
	}
	if !ok && storeErr != nil {
		h.render(w, r, http.StatusServiceUnavailable, "error", page{Title: "Decision store unavailable", Nav: "decisions",
			Message: "Decision " + id + " is not in memory or in this replica's decision log, and the decision store could not be read. The server's log says why."})
		return
	}
	if !ok {
		where := "in memory or in the decision log"
		if h.cfg.Store != nil {
			where = "in memory, in the decision log or in the decision store"
		}
		h.render(w, r, http.StatusNotFound, "error", page{Title: "Decision not found", Nav: "decisions",
			Message: "No decision " + id + " " + where + "."})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.EvalTimeout)
	defer cancel()
	d := decisionData{Entry: e, Masked: len(e.Record.Masked) > 0, TraceURL: h.traceLink(e.Record.TraceID),
		InputText: indent(e.Record.Input), ResultText: indent(e.Record.Result)}
	d.Shadow = h.shadowAnswers(r.Context(), e) // the store's, read again: a round trip
	if d.Run = runIDOf(e, h.runPointers()); d.Run != "" {
		d.RunURL = h.runURL(d.Run)
	}
	if snap := h.cfg.Decider.Snapshot(); snap != nil {
		d.LiveRevision = snap.Revision
	}
	if len(e.Record.Input) > 0 {
		ev := h.evaluate(ctx, h.cfg.Decider.Decide, d.LiveRevision, e.Record.Decision, e.Record.Input)
		d.Explained = &ev
		d.SameResult = ev.Err == nil && len(e.Record.Result) > 0 && engine.SameJSON(ev.Decision.Result, e.Record.Result)
	}
	wi := h.newWhatIf(e.Record.Decision, d.InputText)
	wi.Action = h.cfg.Prefix + "/decisions/" + url.PathEscape(id) + "#whatif-result"
	if r.Method == http.MethodPost {
		if !h.readWhatIf(w, r, &wi) {
			return
		}
		h.runWhatIf(ctx, &wi)
	}
	d.WhatIf = &wi
	h.render(w, r, http.StatusOK, "decision", page{Title: "Decision " + id, Nav: "decisions", Data: d})
}

// outcomeKey is the outcome member of a decision of the live revision,
// "" when there is none.
func outcomeKey(dc Decider, decision string) string {
	snap := dc.Snapshot()
	if snap == nil {
		return ""
	}
	if v, ok := snap.Verdict(decision); ok && v.OutcomeKey != "" {
		return v.OutcomeKey
	}
	return decisionlog.DefaultOutcomeKey
}

// OutcomeKeys returns, for RingConfig.OutcomeKey, the outcome member of
// each decision of the live revision.
func OutcomeKeys(d Decider) func(decision string) string {
	return func(decision string) string { return outcomeKey(d, decision) }
}

// evaluation is one decision made for the page, never logged.
type evaluation struct {
	ID       string // for the heading's id
	Label    string
	Name     string // the decision
	Revision string
	Decision *engine.Decision
	Err      *engine.Error
	Result   string // indented result
	Outcome  string
	Reasons  []string
	Fired    []engine.RuleOutcome
	Quiet    []engine.RuleOutcome // rules that did not fire: the conditions that held
}

func (h *handler) evaluate(ctx context.Context, decide func(context.Context, string, []byte, engine.Options) (*engine.Decision, error), revision, name string, body []byte) evaluation {
	ev := evaluation{Revision: revision, Name: name}
	d, err := decide(ctx, name, body, engine.Options{Explain: true})
	if err != nil {
		ev.Err = engine.AsError(err)
		return ev
	}
	ev.Decision = d
	ev.Revision = d.Revision
	ev.Result = indent(d.Result)
	ev.Outcome, ev.Reasons = d.Outcome, d.Reasons // as the revision that decided read them
	for _, ro := range d.Explanation {
		if ro.Fired {
			ev.Fired = append(ev.Fired, ro)
		} else {
			ev.Quiet = append(ev.Quiet, ro)
		}
	}
	return ev
}

// ---- policy status ----

type policyData struct {
	Snapshot  *engine.Snapshot
	Decisions []engine.DecisionInfo
	History   []historyRow
	Candidate string
	Shadow    bool // a Shadow is wired
	Summary   ShadowSummary
	HasSum    bool
	// Diff is the candidate's diff against the live revision.
	Diff *diffView
}

// historyRow is one reload attempt (a promotion included) with the diff
// of what it made live against what it replaced, when one ran.
type historyRow struct {
	live.ReloadStatus
	Diff *diffView
}

// diffView is a diff as the pages show it: its state, and per decision
// and question the verdict, a found example with both answers.
type diffView struct {
	diff.Status
	Answers []diffAnswer
}

type diffAnswer struct {
	Decision, Question string
	*diff.Answer
	Input string // a found example, indented, for the what-if form
}

func viewDiff(st diff.Status) *diffView {
	v := &diffView{Status: st}
	if st.Report == nil {
		return v
	}
	for _, name := range st.Report.Names() {
		for _, q := range diff.Questions {
			a := st.Report.Decisions[name].Get(q)
			v.Answers = append(v.Answers, diffAnswer{Decision: name, Question: diff.QuestionName(q), Answer: a, Input: indent(a.Example)})
		}
	}
	return v
}

func (h *handler) policy(w http.ResponseWriter, r *http.Request) {
	d := policyData{Snapshot: h.cfg.Decider.Snapshot()}
	if d.Snapshot != nil {
		d.Decisions = d.Snapshot.Decisions()
	}
	if h.cfg.Reloads != nil {
		for _, st := range h.cfg.Reloads.ReloadHistory() {
			row := historyRow{ReloadStatus: st}
			if h.cfg.Diffs != nil && st.From != "" {
				if ds, ok := h.cfg.Diffs.Get(st.From, st.Revision); ok {
					row.Diff = viewDiff(ds)
				}
			}
			d.History = append(d.History, row)
		}
	}
	if h.cfg.Shadow != nil {
		d.Shadow = true
		d.Candidate, _ = h.candidate()
		if rep, ok := h.cfg.Shadow.Report(); ok {
			proofs, gate := h.cfg.Shadow.Proofs(), h.cfg.ShadowGate
			d.Summary.Refusals = append(gate.Refusals(rep), gate.ProofRefusals(proofs)...)
			d.Summary.Report, d.Summary.Evidence, d.Summary.Promotable, d.HasSum = rep, rep.Evidence(proofs), len(d.Summary.Refusals) == 0, true
		}
		if h.cfg.Diffs != nil && d.Candidate != "" {
			if ds, ok := h.cfg.Diffs.Shadow(); ok && ds.New == d.Candidate {
				d.Diff = viewDiff(ds)
			}
		}
	}
	h.render(w, r, http.StatusOK, "policy", page{Title: "Policy status", Nav: "policy", Data: d})
}

// ---- helpers for templates ----

// indent is raw JSON indented for reading, its numbers as written; text
// that is not JSON is shown as it is.
func indent(raw []byte) string {
	var b bytes.Buffer
	if json.Indent(&b, raw, "", "  ") != nil {
		return string(raw)
	}
	return b.String()
}

// tone picks one of a few colours for a value, the same every time, so
// that outcomes are told apart at a glance without the page knowing which
// outcome is which.
func tone(v string) string {
	if v == OutcomeError {
		return "tone-error"
	}
	if v == "" {
		return "tone-none"
	}
	f := fnv.New32a()
	_, _ = f.Write([]byte(v))
	return "tone-" + strconv.Itoa(int(f.Sum32()%6))
}

// toneFor colours an outcome by what it means when the decision's result
// schema says which outcomes allow: green for those, red for the others;
// otherwise by tone.
func (h *handler) toneFor(decision, outcome string) string {
	snap := h.cfg.Decider.Snapshot()
	if outcome == OutcomeError || outcome == "" || snap == nil {
		return tone(outcome)
	}
	switch v, _ := snap.Verdict(decision); {
	case !v.Declared:
		return tone(outcome)
	case slices.ContainsFunc(v.Allow, func(a any) bool { return fmt.Sprint(a) == outcome }):
		return "tone-allow"
	}
	return "tone-refuse"
}

func parseTemplates(prefix string, toneFor func(decision, outcome string) string) map[string]*template.Template {
	funcs := template.FuncMap{
		"prefix":  func() string { return prefix },
		"toneFor": toneFor,
		"short":   func(s string) string { return s[:min(len(s), 8)] },
		"when": func(t time.Time) string {
			if t.IsZero() {
				return ""
			}
			return t.UTC().Format("2006-01-02 15:04:05.000Z")
		},
		"iso": func(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) },
		"ms": func(ns int64) string {
			return strconv.FormatFloat(float64(ns)/1e6, 'f', 2, 64) + " ms"
		},
		"dur":        func(d time.Duration) string { return d.Round(time.Millisecond).String() },
		"raw":        func(b json.RawMessage) string { return string(b) },
		"seriesName": seriesName,
		"dict": func(kv ...any) map[string]any {
			m := map[string]any{}
			for i := 0; i+1 < len(kv); i += 2 {
				m[fmt.Sprint(kv[i])] = kv[i+1]
			}
			return m
		},
		"num": func(f float64) string { return strconv.FormatFloat(f, 'f', 1, 64) },
		"selected": func(form url.Values, key, v string) bool {
			return form.Get(key) == v
		},
	}
	base := template.Must(template.New("layout").Funcs(funcs).ParseFS(templateFS, "templates/layout.html"))
	out := map[string]*template.Template{}
	for _, name := range []string{"decisions", "decision", "run", "charts", "whatif", "policy", "login", "error"} {
		out[name] = template.Must(template.Must(base.Clone()).ParseFS(templateFS, "templates/"+name+".html", "templates/parts.html"))
	}
	return out
}
