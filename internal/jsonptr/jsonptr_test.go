package jsonptr

import "testing"

// TestTokens: the examples of RFC 6901 section 3 and 5, and Unescape
// undoing Escape; "~01" is "~1", not "/".
func TestTokens(t *testing.T) {
	for _, tt := range []struct{ token, escaped string }{
		{"", ""}, {"foo", "foo"}, {"a/b", "a~1b"}, {"m~n", "m~0n"},
		{"~1", "~01"}, {"/~", "~1~0"}, {"c%d", "c%d"}, {" ", " "},
	} {
		if got := Escape(tt.token); got != tt.escaped {
			t.Errorf("Escape(%q) = %q, want %q", tt.token, got, tt.escaped)
		}
		if got := Unescape(tt.escaped); got != tt.token {
			t.Errorf("Unescape(%q) = %q, want %q", tt.escaped, got, tt.token)
		}
	}
	if got := Unescape("~2x~"); got != "~2x~" {
		t.Errorf("Unescape kept no stray tilde: %q", got)
	}
	if got := Join([]string{"a/b", "0", "m~n"}); got != "/a~1b/0/m~0n" {
		t.Errorf("Join: %q", got)
	}
	if got := Join(nil); got != "" {
		t.Errorf("Join(nil): %q", got)
	}
}

// TestSplit: Split undoes Join, and refuses what is no pointer rather than
// reading it as some other one.
func TestSplit(t *testing.T) {
	for _, tt := range []struct {
		pointer string
		tokens  []string
		bad     bool
	}{
		{pointer: "", tokens: nil},
		{pointer: "/", tokens: []string{""}},
		{pointer: "/run/runId", tokens: []string{"run", "runId"}},
		{pointer: "/a~1b/m~0n/~01", tokens: []string{"a/b", "m~n", "~1"}},
		{pointer: "run/runId", bad: true},
		{pointer: "/a~2b", bad: true},
		{pointer: "/a~", bad: true},
		{pointer: "/~0~", bad: true},
	} {
		got, err := Split(tt.pointer)
		if (err != nil) != tt.bad {
			t.Errorf("Split(%q) error %v, want error %v", tt.pointer, err, tt.bad)
			continue
		}
		if tt.bad {
			continue
		}
		if len(got) != len(tt.tokens) {
			t.Errorf("Split(%q) = %q, want %q", tt.pointer, got, tt.tokens)
			continue
		}
		for i := range got {
			if got[i] != tt.tokens[i] {
				t.Errorf("Split(%q) = %q, want %q", tt.pointer, got, tt.tokens)
			}
		}
		if Join(got) != tt.pointer {
			t.Errorf("Join(Split(%q)) = %q", tt.pointer, Join(got))
		}
	}
}
