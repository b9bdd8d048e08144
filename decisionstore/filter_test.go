package decisionstore

import "testing"

// InputMatch compares numbers by value, exactly, as PostgreSQL's numeric
// does in the store: a filter selects the same records from the ring of a
// server without a store. A comparison through 64-bit floats matched 21
// significant digits that differ in the last one.
func TestInputMatchComparesNumbersExactly(t *testing.T) {
	for _, c := range []struct {
		input, filter string
		want          bool
	}{
		{`{"n":42}`, `/n = 42.0`, true},
		{`{"n":1e2}`, `/n = 100`, true},
		{`{"n":-0.5}`, `/n = -5e-1`, true},
		{`{"n":123456789012345678901}`, `/n = 123456789012345678902`, false},
		{`{"n":1.00000000000000000001}`, `/n = 1`, false},
		{`{"n":"42"}`, `/n = 42`, false},
	} {
		m, err := ParseInputMatch(c.filter)
		if err != nil {
			t.Fatalf("%s: %v", c.filter, err)
		}
		if got := m.Match([]byte(c.input)); got != c.want {
			t.Errorf("%s on %s: %v, want %v", c.filter, c.input, got, c.want)
		}
	}
}
