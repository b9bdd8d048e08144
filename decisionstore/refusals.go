package decisionstore

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/arbiter-dev/arbiter/internal/defaults"
)

// The bounds of a chart of refusals: whatever the window and the data,
// it reads at most MaxRefusals refusals (the newest), draws at most
// MaxBuckets bars over time, Series reasons and Groups revisions and
// replicas (the rest lumped as "other"), and at most
// MaxReasonsPerRefusal reasons of one refusal.
const (
	MaxBuckets           = 60
	DefaultMaxRefusals   = 100_000
	DefaultSeries        = 8
	DefaultGroups        = 10
	MaxReasonsPerRefusal = 16
)

// Window is a chart's time range, [Since, Until), cut into buckets of
// Step: both ends on a multiple of Step (UTC), so the bars start on the
// clock's minutes, hours or days.
type Window struct {
	Since, Until time.Time
	Step         time.Duration
}

// steps are the widths a bucket may have, shortest first.
var steps = []time.Duration{time.Second, 5 * time.Second, 10 * time.Second, 30 * time.Second,
	time.Minute, 5 * time.Minute, 10 * time.Minute, 15 * time.Minute, 30 * time.Minute,
	time.Hour, 3 * time.Hour, 6 * time.Hour, 12 * time.Hour, 24 * time.Hour, 7 * 24 * time.Hour}

// NewWindow is the window from since to until (until after since) in at
// most MaxBuckets buckets of the shortest step that fits, widened to
// whole steps; past the longest step, whole multiples of it.
func NewWindow(since, until time.Time) Window {
	since, until = since.UTC(), until.UTC()
	aligned := func(step time.Duration) Window {
		w := Window{Since: since.Truncate(step), Until: until.Truncate(step), Step: step}
		if w.Until.Before(until) || !w.Until.After(w.Since) {
			w.Until = w.Until.Add(step)
		}
		return w
	}
	for _, s := range steps {
		if w := aligned(s); w.Buckets() <= MaxBuckets {
			return w
		}
	}
	long := steps[len(steps)-1]
	w := aligned(long)
	return aligned(long * time.Duration(w.Buckets()/(MaxBuckets-1)+1))
}

// Buckets is the number of bars.
func (w Window) Buckets() int { return int(w.Until.Sub(w.Since) / w.Step) }

// Bucket is the bar of t, which the window holds.
func (w Window) Bucket(t time.Time) int {
	return int(t.Truncate(time.Microsecond).Sub(w.Since) / w.Step)
}

// RefusalQuery asks for the refusals among the decisions a filter
// selects, within a window.
type RefusalQuery struct {
	Filter Filter // its Since and Until are the window's
	Window Window
	// Allow names, per decision, the outcomes that allow (its result
	// schema's x-arbiter-allow, booleans as "true" and "false"). Every
	// other decision is a refusal, and so is every error; a decision that
	// declares no allowing outcome refuses every time (engine.Verdict).
	Allow map[string][]string
	// Series and Groups default to DefaultSeries and DefaultGroups,
	// MaxRefusals to DefaultMaxRefusals.
	Series, Groups, MaxRefusals int
}

func (q RefusalQuery) bounds() RefusalQuery {
	q.Series = defaults.Positive(q.Series, DefaultSeries)
	q.Groups = defaults.Positive(q.Groups, DefaultGroups)
	q.MaxRefusals = defaults.Positive(q.MaxRefusals, DefaultMaxRefusals)
	q.Filter.Since, q.Filter.Until = q.Window.Since, q.Window.Until
	return q
}

// Refused reports whether a decision with this outcome and error code is
// a refusal.
func (q RefusalQuery) Refused(decision, outcome, errorCode string) bool {
	return errorCode != "" || !slices.Contains(q.Allow[decision], outcome)
}

// Refusal is one decision, as a chart reads it.
type Refusal struct {
	Time                                 time.Time
	Decision, Revision, Replica, Outcome string
	ErrorCode                            string
	Reasons                              []string
}

// reasonsOf are what a refusal counts under: its error code, else its
// first MaxReasonsPerRefusal reasons once each, else "" (none given).
func reasonsOf(reasons []string, code string) []string {
	switch {
	case code != "":
		return []string{code}
	case len(reasons) == 0:
		return []string{""}
	}
	out := slices.Clone(reasons[:min(len(reasons), MaxReasonsPerRefusal)])
	slices.Sort(out)
	return slices.Compact(out)
}

// Refusals are the refusals of a window by reason: over time, per
// revision and per replica. A refusal counts once under each reason it
// gives (its error code, when it failed; "" when it gave none).
type Refusals struct {
	Window Window
	// Reasons are the series, most refusals first (then by name); when
	// OtherReasons is not 0 the counts have one more, "other", which
	// lumps that many reasons.
	Reasons      []string
	OtherReasons int
	// Time has one tally per bucket, oldest first; Revisions and Replicas
	// one per value, most refusals first (then by name), the last one
	// "other" when there were more than a chart's Groups.
	Time, Revisions, Replicas []Tally
	// Refusals is how many refusals are counted: the newest MaxRefusals
	// of the window; More says that the window held more, from Oldest on
	// they are counted.
	Refusals int
	More     bool
	Oldest   time.Time
}

// Tally is one bar: its key (a revision, a replica; a bucket's is its
// index), its refusals and, per series, the refusals that give it.
type Tally struct {
	Key    string
	Other  bool // the lumped rest: Others values
	Others int
	Total  int
	Counts []int
}

// TallyRefusals counts the refusals among decisions (newest first), as the
// store's Refusals does in the database: a ring of recent decisions is
// charted with it, and the two agree (TestRefusalsAgree).
func TallyRefusals(q RefusalQuery, decisions iter.Seq[Refusal]) Refusals {
	q = q.bounds()
	type refusal struct {
		bucket            int
		revision, replica string
		reasons           []string
	}
	var rs []refusal
	out := Refusals{Window: q.Window}
	for d := range decisions {
		if !q.Refused(d.Decision, d.Outcome, d.ErrorCode) || d.Time.Before(q.Window.Since) || !d.Time.Before(q.Window.Until) {
			continue
		}
		if len(rs) == q.MaxRefusals {
			out.More = true
			break
		}
		rs = append(rs, refusal{q.Window.Bucket(d.Time), d.Revision, d.Replica, reasonsOf(d.Reasons, d.ErrorCode)})
		out.Oldest = d.Time.Truncate(time.Microsecond)
	}
	out.Refusals = len(rs)
	reasons, revisions, replicas := map[string]int{}, map[string]int{}, map[string]int{}
	for _, r := range rs {
		for _, x := range r.reasons {
			reasons[x]++
		}
		revisions[r.revision]++
		replicas[r.replica]++
	}
	shownRev, shownRep, series := out.bars(q, reasons, revisions, replicas, [3]int{len(reasons), len(revisions), len(replicas)})
	for _, r := range rs {
		bars := []*Tally{&out.Time[r.bucket], barOf(out.Revisions, shownRev, &r.revision), barOf(out.Replicas, shownRep, &r.replica)}
		for _, b := range bars {
			b.Total++
		}
		for _, x := range r.reasons {
			s, ok := series[x]
			if !ok {
				s = len(bars[0].Counts) - 1 // "other"
			}
			for _, b := range bars {
				b.Counts[s]++
			}
		}
	}
	return out
}

// barOf is the bar of key k among ts, of which shown says where each key
// shown stands: the last one ("other") for a key lumped (not shown, or nil).
func barOf(ts []Tally, shown map[string]int, k *string) *Tally {
	if k != nil {
		if i, ok := shown[*k]; ok {
			return &ts[i]
		}
	}
	return &ts[len(ts)-1]
}

// top are the n keys of counts with the highest counts (ties by name,
// bytewise, as the store's COLLATE "C").
func top(counts map[string]int, n int) []string {
	keys := slices.SortedFunc(maps.Keys(counts), func(a, b string) int {
		return cmp.Or(cmp.Compare(counts[b], counts[a]), strings.Compare(a, b))
	})
	return keys[:min(n, len(keys))]
}

func index(keys []string) map[string]int {
	m := make(map[string]int, len(keys))
	for i, k := range keys {
		m[k] = i
	}
	return m
}

// bars ranks the reasons, revisions and replicas counted (of which there
// are distinct in all) into out's series and makes out's bars, zero: one
// per bucket, per revision and per replica shown (then one "other" for the
// others lumped), each with a count per series (then one "other" when
// reasons are lumped). It returns where each revision, replica and reason
// stands in them.
func (out *Refusals) bars(q RefusalQuery, reasons, revisions, replicas map[string]int, distinct [3]int) (revAt, repAt, series map[string]int) {
	out.Reasons = top(reasons, q.Series)
	out.OtherReasons = distinct[0] - len(out.Reasons)
	revKeys, repKeys := top(revisions, q.Groups), top(replicas, q.Groups)
	width := len(out.Reasons)
	if out.OtherReasons > 0 {
		width++
	}
	tallies := func(keys []string, others int) []Tally {
		ts := make([]Tally, len(keys), len(keys)+1)
		for i, k := range keys {
			ts[i] = Tally{Key: k, Counts: make([]int, width)}
		}
		if others > 0 {
			ts = append(ts, Tally{Other: true, Others: others, Counts: make([]int, width)})
		}
		return ts
	}
	out.Time = tallies(nil, 0)
	for i := range out.Window.Buckets() {
		out.Time = append(out.Time, Tally{Key: strconv.Itoa(i), Counts: make([]int, width)})
	}
	out.Revisions, out.Replicas = tallies(revKeys, distinct[1]-len(revKeys)), tallies(repKeys, distinct[2]-len(repKeys))
	return index(revKeys), index(repKeys), index(out.Reasons)
}

// refusalsSQL counts the refusals in the database: the newest
// MaxRefusals+1 decisions of the filter and window that refuse, read
// newest first on the time index (or a filtered column's with time),
// their columns only; then the top reasons, revisions and replicas, and
// the counts per bucket, revision and replica, each set of bars a
// grouping set. Rows: the set (GROUPING's mask: 3 by bucket, 5 by
// revision, 6 by replica), the bucket, revision, replica, reason (NULL:
// lumped, or a row of refusals, not reasons), whether the row counts
// reasons, and the count; the set -1 holds the number read, -2 .. -4 the
// distinct reasons, revisions and replicas, -5 the oldest time counted.
const refusalsSQL = `WITH newest AS MATERIALIZED (
  SELECT time, decision_id, revision, replica,
    CASE WHEN error_code <> '' THEN ARRAY[error_code]
      WHEN cardinality(reasons) = 0 THEN ARRAY['']
      ELSE ARRAY(SELECT DISTINCT x FROM unnest(reasons[1:%[1]d]) AS x) END AS rs
  FROM arbiter_store.records WHERE %[2]s
    AND (error_code <> '' OR NOT COALESCE((%[3]s::jsonb -> decision) ? outcome, false))
  ORDER BY time DESC, decision_id DESC, kind DESC LIMIT %[4]s + 1
), counted AS (SELECT * FROM newest ORDER BY time DESC, decision_id DESC LIMIT %[4]s
), occ AS (SELECT c.*, x AS reason FROM counted c, unnest(c.rs) AS x
), top_reason AS (SELECT reason FROM occ GROUP BY reason ORDER BY count(*) DESC, reason COLLATE "C" LIMIT %[5]s
), top_revision AS (SELECT revision FROM counted GROUP BY revision ORDER BY count(*) DESC, revision COLLATE "C" LIMIT %[6]s
), top_replica AS (SELECT replica FROM counted GROUP BY replica ORDER BY count(*) DESC, replica COLLATE "C" LIMIT %[6]s
), lumped AS (
  SELECT floor(extract(epoch FROM c.time - %[7]s::timestamptz) * 1000000 / %[8]s)::int AS bucket,
    CASE WHEN c.revision IN (SELECT revision FROM top_revision) THEN c.revision END AS revision,
    CASE WHEN c.replica IN (SELECT replica FROM top_replica) THEN c.replica END AS replica,
    c.rs
  FROM counted c
), given AS (
  SELECT l.bucket, l.revision, l.replica, CASE WHEN x IN (SELECT reason FROM top_reason) THEN x END AS reason
  FROM lumped l, unnest(l.rs) AS x
)
SELECT GROUPING(bucket, revision, replica), bucket, revision, replica, NULL::text, false, count(*)
  FROM lumped GROUP BY GROUPING SETS ((bucket), (revision), (replica))
UNION ALL
SELECT GROUPING(bucket, revision, replica), bucket, revision, replica, reason, true, count(*)
  FROM given GROUP BY GROUPING SETS ((bucket, reason), (revision, reason), (replica, reason))
UNION ALL SELECT -1, NULL, NULL, NULL, NULL, false, (SELECT count(*) FROM newest)
UNION ALL SELECT -2, NULL, NULL, NULL, NULL, false, (SELECT count(DISTINCT reason) FROM occ)
UNION ALL SELECT -3, NULL, NULL, NULL, NULL, false, (SELECT count(DISTINCT revision) FROM counted)
UNION ALL SELECT -4, NULL, NULL, NULL, NULL, false, (SELECT count(DISTINCT replica) FROM counted)
UNION ALL SELECT -5, NULL, NULL, NULL, NULL, false, (SELECT COALESCE((extract(epoch FROM min(time)) * 1000000)::bigint, 0) FROM counted)`

// Refusals charts the refusals among the decisions of q's filter in its
// window, counted in the database (see TallyRefusals for what is counted). Its
// work is bounded by the window, the filter's indexed columns and
// q.MaxRefusals, and its answer by the window's buckets and q's series
// and groups, whatever the rows hold.
func (r *Reader) Refusals(ctx context.Context, q RefusalQuery) (Refusals, error) {
	q = q.bounds()
	f := q.Filter
	f.Kinds = nil // decisions
	conds, inputs, args := f.conditions()
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	allow := q.Allow
	if allow == nil {
		allow = map[string][]string{}
	}
	allowJSON, _ := json.Marshal(allow)
	sql := fmt.Sprintf(refusalsSQL, MaxReasonsPerRefusal, strings.Join(append(conds, inputs...), " AND "),
		arg(string(allowJSON)), arg(q.MaxRefusals), arg(q.Series), arg(q.Groups), arg(q.Window.Since), arg(q.Window.Step.Microseconds()))
	type group struct { // the columns, in order
		Set                       int
		Bucket                    *int
		Revision, Replica, Reason *string
		IsReason                  bool
		N                         int64
	}
	rows, err := r.db.Query(ctx, sql, args...)
	var got []group
	if err == nil {
		got, err = pgx.CollectRows(rows, pgx.RowToStructByPos[group])
	}
	if err != nil {
		return Refusals{}, fmt.Errorf("decision store: charting refusals: %w", err)
	}
	// The bars' order and the series are ranked here, as TallyRefusals ranks
	// them: by count, then by name bytewise.
	out := Refusals{Window: q.Window}
	reasons, revisions, replicas := map[string]int{}, map[string]int{}, map[string]int{}
	var distinct [3]int
	for _, g := range got {
		switch {
		case g.Set == -1:
			out.More = int(g.N) > q.MaxRefusals
		case g.Set == -5:
			if g.N != 0 {
				out.Oldest = time.UnixMicro(g.N).UTC()
			}
		case g.Set < 0:
			distinct[-g.Set-2] = int(g.N)
		case g.Set == 3 && g.IsReason && g.Reason != nil:
			reasons[*g.Reason] += int(g.N)
		case g.Set == 3 && !g.IsReason:
			out.Refusals += int(g.N)
		case g.Set == 5 && !g.IsReason && g.Revision != nil:
			revisions[*g.Revision] = int(g.N)
		case g.Set == 6 && !g.IsReason && g.Replica != nil:
			replicas[*g.Replica] = int(g.N)
		}
	}
	revAt, repAt, series := out.bars(q, reasons, revisions, replicas, distinct)
	for _, g := range got {
		var t *Tally
		switch g.Set {
		case 3:
			if g.Bucket == nil || *g.Bucket < 0 || *g.Bucket >= len(out.Time) {
				continue
			}
			t = &out.Time[*g.Bucket]
		case 5:
			t = barOf(out.Revisions, revAt, g.Revision)
		case 6:
			t = barOf(out.Replicas, repAt, g.Replica)
		default:
			continue
		}
		if !g.IsReason {
			t.Total = int(g.N)
			continue
		}
		s := len(t.Counts) - 1 // "other"
		if g.Reason != nil {
			s = series[*g.Reason]
		}
		t.Counts[s] += int(g.N)
	}
	return out, nil
}
