package defaults

import (
	"testing"
	"time"
)

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
