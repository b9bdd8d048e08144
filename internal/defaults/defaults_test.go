package defaults

import (
	"testing"
	"time"
)

func TestPositive(t *testing.T) {
	if got := Positive(0, 5); got != 5 {
		t.Errorf("unset: %d, want the default 5", got)
	}
	if got := Positive(-1, 5); got != 5 {
		t.Errorf("negative: %d, want the default 5", got)
	}
	if got := Positive(3, 5); got != 3 {
		t.Errorf("set: %d, want 3", got)
	}
	if got := Positive(time.Duration(0), time.Second); got != time.Second {
		t.Errorf("duration: %v, want 1s", got)
	}
	if got := Positive(0.25, 0.1); got != 0.25 {
		t.Errorf("float: %v, want 0.25", got)
	}
}
