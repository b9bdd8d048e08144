package engine

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// sourceFile is one file read into memory: everything of a Snapshot is built
// from one read of each file, so the revision names exactly what is compiled.
type sourceFile struct {
	path string // as shown to users: the configured folder joined with rel
	rel  string // slash-separated, relative to the folder
	data []byte
}

// readTree reads every file with one of exts below root, following a root
// that is a symlink (folders swapped in by a symlink flip) and skipping dot
// files and editor leftovers, which are never part of a policy.
func readTree(root string, exts ...string) ([]sourceFile, error) {
	if root == "" {
		return nil, fmt.Errorf("no folder configured")
	}
	real, err := filepath.EvalSymlinks(root)
	if err != nil {
		return nil, err
	}
	var out []sourceFile
	err = filepath.WalkDir(real, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if p != real && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "#") || strings.HasSuffix(name, "~")) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			return nil
		}
		ext := filepath.Ext(name)
		if !contains(exts, ext) {
			return nil
		}
		rel, err := filepath.Rel(real, p)
		if err != nil {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		out = append(out, sourceFile{path: filepath.Join(root, rel), rel: filepath.ToSlash(rel), data: data})
		return nil
	})
	sort.Slice(out, func(i, j int) bool { return out[i].rel < out[j].rel })
	return out, err
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
