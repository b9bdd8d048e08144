package service

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/arbiter-dev/arbiter/decisionstore"
	"github.com/arbiter-dev/arbiter/engine/live"
	"github.com/arbiter-dev/arbiter/server/ui"
)

// store is the decision store's sink of one serve process, when
// --decision-store is set.
type store struct {
	sink     *decisionstore.Sink
	deadline time.Duration
}

// newStore starts the sink (nil sink without --decision-store). It does not
// wait for the database: one that is away at start is retried while the
// replica answers, its records queued.
func newStore(c *Config, eng *live.Engine, log *slog.Logger) (*store, error) {
	s := &store{deadline: c.ShutdownTimeout}
	if c.StoreURL == "" {
		return s, nil
	}
	sink, err := decisionstore.NewSink(c.StoreURL, decisionstore.SinkConfig{
		Replica: c.ReplicaID, QueueBytes: c.StoreQueueBytes, Retention: c.StoreRetention,
		OutcomeKey: ui.OutcomeKeys(eng), Logger: log,
	})
	if err != nil {
		return nil, fmt.Errorf("--decision-store: %w", err)
	}
	log.Info("decision store", "url", sink.Stats().URL, "replica", c.ReplicaID, "retention", c.StoreRetention)
	s.sink = sink
	return s, nil
}

// stop writes what is queued, within the shutdown timeout, after the
// pipeline closed (so that nothing more arrives), and logs the account.
func (s *store) stop(log *slog.Logger) {
	if s == nil || s.sink == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.deadline)
	defer cancel()
	if err := s.sink.Close(ctx); err != nil {
		log.Error("decision store not fully written", "err", err)
	}
	st := s.sink.Stats()
	log.Info("decision store closed", "written", st.Written, "dropped", st.DroppedTotal(), "duplicates", st.Duplicates)
}

// sayAtStart logs, once the sink's first attempt on the database has
// ended, one line naming --decision-store when the database cannot be
// used (a refused login, a host that cannot be reached). Readiness does not
// change: the store is not on the answer path; its records wait in the
// queue, /v1/status' store.last_error and arbiter_decision_store_failing say
// it meanwhile.
func (s *store) sayAtStart(ctx context.Context, log *slog.Logger) {
	if s.sink != nil {
		afterClose(ctx, s.sink.Tried(), func() {
			if st := s.sink.Stats(); st.LastError != "" {
				log.Error("decision store unusable at start: decisions are answered, their records wait for it",
					"problem", fmt.Sprintf("--decision-store %s: %s", st.URL, st.LastError))
			}
		})
	}
}
