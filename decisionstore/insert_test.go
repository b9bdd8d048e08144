package decisionstore

import (
	"context"
	"encoding/json"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/arbiter-dev/arbiter/decisionlog"
)

// insertForTest stands in for the sink's write until it lands (branch
// i21-write): the same columns, from the same Record.Summary.
func insertForTest(ctx context.Context, s *Store, replica string, recs []decisionlog.Record) error {
	var times []time.Time
	for _, r := range recs {
		times = append(times, r.Time)
	}
	if err := s.EnsurePartitions(ctx, times...); err != nil {
		return err
	}
	rows := make([][]any, 0, len(recs))
	for _, r := range recs {
		line, err := json.Marshal(r)
		if err != nil {
			return err
		}
		kind := KindDecision
		switch {
		case r.Promotion != nil:
			kind = KindPromotion
		case r.IsShadowOutcome():
			kind = KindShadow
		}
		outcome, reasons := r.Summary("")
		if reasons == nil {
			reasons = []string{}
		}
		code := ""
		if r.Error != nil {
			code = r.Error.Code
		}
		var input any
		if len(r.Input) > 0 {
			input = string(r.Input)
		}
		rows = append(rows, []any{r.Time, r.DecisionID, kind, replica, r.Decision, r.Path, r.Revision, r.Caller, outcome, reasons, code, r.DurationNS, input, string(line)})
	}
	_, err := s.Pool().CopyFrom(ctx, pgx.Identifier{Schema, "records"},
		[]string{"time", "decision_id", "kind", "replica", "decision", "path", "revision", "caller", "outcome", "reasons", "error_code", "duration_ns", "input", "record"},
		pgx.CopyFromRows(rows))
	return err
}
