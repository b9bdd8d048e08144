package policybundle

import (
	"strings"
	"testing"
)

// The scan before OPA's reader passes what OPA's reader would verify, and
// refuses, at the first file that shows it, a bundle signed by another key
// or carrying a file its signature does not list, and one past a limit.
func TestScanBoundsAndVerifiesFirst(t *testing.T) {
	signed := buildSigned(t, "r1", "a")
	added := rewrite(t, signed, func(files map[string][]byte) { files["zz/extra.rego"] = []byte("package zz\n") })
	vc := func(key string) Keys { return verifier(t, key) }
	for _, c := range []struct {
		name string
		raw  []byte
		keys Keys
		lim  Limits
		want string // "" passes
	}{
		{"signed, right key", signed, vc("a"), DefaultLimits, ""},
		{"signed, no key", signed, Keys{}, DefaultLimits, ""}, // OPA's reader refuses it, as OPA does
		{"signed by another key", buildSigned(t, "r1", "b"), vc("a"), DefaultLimits, "bundle signature"},
		{"a file added after signing", added, vc("a"), DefaultLimits, "bundle file zz/extra.rego is not signed"},
		{"over the file count", signed, vc("a"), Limits{Bytes: 1 << 20, UnpackedBytes: 1 << 30, Files: 2}, "more than 2 files"},
		{"over the unpacked size", signed, vc("a"), Limits{Bytes: 1 << 20, UnpackedBytes: 100, Files: 100}, "more than 100 bytes unpacked"},
	} {
		t.Run(c.name, func(t *testing.T) {
			v, err := c.keys.VerificationConfig()
			if err != nil {
				t.Fatal(err)
			}
			err = scan(c.raw, v, c.lim)
			if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
				t.Fatalf("scan: %v, want %q", err, c.want)
			}
		})
	}
}
