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

	"github.com/arbiter-dev/arbiter/internal/defaults"
)

// treeReader reads the files of a Snapshot's folders: regular files only,
// each at most maxFile bytes, and never past ctx.
type treeReader struct {
	ctx     context.Context
	maxFile int64
	skipped []SkippedFile
}

func newTreeReader(ctx context.Context, cfg Config) *treeReader {
	return &treeReader{ctx: ctx, maxFile: defaults.Positive(cfg.MaxFileBytes, DefaultMaxFileBytes)}
}

// read reads every file with one of exts below root, following a root that
// is a symlink (folders swapped in by a symlink flip) and skipping dot files
// and editor leftovers, which are never part of a policy. A file over the
// size cap is a problem, not a skip: leaving out a file its author meant to
// load would change what the policy decides. So is a link that leaves the
// folder: only files inside it are read (through an os.Root, so that a link
// swapped in after the check cannot lead out either), and a candidate's
// folder (POST /v1/shadow names one) cannot lend it /proc/self/environ. A
// link inside the folder (a Kubernetes ConfigMap's ..data/) is followed.
func (r *treeReader) read(root string, exts ...string) ([]sourceFile, []Problem) {
	if root == "" {
		return nil, []Problem{{Message: "no folder configured"}}
	}
	real, err := filepath.EvalSymlinks(root)
	if err != nil {
		return nil, []Problem{{File: root, Message: err.Error()}}
	}
	dir, err := os.OpenRoot(real)
	if err != nil {
		return nil, []Problem{{File: root, Message: err.Error()}}
	}
	defer dir.Close()
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
		file := rel
		if d.Type()&fs.ModeSymlink != 0 {
			target, in := linkTarget(real, p)
			if !in {
				// Not read: a link out to a device or a FIFO is skipped,
				// as one inside is; a link out to a file refuses the
				// revision.
				if st, err := os.Stat(p); err == nil && !st.Mode().IsRegular() {
					r.skipped = append(r.skipped, SkippedFile{File: shown, Reason: notRegular(st)})
				} else {
					probs = append(probs, Problem{File: shown, Message: "a link that leaves its folder: only files inside the folder are read"})
				}
				return nil
			}
			file = target // an absolute link within the folder is read too
		}
		data, skip, err := r.readFile(dir, file)
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

func notRegular(st fs.FileInfo) string {
	return "not a regular file (" + st.Mode().Type().String() + ")"
}

// linkTarget returns the file the link p leads to, relative to the folder
// real (itself resolved), and whether it is inside it. A broken link is
// its own name, inside: it fails when read.
func linkTarget(real, p string) (string, bool) {
	rel, _ := filepath.Rel(real, p)
	target, err := filepath.EvalSymlinks(p)
	if err != nil {
		return rel, true
	}
	rel, err = filepath.Rel(real, target)
	return rel, err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// readFile reads the regular file rel of dir, of at most maxFile bytes. It returns why
// the file was skipped when it is not a regular file. The file is opened
// without blocking and checked again once open, so that a FIFO swapped in
// after the first look cannot hang the reader.
func (r *treeReader) readFile(dir *os.Root, rel string) (data []byte, skip string, err error) {
	st, err := dir.Stat(rel) // follows symlinks inside dir: a link to a FIFO is a FIFO
	if err != nil {
		return nil, "", err
	}
	if !st.Mode().IsRegular() {
		return nil, notRegular(st), nil
	}
	f, err := dir.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, "", err
	}
	defer f.Close()
	if st, err = f.Stat(); err != nil {
		return nil, "", err
	}
	if !st.Mode().IsRegular() {
		return nil, notRegular(st), nil
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
