package redact

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
)

// TestURL: every query value, a password and a fragment are hidden,
// whatever the scheme; scheme, user, host, path and keys stay readable.
func TestURL(t *testing.T) {
	for in, want := range map[string]string{
		"https://b.s3.amazonaws.com/arbiter.tar.gz?X-Amz-Algorithm=AWS4&X-Amz-Signature=s3cr3t&X-Amz-Credential=AKIA%2F1": "https://b.s3.amazonaws.com/arbiter.tar.gz?X-Amz-Algorithm=xxxxx&X-Amz-Signature=xxxxx&X-Amz-Credential=xxxxx",
		"http://h:8080/bundles/b.tar.gz?token=s3cr3t":      "http://h:8080/bundles/b.tar.gz?token=xxxxx",
		"http://h/b.tar.gz?s3cr3t":                         "http://h/b.tar.gz?xxxxx",
		"http://h/b.tar.gz?a=1&&b#s3cr3t":                  "http://h/b.tar.gz?a=xxxxx&&xxxxx#xxxxx",
		"oci://user:s3cr3t@registry.example/policies:live": "oci://user:xxxxx@registry.example/policies:live",
		"postgres://u:s3%40cr3t@h:5432/db?sslmode=disable": "postgres://u:xxxxx@h:5432/db?sslmode=xxxxx",
		"postgres://u@h/db?password=s3cr3t":                "postgres://u@h/db?password=xxxxx",
		"https://registry.example/policies:live":           "https://registry.example/policies:live",
		"host=h password=s3cr3t":                           "(a string that is not a URL)",
		"http://h/%zz?token=s3cr3t":                        "(a string that is not a URL)",
	} {
		if got := URL(in); got != want || strings.Contains(got, "s3cr3t") || strings.Contains(got, "s3@cr3t") {
			t.Errorf("URL(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestIn: an error that quotes the URL (as Go's HTTP client does, the
// password decoded or not) shows it redacted, and a log line through
// Logger too, in its message and its attributes.
func TestIn(t *testing.T) {
	raw := "http://u:p%40ss@h:1/b.tar.gz?X-Amz-Signature=s3cr3t&token=t0k"
	msg := `Get "http://h:1/b.tar.gz?X-Amz-Signature=s3cr3t&token=t0k": dial tcp: connection refused; user u:p@ss`
	want := `Get "http://h:1/b.tar.gz?X-Amz-Signature=xxxxx&token=xxxxx": dial tcp: connection refused; user u:xxxxx`
	if got := In(msg, raw); got != want {
		t.Errorf("In = %q\nwant %q", got, want)
	}
	var b bytes.Buffer
	l := Logger(slog.New(slog.NewTextHandler(&b, nil)), raw).With("url", raw)
	l.Warn("Bundle download failed: "+msg, "err", errors.New(msg), slog.Group("g", "u", raw), "n", 3)
	for _, s := range []string{"s3cr3t", "t0k", "p@ss", "p%40ss"} {
		if strings.Contains(b.String(), s) {
			t.Errorf("the log line shows %q: %s", s, b.String())
		}
	}
	if !strings.Contains(b.String(), "n=3") || !strings.Contains(b.String(), "X-Amz-Signature=xxxxx") {
		t.Errorf("the log line lost what it may show: %s", b.String())
	}
}
