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

func TestSet(t *testing.T) {
	n, neg, given := 0, -3, 7
	for _, v := range []*int{&n, &neg} {
		Set(v, 5)
		if *v != 5 {
			t.Errorf("a zero or negative option stays %d, not the default 5", *v)
		}
	}
	if Set(&given, 5); given != 7 {
		t.Errorf("a given option became %d", given)
	}
	var d time.Duration
	if Set(&d, time.Second); d != time.Second {
		t.Errorf("a zero duration stays %s", d)
	}
	s, named := "", "x"
	if Set(&s, "def"); s != "def" {
		t.Errorf("an empty string stays %q", s)
	}
	if Set(&named, "def"); named != "x" {
		t.Errorf("a given string became %q", named)
	}
}
