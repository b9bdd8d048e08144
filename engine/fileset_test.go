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
