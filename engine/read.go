package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
)

// DefaultMaxFileBytes caps one policy, data, schema or test file when
// Config leaves MaxFileBytes zero: far above any hand-written file, and low
// enough that a file swapped for something huge cannot take the process down.
const DefaultMaxFileBytes = 32 << 20

// sourceFile is one file read into memory: everything of a Snapshot is built
// from one read of each file, so the revision names exactly what is compiled.
type sourceFile struct {
	path string // as shown to users: the configured folder joined with rel
	rel  string // slash-separated, relative to the folder
	data []byte
}

// SkippedFile is a file with a policy extension that was not read because it
// is not a regular file (a FIFO, a device, a socket, a symlink to one of
// them): reading one can block forever or never end.
type SkippedFile struct {
	File   string `json:"file"`
	Reason string `json:"reason"`
}

// treeReader reads the files of a Snapshot's folders: regular files only,
// each at most maxFile bytes, and never past ctx.
type treeReader struct {
	ctx     context.Context
	maxFile int64
	skipped []SkippedFile
}

func newTreeReader(ctx context.Context, cfg Config) *treeReader {
	max := cfg.MaxFileBytes
	if max <= 0 {
		max = DefaultMaxFileBytes
	}
	return &treeReader{ctx: ctx, maxFile: max}
}

// read reads every file with one of exts below root, following a root that
// is a symlink (folders swapped in by a symlink flip) and skipping dot files
// and editor leftovers, which are never part of a policy. A file over the
// size cap is a problem, not a skip: leaving out a file its author meant to
// load would change what the policy decides.
func (r *treeReader) read(root string, exts ...string) ([]sourceFile, []Problem) {
	if root == "" {
		return nil, []Problem{{Message: "no folder configured"}}
	}
	real, err := filepath.EvalSymlinks(root)
	if err != nil {
		return nil, []Problem{{File: root, Message: err.Error()}}
	}
	var out []sourceFile
	var probs []Problem
	err = filepath.WalkDir(real, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := r.ctx.Err(); err != nil {
			return err
		}
		name := d.Name()
		if p != real && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "#") || strings.HasSuffix(name, "~")) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() || !slices.Contains(exts, filepath.Ext(name)) {
			return nil
		}
		rel, err := filepath.Rel(real, p)
		if err != nil {
			return err
		}
		shown := filepath.Join(root, rel)
		data, skip, err := r.readFile(p)
		switch {
		case skip != "":
			r.skipped = append(r.skipped, SkippedFile{File: shown, Reason: skip})
		case err != nil:
			probs = append(probs, Problem{File: shown, Message: err.Error()})
		default:
			out = append(out, sourceFile{path: shown, rel: filepath.ToSlash(rel), data: data})
		}
		return nil
	})
	if err != nil {
		probs = append(probs, Problem{File: root, Message: err.Error()})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].rel < out[j].rel })
	return out, probs
}

// readFile reads one regular file of at most maxFile bytes. It returns why
// the file was skipped when it is not a regular file. The file is opened
// without blocking and checked again once open, so that a FIFO swapped in
// after the first look cannot hang the reader.
func (r *treeReader) readFile(p string) (data []byte, skip string, err error) {
	st, err := os.Stat(p) // follows symlinks: a link to /dev/zero is a device
	if err != nil {
		return nil, "", err
	}
	if !st.Mode().IsRegular() {
		return nil, "not a regular file (" + st.Mode().Type().String() + ")", nil
	}
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, "", err
	}
	defer f.Close()
	if st, err = f.Stat(); err != nil {
		return nil, "", err
	}
	if !st.Mode().IsRegular() {
		return nil, "not a regular file (" + st.Mode().Type().String() + ")", nil
	}
	if st.Size() > r.maxFile {
		return nil, "", fmt.Errorf("%d bytes is over the limit of %d bytes for one file", st.Size(), r.maxFile)
	}
	data, err = io.ReadAll(io.LimitReader(f, r.maxFile+1))
	if err != nil {
		return nil, "", err
	}
	if int64(len(data)) > r.maxFile {
		return nil, "", errors.New("the file grew over the size limit while being read")
	}
	return data, "", nil
}
