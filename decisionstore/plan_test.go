package decisionstore

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// sentQuery is one query a Reader sent.
type sentQuery struct {
	sql  string
	args []any
}

// recordingQuerier passes queries on to db and keeps them.
type recordingQuerier struct {
	Querier
	sent []sentQuery
}

func (q *recordingQuerier) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	q.sent = append(q.sent, sentQuery{sql, args})
	return q.Querier.Query(ctx, sql, args...)
}

// genericPlan runs q on conn as the sixth run of a prepared statement
// runs (pgx prepares and caches each query; PostgreSQL then plans it
// without looking at its arguments), under EXPLAIN ANALYZE, and returns
// the plan's text.
func genericPlan(t *testing.T, conn *pgx.Conn, q sentQuery) string {
	t.Helper()
	ctx := ctxT(t)
	if _, err := conn.PgConn().Exec(ctx, "DEALLOCATE ALL; SET plan_cache_mode = force_generic_plan; PREPARE listing AS "+q.sql).ReadAll(); err != nil {
		t.Fatal(err)
	}
	params := make([]string, len(q.args))
	for i := range params {
		params[i] = "$" + strconv.Itoa(i+1)
	}
	// The simple protocol puts the arguments in the text as literals.
	rows, err := conn.Query(ctx, "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) EXECUTE listing("+strings.Join(params, ", ")+")",
		append([]any{pgx.QueryExecModeSimpleProtocol}, q.args...)...)
	if err != nil {
		t.Fatal(err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(lines, "\n")
}

var removedRE = regexp.MustCompile(`Rows Removed by Filter: ([0-9]+)`)

// removedByFilter sums the rows a plan read and discarded.
func removedByFilter(plan string) int {
	n := 0
	for _, m := range removedRE.FindAllStringSubmatch(plan, -1) {
		v, _ := strconv.Atoi(m[1])
		n += v
	}
	return n
}

// TestListByInputUsesTheGINIndex: a list filtered by one run, over a
// week of 20,000 rows in daily partitions, is answered through the
// input's GIN index, under the generic plan every cached query gets from
// its sixth run: the plan of the query whose rows List returns has a
// scan of a records_*_input_idx, and List's queries together discard
// about the listProbeRows rows of the probe, not the week. Before, the
// one query walked every partition's time index testing each row's
// input, for the run's 40 rows among 20,000.
func TestListByInputUsesTheGINIndex(t *testing.T) {
	t.Parallel()
	url := cluster.DB(t)
	s := open(t, url)
	const n = 20_000
	end := time.Date(2026, 12, 4, 23, 59, 0, 0, time.UTC)
	loadRuns(t, s, n, end)
	ctx := ctxT(t)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())

	since := end.Add(-benchDays * 24 * time.Hour)
	for _, c := range []struct {
		name string
		row  int // a row of the run: its first, in the oldest day
		page int
		any  bool // as a run across decisions (Filter.AnyInput)
	}{
		{"oldest run", 0, 50, false},
		{"a run mid-week, pages of 7", n / 2, 7, false},
		{"a run across decisions", n / 3, 50, true},
	} {
		m, err := ParseInputMatch("/run/runId = " + runOf(c.row))
		if err != nil {
			t.Fatal(err)
		}
		f := Filter{Since: since, Input: []InputMatch{m}}
		if c.any {
			other, err := ParseInputMatch("/runKey = " + runOf(c.row))
			if err != nil {
				t.Fatal(err)
			}
			f = Filter{Since: since, AnyInput: []DecisionInput{{"deploy", m}, {"another", other}}}
		}
		rec := &recordingQuerier{Querier: s.Pool()}
		r := NewReader(rec)
		var got []Row
		for cur := (Cursor{}); ; {
			rows, next, err := r.List(ctx, f, cur, c.page)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, rows...)
			if next.IsZero() {
				break
			}
			cur = next
		}
		if len(got) != runLen {
			t.Fatalf("%s: listed %d rows of %s, want its %d", c.name, len(got), runOf(c.row), runLen)
		}
		for i := 1; i < len(got); i++ {
			if a, b := got[i-1].Cursor, got[i].Cursor; !a.Time.After(b.Time) && !(a.Time.Equal(b.Time) && a.ID > b.ID) {
				t.Fatalf("%s: row %d (%v) is not older than row %d (%v)", c.name, i, b, i-1, a)
			}
		}
		// The first page's queries, in their generic plans.
		rec.sent = rec.sent[:0]
		if _, _, err := r.List(ctx, f, Cursor{}, c.page); err != nil {
			t.Fatal(err)
		}
		removed, last := 0, ""
		for _, q := range rec.sent {
			last = genericPlan(t, conn, q)
			removed += removedByFilter(last)
		}
		if !regexp.MustCompile(`Bitmap Index Scan on records_[0-9]+_record_input_idx`).MatchString(last) {
			t.Errorf("%s: the rows List returns are not found through the input's GIN index; plan of its last query:\n%s", c.name, last)
		}
		// The probe's rows, and a few of the join back's (a partition of
		// a handful of rows is read whole), not the week's.
		if removed > 2*listProbeRows {
			t.Errorf("%s: List's queries read and discarded %d rows of %d to find %d; want about the %d of the probe",
				c.name, removed, n, runLen, listProbeRows)
		}
	}
}
