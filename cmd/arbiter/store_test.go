package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/arbiter-dev/arbiter/engine"
	"github.com/arbiter-dev/arbiter/internal/pgtest"
	"github.com/arbiter-dev/arbiter/internal/wait"
)

// storeFleet is three replicas of the real binary writing to one decision
// store, and the decisions they answered: what the fleet test's steps
// share (the read side's steps, the pages and replay, use it too).
type storeFleet struct {
	cluster  *pgtest.Cluster
	url      string // the store's database
	replicas []*proc
	names    []string          // each replica's --replica-id
	logs     []string          // each replica's decision log file
	answered map[string]string // decision id -> the replica that answered it
	refused  map[string]bool   // the ids answered with an error (a refused input)
	client   *http.Client
	fx       engine.Fixture // a fixture with a result: the decisions sent
}

func newStoreFleet(t *testing.T, extra ...string) *storeFleet {
	t.Helper()
	f := &storeFleet{cluster: pgtest.Start(t), answered: map[string]string{}, refused: map[string]bool{},
		client: &http.Client{Timeout: 10 * time.Second}, fx: decidedFixture(t)}
	// A password, which the cluster (trust) ignores: no log line or
	// status may show it (checkNoPassword).
	f.url = strings.Replace(f.cluster.DB(t), "postgres@", "postgres:"+fleetPassword+"@", 1)
	for i := range 3 {
		name := fmt.Sprintf("replica-%d", i+1)
		args, logPath := quickArgs(t)
		f.replicas = append(f.replicas, startServer(t, append(append(args, "--decision-store", f.url, "--replica-id", name), extra...)...))
		f.names = append(f.names, name)
		f.logs = append(f.logs, logPath)
	}
	return f
}

const fleetPassword = "fleet-s3cret"

// checkNoPassword fails t when a replica's log or status shows the
// store's password.
func (f *storeFleet) checkNoPassword(t *testing.T) {
	t.Helper()
	for r, p := range f.replicas {
		b, _ := json.Marshal(f.storeStatus(t, r))
		if strings.Contains(p.stderr.String(), fleetPassword) || strings.Contains(string(b), fleetPassword) {
			t.Errorf("%s shows the store's password in its log or status", f.names[r])
		}
	}
}

// send posts n decisions round robin, every fifth a body that is not JSON
// (refused, and recorded), and checks each was answered as it must be.
func (f *storeFleet) send(t *testing.T, n int) {
	t.Helper()
	for i := range n {
		r := len(f.answered) % len(f.replicas)
		body, want := f.fx.RequestBody(), http.StatusOK
		if i%5 == 4 {
			body, want = []byte(`{"not json`), http.StatusBadRequest
		}
		a := post(t, f.client, f.replicas[r].url+"/v1/decisions/"+f.fx.Decision, body)
		if a.status != want || a.id == "" {
			t.Fatalf("replica %s answered %d (decision id %q), want %d: %s", f.names[r], a.status, a.id, want, a.body)
		}
		f.answered[a.id] = f.names[r]
		if want != http.StatusOK {
			f.refused[a.id] = true
		}
	}
}

// storeStatus is a replica's /v1/status store member.
func (f *storeFleet) storeStatus(t *testing.T, r int) map[string]any {
	t.Helper()
	st, _ := status(t, f.client, f.replicas[r].url)["store"].(map[string]any)
	if st == nil {
		t.Fatalf("replica %s: /v1/status has no store member", f.names[r])
	}
	return st
}

// settled waits until no replica has a record waiting for the store, and
// returns the records they dropped from it.
func (f *storeFleet) settled(t *testing.T) (dropped int) {
	t.Helper()
	for r := range f.replicas {
		wait.Until(t, time.Minute, f.names[r]+"'s records all written or dropped", func() bool {
			return num(f.storeStatus(t, r)["queued"]) == 0
		})
		for _, v := range f.storeStatus(t, r)["dropped"].(map[string]any) {
			dropped += int(num(v))
		}
	}
	return dropped
}

// checkOnce checks that every answered decision is in the store exactly
// once, with the replica that answered it and its error code when refused,
// or is counted as dropped, and that the store holds no other decision.
func (f *storeFleet) checkOnce(t *testing.T, dropped int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, f.url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT decision_id, replica, error_code FROM arbiter_store.records WHERE kind = 'decision'`)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for rows.Next() {
		var id, replica, code string
		if err := rows.Scan(&id, &replica, &code); err != nil {
			t.Fatal(err)
		}
		seen[id]++
		switch by, ok := f.answered[id]; {
		case !ok:
			t.Errorf("the store holds decision %s, which no replica answered", id)
		case replica != by:
			t.Errorf("decision %s: replica %q in the store, answered by %s", id, replica, by)
		case (code != "") != f.refused[id]:
			t.Errorf("decision %s: error code %q in the store; refused: %v", id, code, f.refused[id])
		}
	}
	if rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	missing := 0
	for id := range f.answered {
		switch seen[id] {
		case 0:
			missing++
		case 1:
		default:
			t.Errorf("decision %s is %d times in the store", id, seen[id])
		}
	}
	if missing != dropped {
		t.Errorf("%d of %d answered decisions are not in the store, and the replicas counted %d dropped", missing, len(f.answered), dropped)
	}
}

// TestDecisionStoreFleet: three replicas of the real binary write to one
// PostgreSQL (issue 21's fleet test). With the database stopped mid-run,
// decisions keep being answered and their records wait (the status says
// so); after it returns, every answered decision is in the store exactly
// once, or is counted as dropped.
func TestDecisionStoreFleet(t *testing.T) {
	t.Parallel()
	f := newStoreFleet(t)

	// 1. Three replicas write to one database.
	f.send(t, 30)
	f.checkOnce(t, f.settled(t))

	// 2. The pages of one replica show decisions made on the others.
	f.checkPagesShowTheFleet(t)

	// 3. Replay from the store finds what replay from the files finds.
	f.checkReplayFromStore(t)

	// 4. The database stops mid-run.
	if err := f.cluster.Stop(); err != nil {
		t.Fatal(err)
	}
	f.send(t, 30) // each answered as before: send fails the test otherwise
	for r := range f.replicas {
		wait.Until(t, time.Minute, f.names[r]+"'s store status showing the outage", func() bool {
			st := f.storeStatus(t, r)
			return num(st["queued"]) > 0 && num(st["writes_failed"]) > 0 && st["last_error"] != nil
		})
		if got := metricValue(t, f.client, f.replicas[r].url, "arbiter_decision_store_queued_records"); got == 0 {
			t.Errorf("%s: arbiter_decision_store_queued_records is 0 during the outage", f.names[r])
		}
		if !strings.Contains(f.replicas[r].stderr.String(), "decision store write failed") {
			t.Errorf("%s logged no failed write during the outage", f.names[r])
		}
	}
	if err := f.cluster.Restart(); err != nil {
		t.Fatal(err)
	}
	f.checkOnce(t, f.settled(t))
	f.checkNoPassword(t) // after an outage's warnings too
}
