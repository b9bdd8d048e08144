package decisionstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/arbiter-dev/arbiter/decisionlog"
	"github.com/arbiter-dev/arbiter/internal/pgtest"
	"github.com/arbiter-dev/arbiter/internal/queue"
	"github.com/arbiter-dev/arbiter/internal/testfiles"
	"github.com/arbiter-dev/arbiter/internal/wait"
)

// The faults of issue 29 the red team could not inject: the database out of
// disk, its connection limit reached, and errors in the middle of a COPY.
// Each test hands the sink records before, during and after the fault, and
// checks the account: every record handed over is in the table or counted
// as dropped by a reason (in Stats and in the metric alike), none twice,
// and the records queued during the fault are written once it clears.

// recordBytes is about one decision(i)'s QueueSize: the queues below hold
// about 40 records.
const recordBytes = 560

// feeder hands the sink numbered records and remembers how many.
type feeder struct {
	s      *Sink
	handed int
}

// write hands n records, each with caller (decision(i)'s when "").
func (f *feeder) write(n int, caller string) (first string) {
	recs := make([]decisionlog.Record, n)
	for i := range recs {
		recs[i] = decision(f.handed)
		if caller != "" {
			recs[i].Caller = caller
		}
		f.handed++
	}
	f.s.Write(recs)
	return recs[0].DecisionID
}

// flood hands the sink three times what its queue holds, during a fault,
// and checks that Write returned at once for each (it is the pipeline's
// call, before nothing waits on it: the answer path) and that what the
// queue could not take is counted as full, its bound kept.
func (f *feeder) flood(t *testing.T) {
	t.Helper()
	before := f.s.Stats().Dropped[queue.Full]
	for range 12 {
		f.write(10, "")
	}
	st := f.s.Stats()
	if st.Dropped[queue.Full] <= before || st.Queued == 0 {
		t.Fatalf("flooded during the fault: %+v; want records queued and the rest dropped as full", st)
	}
	if st.QueuedBytes > st.QueueBytes {
		t.Fatalf("queued %d bytes, past the bound %d", st.QueuedBytes, st.QueueBytes)
	}
	t.Logf("during the fault, %d handed: written %d, queued %d (%d of %d bytes), dropped full %d, failed writes %d, last error %q",
		f.handed, st.Written, st.Queued, st.QueuedBytes, st.QueueBytes, st.Dropped[queue.Full], st.WritesFailed, st.LastError)
}

// accounted waits until nothing is queued and every record handed over is
// written or dropped, then checks the table against it: each written record
// once, and the metric saying what Stats says.
func (f *feeder) accounted(t *testing.T, url string) SinkStats {
	t.Helper()
	total := uint64(f.handed)
	st := waitFor(t, f.s, fmt.Sprintf("each of %d records written or dropped", total), func(st SinkStats) bool {
		return st.Queued == 0 && st.Written+st.DroppedTotal() == total
	})
	// Each record is handed over once: each written one is a row (a
	// duplicate is one whose first write's commit answer was lost).
	if n := count(t, url, ""); uint64(n) != st.Written {
		t.Fatalf("%d rows; the sink says %d written (%d duplicates), %v dropped, of %d handed", n, st.Written, st.Duplicates, st.Dropped, total)
	}
	if n := count(t, url, `WHERE decision_id IN (SELECT decision_id FROM arbiter_store.records GROUP BY decision_id HAVING count(*) > 1)`); n != 0 {
		t.Fatalf("%d rows of decision ids written twice", n)
	}
	m := testfiles.Counters(t, f.s.Collector())
	for _, r := range DropReasons {
		if k := `arbiter_decision_store_dropped_total{reason="` + r + `"}`; m[k] != float64(st.Dropped[r]) {
			t.Errorf("%s %v, Stats %d", k, m[k], st.Dropped[r])
		}
	}
	if m["arbiter_decision_store_written_total"] != float64(st.Written) {
		t.Errorf("arbiter_decision_store_written_total %v, Stats %d", m["arbiter_decision_store_written_total"], st.Written)
	}
	t.Logf("handed %d: written %d (duplicates %d), dropped %v, writes ok %d, failed %d", total, st.Written, st.Duplicates, st.Dropped, st.WritesOK, st.WritesFailed)
	return st
}

// exec runs statements on the database at url.
func execSQL(t *testing.T, url string, stmts ...string) {
	t.Helper()
	for _, q := range stmts {
		if _, err := open(t, url).Pool().Exec(ctxT(t), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// written reports whether the record id is in the table.
func written(t *testing.T, url, id string) bool {
	return count(t, url, `WHERE decision_id = '`+id+`'`) == 1
}

// TestSinkDiskFull: the records' tablespace is on a real 16 MiB ext4
// volume, which the test fills (as root, a loop device). The database
// refuses the writes (could not extend file: No space left on device,
// SQLSTATE 53100) and stays up; the sink retries, Write keeps returning at
// once, what the queue cannot hold is counted (full); once the volume has
// room again, every queued record is written.
func TestSinkDiskFull(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a small volume needs root")
	}
	dir, err := os.MkdirTemp("", "arbiter-vol-") // the server's user walks into it
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	img, mnt := filepath.Join(dir, "vol.img"), filepath.Join(dir, "vol")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range [][]string{{"truncate", "-s", "16M", img}, {"mkfs.ext4", "-q", "-F", "-m", "0", img}, {"mount", "-o", "loop", img, mnt}} {
		if out, err := exec.Command(c[0], c[1:]...).CombinedOutput(); err != nil {
			t.Skipf("no small volume here (%s: %v %s): see TestSinkDiskFull in docs/RELIABILITY.md", c[0], err, out)
		}
	}
	// Registered after the folder's removal and before the cluster's own
	// cleanup: run after the cluster stops, before the folder goes.
	t.Cleanup(func() {
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Errorf("umount: %v %s", err, out)
		}
	})
	own := pgtest.Start(t) // a tablespace of its own, on the volume
	ts := filepath.Join(mnt, "ts")
	if err := os.Mkdir(ts, 0o700); err != nil {
		t.Fatal(err)
	}
	if u, err := user.Lookup("postgres"); err == nil {
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(ts, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	url := own.DB(t)
	db := url[strings.LastIndex(url, "/")+1 : strings.Index(url, "?")]
	execSQL(t, url, `CREATE TABLESPACE small LOCATION '`+ts+`'`, `ALTER DATABASE `+db+` SET default_tablespace = small`)

	f := &feeder{s: newSink(t, url, SinkConfig{QueueBytes: 40 * recordBytes, BatchRecords: 10})}
	f.write(20, "")
	waitFor(t, f.s, "20 written", func(st SinkStats) bool { return st.Written == 20 })
	if n := count(t, url, `r JOIN pg_class c ON c.oid = r.tableoid JOIN pg_tablespace s ON s.oid = c.reltablespace WHERE s.spcname = 'small'`); n != 20 {
		t.Fatalf("%d rows on the small volume; want all 20", n)
	}

	filler := fill(t, mnt)
	var failing SinkStats
	var during string // a record queued during the fault
	if _, ok := wait.For(30*time.Second, func() bool {
		during = f.write(1, "") // until the pages' free room is used up too
		failing = f.s.Stats()
		return failing.WritesFailed > 0 && failing.Queued > 0
	}); !ok {
		t.Fatalf("the full volume never failed a write: %+v", failing)
	}
	if !strings.Contains(failing.LastError, "53100") || failing.DroppedTotal() != 0 {
		t.Fatalf("%+v; want disk_full (SQLSTATE 53100), and every record handed so far written or queued", failing)
	}
	f.flood(t)

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	st := f.accounted(t, url)
	if !written(t, url, during) || st.Dropped[DropRejected] != 0 || st.Dropped[DropShutdown] != 0 || st.LastError != "" {
		t.Fatalf("after the volume has room: %+v, %s written %v; want the records queued during the fault written, drops only full", st, during, written(t, url, during))
	}
}

// fill writes a file on the volume at mnt until it has no room left, and
// returns its name.
func fill(t *testing.T, mnt string) string {
	t.Helper()
	name := filepath.Join(mnt, "filler")
	fh, err := os.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	buf := make([]byte, 64<<10)
	for size := len(buf); size >= 512; {
		if _, err := fh.Write(buf[:size]); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			size /= 2
		}
	}
	if err := fh.Sync(); err != nil && !errors.Is(err, syscall.ENOSPC) {
		t.Fatal(err)
	}
	return name
}

// TestSinkConnectionLimit: the sink's role may hold one connection, and
// another client holds it; the sink's own connection is cut. Each connect
// is refused (too many connections for role, SQLSTATE 53300): the sink
// retries, Write keeps returning at once, what the queue cannot hold is
// counted (full); once the other client lets go, every queued record is
// written.
func TestSinkConnectionLimit(t *testing.T) {
	t.Parallel()
	url := cluster.DB(t)
	db := url[strings.LastIndex(url, "/")+1 : strings.Index(url, "?")]
	role := "w_" + db
	// Not a superuser, whom no limit applies to; the owner of the
	// database, which its sink migrates.
	admin, err := pgx.Connect(ctxT(t), url)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	for _, q := range []string{`CREATE ROLE ` + role + ` LOGIN`, `ALTER DATABASE ` + db + ` OWNER TO ` + role} {
		if _, err := admin.Exec(ctxT(t), q); err != nil {
			t.Fatal(err)
		}
	}
	roleURL := strings.Replace(url, "postgres@", role+"@", 1)

	f := &feeder{s: newSink(t, roleURL, SinkConfig{QueueBytes: 40 * recordBytes, BatchRecords: 10})}
	f.write(20, "")
	waitFor(t, f.s, "20 written", func(st SinkStats) bool { return st.Written == 20 })

	holder, err := pgx.Connect(ctxT(t), roleURL)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(context.Background())
	execSQL(t, url, `ALTER ROLE `+role+` CONNECTION LIMIT 1`,
		fmt.Sprintf(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '%s' AND pid <> %d`, role, holder.PgConn().PID()))

	during := f.write(10, "")
	failing := waitFor(t, f.s, "a write refused for the connection limit", func(st SinkStats) bool {
		return strings.Contains(st.LastError, "53300")
	})
	if failing.Written != 20 {
		t.Fatalf("written %d with no connection to be had; want 20", failing.Written)
	}
	f.flood(t)

	if err := holder.Close(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	st := f.accounted(t, url)
	if !written(t, url, during) || st.Dropped[DropRejected] != 0 || st.Dropped[DropShutdown] != 0 || st.LastError != "" {
		t.Fatalf("after the connection is let go: %+v, %s written %v; want the records queued during the fault written, drops only full", st, during, written(t, url, during))
	}
}

// TestSinkDataErrorMidCopy: an operator's trigger refuses three rows in
// the middle of a batch with a data exception (SQLSTATE 22023): those
// three are dropped and counted (rejected), the others written at once.
// Then it raises an error of no data class (RAISE EXCEPTION's P0001) on
// one row: the sink cannot tell it from an outage and retries, records
// wait, the overflow is counted (full), and when the trigger is fixed
// every queued record is written.
func TestSinkDataErrorMidCopy(t *testing.T) {
	t.Parallel()
	url := cluster.DB(t)
	f := &feeder{s: newSink(t, url, SinkConfig{QueueBytes: 40 * recordBytes, BatchRecords: 10})}
	f.write(10, "")
	waitFor(t, f.s, "10 written", func(st SinkStats) bool { return st.Written == 10 }) // migrated
	execSQL(t, url, `CREATE FUNCTION arbiter_store.refuse() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF NEW.caller = 'poison' THEN RAISE EXCEPTION 'poisoned row' USING ERRCODE = 'invalid_parameter_value'; END IF;
			RETURN NEW;
		END $$`,
		`CREATE TRIGGER refuse BEFORE INSERT ON arbiter_store.records FOR EACH ROW EXECUTE FUNCTION arbiter_store.refuse()`)

	failedBefore := f.s.Stats().WritesFailed
	f.write(3, "")
	f.write(1, "poison")
	f.write(2, "")
	f.write(1, "poison")
	f.write(2, "")
	f.write(1, "poison") // one batch of 10, three refused
	st := waitFor(t, f.s, "three rejected, the rest written", func(st SinkStats) bool {
		return st.Queued == 0 && st.Dropped[DropRejected] == 3 && st.Written == 17
	})
	// The error's context names the trigger first, then the COPY's line:
	// one failed write per refused record, not a halving of the batch.
	if n := st.WritesFailed - failedBefore; n != 3 {
		t.Errorf("a batch of 10 with 3 rows refused by a trigger mid-COPY: %d failed writes; want one per refused record", n)
	}

	execSQL(t, url, `CREATE OR REPLACE FUNCTION arbiter_store.refuse() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF NEW.caller = 'poison' THEN RAISE EXCEPTION 'poisoned row'; END IF;
			RETURN NEW;
		END $$`)
	during := f.write(5, "")
	f.write(1, "poison")
	waitFor(t, f.s, "a write failing on P0001", func(st SinkStats) bool { return strings.Contains(st.LastError, "P0001") })
	f.flood(t)
	// The trigger is fixed by replacing its function: dropping the trigger
	// would take the table's lock against the sink's retrying COPY and can
	// deadlock with it (40P01, seen in CI).
	execSQL(t, url, `CREATE OR REPLACE FUNCTION arbiter_store.refuse() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			RETURN NEW;
		END $$`)
	st = f.accounted(t, url)
	if !written(t, url, during) || st.Dropped[DropRejected] != 3 || st.Dropped[DropShutdown] != 0 || st.LastError != "" {
		t.Fatalf("after the trigger is fixed: %+v, %s written %v; want the records queued during the fault written", st, during, written(t, url, during))
	}
}

// TestSinkBackendTerminatedMidCopy: a COPY is held in the middle of its
// batch (a trigger waits on an advisory lock the test holds, after the
// batch's first rows are in), and its backend is terminated
// (pg_terminate_backend: SQLSTATE 57P01). While it is held, Write returns
// at once and counts what the queue cannot hold (full): a stalled
// database never holds the pipeline, hence no answer. The batch's rows
// already sent are rolled back with it and written once by the retry.
func TestSinkBackendTerminatedMidCopy(t *testing.T) {
	t.Parallel()
	url := cluster.DB(t)
	f := &feeder{s: newSink(t, url, SinkConfig{QueueBytes: 40 * recordBytes, BatchRecords: 10})}
	f.write(10, "")
	waitFor(t, f.s, "10 written", func(st SinkStats) bool { return st.Written == 10 }) // migrated
	execSQL(t, url, `CREATE FUNCTION arbiter_store.hold() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF NEW.caller = 'hold' THEN PERFORM pg_advisory_xact_lock(29); END IF;
			RETURN NEW;
		END $$`,
		`CREATE TRIGGER hold BEFORE INSERT ON arbiter_store.records FOR EACH ROW EXECUTE FUNCTION arbiter_store.hold()`)
	locker, err := pgx.Connect(ctxT(t), url)
	if err != nil {
		t.Fatal(err)
	}
	defer locker.Close(context.Background())
	if _, err := locker.Exec(ctxT(t), `SELECT pg_advisory_lock(29)`); err != nil {
		t.Fatal(err)
	}
	held := func(not int32) int32 { // the pid of a COPY waiting on the lock, other than not
		var pid int32
		wait.Until(t, 30*time.Second, "a COPY held on the advisory lock", func() bool {
			err := locker.QueryRow(ctxT(t), `SELECT pid FROM pg_stat_activity WHERE datname = current_database()
				AND wait_event = 'advisory' AND query ILIKE 'copy%' AND pid <> $1`, not).Scan(&pid)
			return err == nil
		})
		return pid
	}

	first := f.write(5, "")
	f.write(1, "hold")
	f.write(4, "")
	pid := held(0)
	f.flood(t)
	if _, err := locker.Exec(ctxT(t), `SELECT pg_terminate_backend($1)`, pid); err != nil {
		t.Fatal(err)
	}
	waitFor(t, f.s, "the terminated COPY failed", func(st SinkStats) bool { return strings.Contains(st.LastError, "57P01") })
	held(pid) // the retry, held on the same row
	if _, err := locker.Exec(ctxT(t), `SELECT pg_advisory_unlock(29)`); err != nil {
		t.Fatal(err)
	}
	st := f.accounted(t, url)
	if !written(t, url, first) || st.Duplicates != 0 || st.Dropped[DropRejected] != 0 || st.Dropped[DropShutdown] != 0 {
		t.Fatalf("after the lock is let go: %+v, %s written %v; want the held batch written once", st, first, written(t, url, first))
	}
}
