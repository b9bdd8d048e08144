package policybundle

import (
	"encoding/json"
	"path"
	"sort"
	"testing"
)

// firstFile returns the first path of files, in sorted order, that matches
// pattern (path.Match): tests tamper with whatever decision the repository
// has, never one they name.
func firstFile(t testing.TB, files map[string][]byte, pattern string) string {
	t.Helper()
	var names []string
	for p := range files {
		if ok, _ := path.Match(pattern, p); ok {
			names = append(names, p)
		}
	}
	if len(names) == 0 {
		t.Fatalf("no file matching %s in the bundle", pattern)
	}
	sort.Strings(names)
	return names[0]
}

// withMember returns the JSON object b with one more member: a value edit
// that no canonical hashing can hide.
func withMember(t testing.TB, b []byte) []byte {
	t.Helper()
	var obj map[string]any
	if err := json.Unmarshal(b, &obj); err != nil {
		t.Fatal(err)
	}
	obj["x-tampered"] = true
	out, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
