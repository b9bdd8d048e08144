package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/arbiter-dev/arbiter/decisionlog"
	"github.com/arbiter-dev/arbiter/decisionstore"
)

// storeQuery is the decision store and the filter of a command that reads
// it (arbiter decisions, arbiter replay --store): the /ui pages' filters.
type storeQuery struct {
	dsn                                                     string
	decision, outcome, reason, revision, caller, replica, p string
	since, until                                            string
	inputs                                                  []string
}

func (s *storeQuery) register(c *command, what string) {
	c.StringVar(&s.dsn, "store", "", "the decision store to read "+what+" from: a PostgreSQL URL (postgres://user@host/db) or key=value string; its password is better in PGPASSWORD or ~/.pgpass than on a command line")
	c.fromEnvAs("store", "ARBITER_DECISION_STORE") // the variable of serve's --decision-store: one for the fleet and the tools
	c.StringVar(&s.decision, "decision", "", "only the decision of this name")
	c.StringVar(&s.outcome, "outcome", "", "only this outcome (error: refused inputs)")
	c.StringVar(&s.reason, "reason", "", "only decisions with this reason or error code")
	c.StringVar(&s.revision, "revision", "", "only decisions of a policy revision starting with this")
	c.StringVar(&s.caller, "caller", "", "only decisions of this caller")
	c.StringVar(&s.replica, "replica", "", "only decisions of this replica (its --replica-id)")
	c.StringVar(&s.p, "path", "", "only requests to this path")
	c.Func("input", `only inputs holding a value: POINTER = VALUE, as "/run/runId = run-7f3a" (VALUE is JSON when it is a JSON number, true, false, null or "quoted string", else a string); repeatable, all must hold`, func(v string) error {
		if _, err := decisionstore.ParseInputMatch(v); err != nil {
			return err
		}
		s.inputs = append(s.inputs, v)
		return nil
	})
	c.StringVar(&s.since, "since", "", "only decisions at or after this: a duration back from now (24h, 90m) or a UTC time (2026-12-04T09:00, RFC 3339)")
	c.StringVar(&s.until, "until", "", "only decisions before this: a duration back from now or a UTC time, as --since")
}

// filter is the store's filter of the flags, times from now.
func (s *storeQuery) filter(now time.Time) (decisionstore.Filter, error) {
	f := decisionstore.Filter{Decision: s.decision, Outcome: s.outcome, Reason: s.reason, Revision: s.revision,
		Caller: s.caller, Replica: s.replica, Path: s.p}
	for _, in := range s.inputs {
		m, err := decisionstore.ParseInputMatch(in)
		if err != nil {
			return f, err
		}
		f.Input = append(f.Input, m)
	}
	for _, t := range []struct {
		name, v string
		dst     *time.Time
	}{{"since", s.since, &f.Since}, {"until", s.until, &f.Until}} {
		if t.v == "" {
			continue
		}
		tm, err := pastTime(t.v, now)
		if err != nil {
			return f, fmt.Errorf("--%s: %w", t.name, err)
		}
		*t.dst = tm
	}
	return f, nil
}

// pastTime reads a duration back from now, or a UTC time.
func pastTime(v string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(v); err == nil {
		if d < 0 {
			return time.Time{}, fmt.Errorf("%q: a duration back from now is positive", v)
		}
		return now.Add(-d), nil
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02T15:04", "2006-01-02"} {
		if t, err := time.ParseInLocation(layout, v, time.UTC); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, fmt.Errorf("%q is neither a duration (24h) nor a time (2026-12-04T09:00, UTC)", v)
}

// open connects to the store, bounded by a timeout: a command that cannot
// reach its database says so rather than waiting.
func (s *storeQuery) open(ctx context.Context) (*decisionstore.Reader, func(), error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return decisionstore.Connect(ctx, s.dsn)
}

// decisionsCommand lists stored decisions, newest first: "what did it say
// about run X" without a browser. It exits 0 when decisions were listed,
// 1 when none matches, and 2 on bad arguments or a store it cannot read.
func decisionsCommand() *command {
	c := newCommand("decisions --store URL", "List the decisions a decision store holds, newest first", `List the decisions of every replica that a decision store holds, newest first, with the
pages' filters and an input field by JSON pointer and value.`, exitInput)
	var q storeQuery
	q.register(c, "decisions")
	limit := c.Int("limit", 50, "decisions listed at most")
	before := c.String("before", "", "list from this cursor on (the one a longer list ends with), not from the newest")
	format := c.format("text", "output format: text (one line per decision) or json (the stored records)")
	c.run = func(ctx context.Context, _ io.Reader, stdout, stderr io.Writer) int {
		cur, err := decisionstore.ParseCursor(*before)
		switch {
		case q.dsn == "":
			return say(stderr, exitInput, "arbiter decisions: --store URL is required")
		case c.NArg() > 0:
			return say(stderr, exitInput, "arbiter decisions: unexpected argument %q", c.Arg(0))
		case *limit <= 0:
			return say(stderr, exitInput, "arbiter decisions: --limit must be positive")
		case err != nil:
			return say(stderr, exitInput, "arbiter decisions: --before: %v", err)
		}
		f, err := q.filter(time.Now())
		if err != nil {
			return say(stderr, exitInput, "arbiter decisions: %v", err)
		}
		r, closeStore, err := q.open(ctx)
		if err != nil {
			return say(stderr, exitInput, "arbiter decisions: %v", err)
		}
		defer closeStore()
		list := r.List // the text shows the columns: no record is read
		if *format == "json" {
			list = r.ListRecords
		}
		rows, next, err := list(ctx, f, cur, *limit)
		if err != nil {
			return say(stderr, exitInput, "arbiter decisions: %v", err)
		}
		if *format == "json" {
			type stored struct {
				Replica string             `json:"replica"`
				Outcome string             `json:"outcome"`
				Reasons []string           `json:"reasons"`
				Record  decisionlog.Record `json:"record"`
				// Partial is the record not shown whole (Record is then
				// what the row's columns say): its size and first bytes.
				Partial *decisionstore.Partial `json:"partial,omitempty"`
			}
			out := struct {
				Decisions []stored `json:"decisions"`
				Next      string   `json:"next,omitempty"`
			}{Decisions: []stored{}, Next: next.String()}
			for _, row := range rows {
				reasons := append([]string{}, row.Reasons...) // [], not null
				out.Decisions = append(out.Decisions, stored{row.Replica, row.Outcome, reasons, row.Record, row.Partial})
				if p := row.Partial; p != nil {
					fmt.Fprintf(stderr, "arbiter decisions: the stored record of %s (%s) is shown in part, its row's columns and first bytes: %d bytes, %s\n",
						decisionlog.Shown(row.Record.DecisionID), decisionlog.Shown(row.Replica), p.Bytes, p.Why)
				}
			}
			writeJSON(stdout, out)
		} else if len(rows) > 0 {
			tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "TIME (UTC)\tREPLICA\tDECISION\tOUTCOME\tREASONS\tCALLER\tREVISION\tID")
			for _, row := range rows {
				rec := row.Record
				why := strings.Join(row.Reasons, ",")
				if rec.Error != nil {
					why = rec.Error.Code
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", rec.Time.UTC().Format("2006-01-02 15:04:05.000"),
					decisionlog.Shown(row.Replica), decisionlog.Shown(rec.Decision), decisionlog.Shown(row.Outcome), decisionlog.Shown(why), decisionlog.Shown(rec.Caller), decisionlog.Shown(shortRev(rec.Revision)), decisionlog.Shown(rec.DecisionID))
			}
			tw.Flush()
			if !next.IsZero() {
				fmt.Fprintf(stderr, "arbiter decisions: more decisions match; the next ones: --before %s\n", next)
			}
		}
		if len(rows) == 0 {
			return say(stderr, exitError, "arbiter decisions: no stored decision matches")
		}
		return exitOK
	}
	return c
}

func shortRev(s string) string {
	if len(s) > 12 {
		return s[:12]
	}
	return s
}
