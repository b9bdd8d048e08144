package ui

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/arbiter-dev/arbiter/decisionstore"
	"github.com/arbiter-dev/arbiter/engine"
)

// Charts of refusals by reason, drawn on the server as inline SVG: over
// time, per revision and per replica, each with a legend and a table of
// the same numbers. The page is the list's filter plus a window; its
// counts come from the store (every replica's) or the ring (this
// replica's), bounded as decisionstore.Refusals says.

// chartWindows are the windows the page offers, ending now.
var chartWindows = []struct {
	Key string
	Dur time.Duration
}{{"15m", 15 * time.Minute}, {"1h", time.Hour}, {"6h", 6 * time.Hour}, {"24h", 24 * time.Hour}, {"7d", 7 * 24 * time.Hour}}

const defaultChartWindow = "1h"

// chartWindow is the window of a query: from since to until when given
// (until defaults to now, since to until less the window), else the
// chosen window (default 1h) ending now.
func chartWindow(q url.Values, f Filter, now time.Time) (decisionstore.Window, string) {
	span, note := time.Hour, ""
	for _, w := range chartWindows {
		if w.Key == q.Get("window") {
			span = w.Dur
		}
	}
	until, since := cmp.Or(f.Until, now), f.Since // the filter's times are UTC: zero is time.Time{}
	if !since.IsZero() && !since.Before(until) {
		note = "the window's start is not before its end: the " + q.Get("window") + " window before its end is shown"
	}
	if since.IsZero() || note != "" {
		since = until.Add(-span)
	}
	return decisionstore.NewWindow(since, until), note
}

// allowances are, per decision of the live revision that declares them,
// the outcomes that allow (engine.Verdict); the names of those that do
// not, whose every decision is a refusal.
func allowances(snap *engine.Snapshot) (map[string][]string, []string) {
	allow, undeclared := map[string][]string{}, []string(nil)
	if snap == nil {
		return allow, nil
	}
	for _, d := range snap.Decisions() {
		v, _ := snap.Verdict(d.Name)
		if !v.Declared {
			undeclared = append(undeclared, d.Name)
			continue
		}
		allow[d.Name] = []string{}
		for _, a := range v.Allow {
			allow[d.Name] = append(allow[d.Name], fmt.Sprint(a)) // a string, or a boolean as Summary writes it
		}
	}
	return allow, undeclared
}

type chartsData struct {
	Form       url.Values
	Choices    map[string][]string
	Windows    []string
	Window     decisionstore.Window
	Refusals   decisionstore.Refusals
	Stored     bool // every replica's, from the store
	StoreDown  bool
	FilterNote string
	Undeclared []string
	Hidden     url.Values // the list's other filters, carried by the form
	ListURL    string
	Charts     []chartView
	Series     []seriesView
}

// seriesView is one reason of the legend.
type seriesView struct {
	Reason      string
	None, Other bool // no reason given; the lumped rest
	Others      int
	Class       string
	Total       int
	ListURL     string // the list filtered by this reason ("" for none or other)
}

// chartView is one chart: its bars, drawn in a viewBox of Width x Height.
type chartView struct {
	ID, Title, Desc, KeyName string
	Horizontal               bool
	Width, Height            int
	Bars                     []barView
	Ticks                    []tickView
	Labels                   []tickView // the x axis's, for time
	Empty                    bool
}

type barView struct {
	Key, Label, Title string
	Other             bool
	Total             int
	URL               string
	Segs              []segView
	Counts            []int
	// LabelX and LabelY place a horizontal bar's name, TotalX its count.
	LabelX, LabelY, TotalX float64
}

type segView struct {
	X, Y, W, H float64
	Series     seriesView
	Count      int
	Title      string
}

type tickView struct {
	X, Y  float64
	Label string
}

// seriesClasses colour the series: eight that tell apart (and a grey for
// "other") in ui.css.
const seriesClasses = 8

func (h *handler) charts(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f, note, refused := h.parseFilter(q, h.runPointers())
	win, winNote := chartWindow(q, f, time.Now())
	if winNote != "" {
		note = strings.TrimPrefix(note+"; "+winNote, "; ")
	}
	allow, undeclared := allowances(h.cfg.Decider.Snapshot())
	rq := decisionstore.RefusalQuery{Filter: f, Window: win, Allow: allow}
	d := chartsData{Form: q, Window: win, FilterNote: note, Undeclared: undeclared, Stored: h.cfg.Store != nil}
	for _, cw := range chartWindows {
		d.Windows = append(d.Windows, cw.Key)
	}
	if d.Form.Get("window") == "" {
		d.Form = maps.Clone(q)
		d.Form.Set("window", defaultChartWindow)
	}
	switch {
	case refused:
		d.Refusals = decisionstore.TallyRefusals(rq, func(func(decisionstore.Refusal) bool) {})
	case h.cfg.Store != nil:
		got, err := fromStore(r.Context(), h, "ui: charting the decision store's refusals failed", func(ctx context.Context) (decisionstore.Refusals, error) {
			return h.cfg.Store.Refusals(ctx, rq)
		})
		if err == nil {
			d.Refusals = got
			break
		}
		d.Stored, d.StoreDown = false, true
		fallthrough
	default:
		d.Refusals = h.cfg.Recent.Refusals(rq)
	}
	d.Choices = h.choices(r.Context())
	d.Hidden = formValues(q, "outcome", "reason", "caller", "path", "run")
	lq := filterQuery(q)
	lq.Set("since", formTime(win.Since))
	lq.Set("until", formTime(win.Until))
	d.ListURL = h.listURL(lq)
	d.Series = h.seriesOf(d.Refusals, lq)
	d.Charts = []chartView{
		h.timeChart(d.Refusals, d.Series, lq),
		h.groupChart("chart-revision", "Refusals by reason per revision", "revision", d.Refusals.Revisions, d.Series, lq, true),
		h.groupChart("chart-replica", "Refusals by reason per replica", "replica", d.Refusals.Replicas, d.Series, lq, false),
	}
	h.render(w, r, http.StatusOK, "charts", page{Title: "Refusals by reason", Nav: "charts", Data: d})
}

// formTime is t as the filter form's datetime-local fields hold it (UTC).
func formTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05") }

func (h *handler) seriesOf(rf decisionstore.Refusals, lq url.Values) []seriesView {
	var out []seriesView
	for i, reason := range rf.Reasons {
		s := seriesView{Reason: reason, None: reason == "", Class: "s" + strconv.Itoa(i%seriesClasses)}
		if reason != "" {
			s.ListURL = h.listURL(lq, "reason", reason)
		}
		out = append(out, s)
	}
	if rf.OtherReasons > 0 {
		out = append(out, seriesView{Other: true, Others: rf.OtherReasons, Class: "s-other"})
	}
	for _, t := range rf.Time {
		for i, n := range t.Counts {
			out[i].Total += n
		}
	}
	return out
}

// seriesName is a series as a line of text says it.
func seriesName(s seriesView) string {
	switch {
	case s.Other:
		return fmt.Sprintf("other (%d reasons)", s.Others)
	case s.None:
		return "(no reason given)"
	}
	return s.Reason
}

// niceMax is the top of a count axis: 1, 2, 3, 4, 5, 6 or 8 times a power
// of ten, at least n.
func niceMax(n int) int {
	for p := 1; ; p *= 10 {
		for _, m := range []int{1, 2, 3, 4, 5, 6, 8} {
			if m*p >= n {
				return m * p
			}
		}
	}
}

// The time chart's geometry, in its viewBox.
const (
	chartW, timeH                = 960, 260
	plotLeft, plotRight, plotTop = 48.0, 8.0, 10.0
	plotBottom                   = 36.0
	groupRow, groupLabelW        = 30.0, 220.0
)

func (h *handler) timeChart(rf decisionstore.Refusals, series []seriesView, lq url.Values) chartView {
	win := rf.Window
	c := chartView{ID: "chart-time", Title: "Refusals by reason over time", KeyName: "Time (UTC)", Width: chartW, Height: timeH}
	top := tallest(rf.Time)
	c.Empty = top == 0
	top = niceMax(max(top, 1))
	plotW, plotH := float64(chartW)-plotLeft-plotRight, float64(timeH)-plotTop-plotBottom
	n := max(len(rf.Time), 1)
	slot := plotW / float64(n)
	layout := "15:04"
	switch {
	case win.Step < time.Minute:
		layout = "15:04:05"
	case win.Step >= 24*time.Hour:
		layout = "01-02"
	}
	every := (n + 7) / 8
	for i, t := range rf.Time {
		from := win.Since.Add(time.Duration(i) * win.Step)
		to := from.Add(win.Step)
		b := barView{Key: strconv.Itoa(i), Total: t.Total, Counts: t.Counts,
			Label: from.Format("2006-01-02 15:04:05") + " to " + to.Format("15:04:05") + " UTC"}
		b.Title = fmt.Sprintf("%s: %d refusals", b.Label, t.Total)
		b.URL = h.listURL(lq, "since", formTime(from), "until", formTime(to))
		x, y := plotLeft+float64(i)*slot+slot*0.1, plotTop+plotH
		b.Segs = stack(t, series, top, plotH, b.Label, func(l float64) segView { y -= l; return segView{X: x, Y: y, W: slot * 0.8, H: l} })
		if i%every == 0 {
			c.Labels = append(c.Labels, tickView{X: plotLeft + float64(i)*slot + slot/2, Y: float64(timeH) - plotBottom + 16, Label: from.Format(layout)})
		}
		c.Bars = append(c.Bars, b)
	}
	for i, v := range []int{0, top / 2, top} { // the middle one when it is a whole count
		if i != 1 || top%2 == 0 && top > 1 {
			c.Ticks = append(c.Ticks, tickView{X: plotLeft - 6, Y: plotTop + plotH - float64(v)/float64(top)*plotH, Label: strconv.Itoa(v)})
		}
	}
	c.Desc = fmt.Sprintf("%d refusals from %s to %s UTC in %d bars of %s", rf.Refusals,
		win.Since.Format("2006-01-02 15:04:05"), win.Until.Format("2006-01-02 15:04:05"), len(rf.Time), win.Step)
	return c
}

func (h *handler) groupChart(id, title, key string, tallies []decisionstore.Tally, series []seriesView, lq url.Values, revision bool) chartView {
	c := chartView{ID: id, Title: title, KeyName: strings.ToUpper(key[:1]) + key[1:], Horizontal: true, Width: chartW}
	c.Height = int(groupRow*float64(max(len(tallies), 1)) + 8)
	top := tallest(tallies)
	c.Empty = top == 0
	top = max(top, 1)
	barW := float64(chartW) - groupLabelW - 70
	for i, t := range tallies {
		b := barView{Key: t.Key, Other: t.Other, Total: t.Total, Counts: t.Counts, Label: t.Key}
		switch {
		case t.Other:
			b.Label = fmt.Sprintf("other (%d %ss)", t.Others, key)
		case t.Key == "":
			b.Label = "(none)"
		case revision && len(t.Key) > 12:
			b.Label = t.Key[:12]
		case len([]rune(t.Key)) > 28:
			b.Label = string([]rune(t.Key)[:27]) + "…"
		}
		full := t.Key
		if t.Other || t.Key == "" {
			full = b.Label
		}
		b.Title = fmt.Sprintf("%s %s: %d refusals", key, full, t.Total)
		if !t.Other && t.Key != "" {
			b.URL = h.listURL(lq, key, t.Key)
		}
		y := 4 + float64(i)*groupRow
		b.LabelX, b.LabelY = groupLabelW-8, y+groupRow/2+5
		x := groupLabelW
		b.Segs = stack(t, series, top, barW, key+" "+full, func(l float64) (sv segView) {
			sv, x = segView{X: x, Y: y + 4, W: l, H: groupRow - 8}, x+l
			return sv
		})
		b.TotalX = x + 6
		c.Bars = append(c.Bars, b)
	}
	c.Desc = fmt.Sprintf("%d %ss", len(tallies), key)
	return c
}

// stack is t's segments, one per series with refusals, laid end to end by
// place from their lengths (count/top of span), titled after prefix.
func stack(t decisionstore.Tally, series []seriesView, top int, span float64, prefix string, place func(l float64) segView) []segView {
	var segs []segView
	for s, count := range t.Counts {
		if count > 0 {
			sv := place(float64(count) / float64(top) * span)
			sv.Series, sv.Count, sv.Title = series[s], count, fmt.Sprintf("%s: %s, %d of %d refusals", prefix, seriesName(series[s]), count, t.Total)
			segs = append(segs, sv)
		}
	}
	return segs
}

// tallest is the largest sum of a tally's counts (a refusal of several
// reasons is a segment of each: more than its Total).
func tallest(ts []decisionstore.Tally) (top int) {
	for _, t := range ts {
		n := 0
		for _, c := range t.Counts {
			n += c
		}
		top = max(top, n)
	}
	return top
}
