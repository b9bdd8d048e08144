package queue

import (
	"sync"
	"testing"
)

func TestBoundsAndDropReasons(t *testing.T) {
	for _, tc := range []struct {
		name  string
		lim   Limits
		sizes []int64
		kept  int
	}{
		{"by count", Limits{Items: 2}, []int64{1, 1, 1}, 2},
		{"by bytes", Limits{Bytes: 10}, []int64{4, 4, 4}, 2},
		{"an item over the byte bound alone is kept when empty", Limits{Bytes: 10}, []int64{30, 1}, 1},
		{"unbounded", Limits{}, []int64{1 << 40, 1 << 40}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := New[int](tc.lim)
			kept := 0
			for i, s := range tc.sizes {
				if ok, _ := q.Put(i, s); ok {
					kept++
				}
			}
			if kept != tc.kept || q.Len() != tc.kept {
				t.Fatalf("kept %d (len %d), want %d", kept, q.Len(), tc.kept)
			}
			if got := q.Dropped(Full); got != uint64(len(tc.sizes)-tc.kept) {
				t.Errorf("dropped as full %d, want %d", got, len(tc.sizes)-tc.kept)
			}
		})
	}
}

func TestDefaults(t *testing.T) {
	def := Limits{Items: 64, Bytes: 1 << 20}
	for _, tc := range []struct{ in, want Limits }{
		{Limits{}, def},
		{Limits{Items: -1, Bytes: -5, HoldBytes: true}, Limits{Items: 64, Bytes: 1 << 20, HoldBytes: true}},
		{Limits{Items: 3}, Limits{Items: 3, Bytes: 1 << 20}},
	} {
		if got := tc.in.Or(def); got != tc.want {
			t.Errorf("%+v.Or(%+v) = %+v, want %+v", tc.in, def, got, tc.want)
		}
	}
}

func TestTakeReleasesBytesAndKeepsOrder(t *testing.T) {
	q := New[int](Limits{Bytes: 10})
	for i := range 5 {
		q.Put(i, 2)
	}
	if ok, why := q.Put(9, 2); ok || why != Full {
		t.Fatalf("put into a full queue: %v %q", ok, why)
	}
	got, closed := q.Take(nil, 3)
	if closed || len(got) != 3 || got[0] != 0 || got[2] != 2 || q.Bytes() != 4 {
		t.Fatalf("take 3: %v closed=%v bytes=%d", got, closed, q.Bytes())
	}
	if ok, _ := q.Put(5, 6); !ok {
		t.Fatal("the bytes a take released were not freed")
	}
	got, _ = q.Take(got[:0], 0)
	if len(got) != 3 || got[0] != 3 || got[2] != 5 {
		t.Fatalf("take all: %v", got)
	}
	q.Close()
	if _, closed := q.Take(nil, 0); !closed {
		t.Fatal("an empty closed queue does not say closed")
	}
	if ok, why := q.Put(1, 1); ok || why != Closed || q.Dropped(Closed) != 1 {
		t.Fatalf("put after close: %v %q", ok, why)
	}
	q.Drop("write_failed", 2)
	q.Put(2, 1)
	if q.Dropped("write_failed") != 2 || q.Dropped(Closed) != 2 || q.Dropped(Full) != 1 {
		t.Fatalf("dropped by reason: %d failed, %d closed, %d full; want 2, 2, 1", q.Dropped("write_failed"), q.Dropped(Closed), q.Dropped(Full))
	}
}

// TestEveryItemIsTakenOnceOrDropped: concurrent producers and consumers;
// every item put is taken exactly once or counted as dropped.
func TestEveryItemIsTakenOnceOrDropped(t *testing.T) {
	q := New[int](Limits{Items: 8})
	const producers, each = 4, 500
	var wg, cons sync.WaitGroup
	seen := make([]int, producers*each)
	var mu sync.Mutex
	for range 2 {
		cons.Add(1)
		go func() {
			defer cons.Done()
			var buf []int
			for {
				var closed bool
				buf, closed = q.Take(buf[:0], 3)
				if closed {
					return
				}
				mu.Lock()
				for _, v := range buf {
					seen[v]++
				}
				mu.Unlock()
				if len(buf) == 0 {
					<-q.Ready()
				}
			}
		}()
	}
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				q.Put(p*each+i, 1)
			}
		}()
	}
	wg.Wait()
	q.Close()
	cons.Wait()
	taken := 0
	for v, n := range seen {
		if n > 1 {
			t.Fatalf("item %d taken %d times", v, n)
		}
		taken += n
	}
	if uint64(taken)+q.Dropped(Full) != producers*each {
		t.Fatalf("taken %d + dropped %d != %d", taken, q.Dropped(Full), producers*each)
	}
}

// TestHoldBytes: what a consumer took still counts against the byte bound
// until it says it is done with it.
func TestHoldBytes(t *testing.T) {
	q := New[int](Limits{Bytes: 10, HoldBytes: true})
	q.Put(1, 6)
	q.Take(nil, 0)
	if ok, why := q.Put(2, 6); ok || why != Full {
		t.Fatalf("a held item's bytes were released at take: %v %q", ok, why)
	}
	q.Done(6)
	if ok, _ := q.Put(2, 6); !ok {
		t.Fatal("Done did not release the bytes")
	}
}

// TestReserveHoldsRoomUntilPutOrDone: reserved bytes count against the
// bound before the item exists, so that the caller knows at once whether
// it will be kept; they become the item's (PutReserved) or are released
// (Done). A refused reservation counts nothing: its caller does.
func TestReserveHoldsRoomUntilPutOrDone(t *testing.T) {
	q := New[int](Limits{Bytes: 10, HoldBytes: true})
	if ok, _ := q.Reserve(6); !ok {
		t.Fatal("an empty queue refused a reservation")
	}
	if ok, why := q.Reserve(6); ok || why != Full || q.Dropped(Full) != 0 {
		t.Fatalf("a reservation past the bound: %v %q, %d counted", ok, why, q.Dropped(Full))
	}
	if ok, _ := q.Put(1, 6); ok {
		t.Fatal("a put took the room of a reservation")
	}
	q.PutReserved(7, 6)
	if q.Len() != 1 || q.Bytes() != 6 {
		t.Fatalf("after PutReserved: len %d bytes %d, want 1 and 6", q.Len(), q.Bytes())
	}
	if ok, _ := q.Reserve(4); !ok {
		t.Fatal("the room left was refused")
	}
	q.Done(4) // released unused
	got, _ := q.Take(nil, 0)
	if len(got) != 1 || got[0] != 7 || q.Bytes() != 6 {
		t.Fatalf("took %v, bytes %d held; want [7] and 6", got, q.Bytes())
	}
	q.Done(6)
	q.Close()
	if ok, why := q.Reserve(1); ok || why != Closed {
		t.Fatalf("a reservation after Close: %v %q", ok, why)
	}
}
