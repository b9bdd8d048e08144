package engine

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// TestViolationsAreBounded: a small body with 200,000 failing leaves is
// answered with at most MaxViolations (+1 summary) violations (listing them
// all once took 3.3 s and 627 MB for a 600 KB body).
func TestViolationsAreBounded(t *testing.T) {
	s := mustLoad(t, quotaConfig(quota))
	var extra strings.Builder
	for i := range 200000 {
		fmt.Fprintf(&extra, `,"k%d":{}`, i)
	}
	for _, wrapped := range []bool{false, true} {
		body := `{"tenant":"t","used":1` + extra.String() + `}`
		if wrapped {
			body = `{"input":` + body + `}`
		}
		var err error
		allocated := allocatedBy(func() {
			_, err = s.Decide(context.Background(), "quota_check", []byte(body), Options{DataAPIBody: wrapped})
		})
		// Memory, not time, is the bound checked: every violation listed
		// would cost hundreds of bytes each; the bound is 36 per byte of the body (27 measured;
		// 41 when every violation was listed).
		if allocated > 36*uint64(len(body)) {
			t.Errorf("rejecting a %d KB body allocated %d MB", len(body)>>10, allocated>>20)
		}
		t.Logf("wrapped=%v: %d KB body, %d MB allocated", wrapped, len(body)>>10, allocated>>20)
		e := AsError(err)
		if e.Code != CodeInputSchemaInvalid || len(e.Violations) != MaxViolations+1 {
			t.Fatalf("got %s with %d violations", e.Code, len(e.Violations))
		}
		if last := e.Violations[MaxViolations]; last.Path != "" || !strings.Contains(last.Message, "199900 more violations not listed") {
			t.Errorf("last violation = %+v", last)
		}
		if e.Violations[0].Path != "/k0" {
			t.Errorf("first violation at %q", e.Violations[0].Path)
		}
	}
}

// allocatedBy returns the bytes f allocated on the heap (with whatever else
// ran meanwhile: an upper bound).
func allocatedBy(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}
