package engine

import (
	"context"
	"strings"
	"testing"
)

var repoWithTests = Config{Policies: "../policies", Schemas: "../schemas", Tests: "../policy_test"}

// A revision held in memory goes through the same gate as the folders it
// was read from and names the same content.
func TestLoadFilesMatchesFolders(t *testing.T) {
	ctx := context.Background()
	fromDirs, err := Load(ctx, repoWithTests)
	if err != nil {
		t.Fatal(err)
	}
	fs, err := ReadFolders(repoWithTests)
	if err != nil {
		t.Fatal(err)
	}
	fs.Origin, fs.Revision = "bundle", "r-1.2"
	snap, err := LoadFiles(ctx, fs, Config{})
	if err != nil {
		t.Fatal(err)
	}
	if snap.Revision != "r-1.2" || snap.Hash != fromDirs.Revision {
		t.Fatalf("revision %q hash %q, want r-1.2 and the folders' %q", snap.Revision, snap.Hash, fromDirs.Revision)
	}
	if strings.Join(snap.Names(), ",") != strings.Join(fromDirs.Names(), ",") {
		t.Fatalf("decisions %v, want %v", snap.Names(), fromDirs.Names())
	}
	fixtures, err := LoadFixtures("../policy_test")
	if err != nil {
		t.Fatal(err)
	}
	for _, fx := range fixtures {
		if tr := snap.RunFixture(ctx, fx); !tr.Pass {
			t.Errorf("%s: %s", tr.Name, tr.Message)
		}
	}
	if fs.Revision = ""; true {
		snap, err := LoadFiles(ctx, fs, Config{})
		if err != nil || snap.Revision != fromDirs.Revision {
			t.Fatalf("without a revision: %v, revision %q, want the content hash %q", err, snap.Revision, fromDirs.Revision)
		}
	}
}

func TestLoadFilesRefuses(t *testing.T) {
	ctx := context.Background()
	base, err := ReadFolders(repoWithTests)
	if err != nil {
		t.Fatal(err)
	}
	base.Origin = "b"
	cases := []struct {
		name string
		edit func(fs *FileSet)
		want string
	}{
		{"a failing Rego test", func(fs *FileSet) {
			fs.Tests = append(fs.Tests, File{Path: "gate_test.rego", Data: []byte("package gate_test\n\ntest_refuses if false\n")})
		}, "b:gate_test.rego:3: rego gate_test.test_refuses failed"},
		{"a failing fixture", func(fs *FileSet) {
			for i, f := range fs.Tests {
				if strings.HasPrefix(f.Path, "fixtures/") {
					// Every fixture wants a result or an error; wanting the
					// other of the first case fails it.
					d := strings.Replace(string(f.Data), `"want_result"`, `"want_error": {"code": "policy_error"}, "x_was_result"`, 1)
					if d == string(f.Data) {
						d = strings.Replace(string(f.Data), `"want_error"`, `"want_result": {}, "x_was_error"`, 1)
					}
					fs.Tests[i].Data = []byte(d)
					return
				}
			}
		}, "fixture"},
		{"no schemas", func(fs *FileSet) { fs.Schemas = nil }, "undefined schema"},
		{"a revision with a newline", func(fs *FileSet) { fs.Revision = "r1\nforged" }, "revision"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fs := base
			fs.Tests = append([]File(nil), base.Tests...)
			c.edit(&fs)
			_, err := LoadFiles(ctx, fs, Config{})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want a refusal mentioning %q", err, c.want)
			}
		})
	}
}

// An Engine with no Snapshot takes its first one from Activate, keeps it
// when a candidate fails, and reports both; Reload answers the last
// activation.
func TestPushedEngineActivate(t *testing.T) {
	ctx := context.Background()
	e, err := New(ctx, Config{}, Pushed())
	if err != nil || e.Snapshot() != nil {
		t.Fatalf("a pushed engine starts with a snapshot: %v", err)
	}
	fs, err := ReadFolders(repoWithTests)
	if err != nil {
		t.Fatal(err)
	}
	fs.Revision = "one"
	st, err := e.Activate(ctx, "bundle", Files("bundle b", fs))
	if err != nil || !st.OK || !st.Changed || e.Snapshot() == nil || e.Snapshot().Revision != "one" || st.Origin != "bundle b" || e.Snapshot().Origin != "bundle b" {
		t.Fatalf("first activation: %v %+v", err, st)
	}
	bad := fs
	bad.Revision, bad.Schemas = "two", nil
	st, err = e.Activate(ctx, "bundle", Files("bundle b", bad))
	if err == nil || st.OK || len(st.Problems) == 0 || e.Snapshot().Revision != "one" || st.Revision != "one" {
		t.Fatalf("a failed candidate: %+v, serving %s", st, e.Snapshot().Revision)
	}
	if re := e.Reload(ctx, "api"); re.Trigger != "bundle" || re.OK {
		t.Fatalf("a reload of a pushed engine = %+v, want the last activation", re)
	}
	st, err = e.Activate(ctx, "bundle", Files("bundle b", fs))
	if err != nil || !st.OK || st.Changed {
		t.Fatalf("the same revision again: %+v", st)
	}
	if ok, failed := e.ReloadCounts(); ok != 2 || failed != 1 {
		t.Fatalf("counts ok=%d failed=%d, want 2 and 1", ok, failed)
	}
}
