package main

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// folders are the policy, schema and test folders every command reads.
type folders struct {
	policies, schemas, tests string
}

// register adds --policies, --schemas and (when withTests) --tests to c,
// set from ARBITER_POLICIES, ARBITER_SCHEMAS, ARBITER_TESTS or defaulting
// to the folders of the working directory or of its git repository.
func (f *folders) register(c *command, withTests bool) {
	in := defaultFolder
	c.StringVar(&f.policies, "policies", in("policies"), "folder of Rego policies and data files")
	c.StringVar(&f.schemas, "schemas", in("schemas"), "folder of input and result JSON Schemas")
	c.fromEnv("policies", "schemas")
	if withTests {
		c.StringVar(&f.tests, "tests", in("policy_test"), "folder of Rego tests and fixtures ('' for none)")
		c.fromEnv("tests")
	}
}

// missing says which flag or variable sets a policy or schema folder that
// does not exist: "lstat policies: no such file or directory" alone does
// not say where the name came from.
func (f *folders) missing() error {
	for _, d := range []struct{ name, dir string }{{"policies", f.policies}, {"schemas", f.schemas}} {
		how := fmt.Sprintf("set it with --%s or ARBITER_%s (the default is the %s/ of the working directory, or of the root of its git repository)", d.name, strings.ToUpper(d.name), d.name)
		if d.dir == "" {
			return fmt.Errorf("no %s folder: %s", d.name, how)
		}
		if _, err := os.Stat(d.dir); errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("the %s folder %s does not exist: %s", d.name, d.dir, how)
		}
	}
	return nil
}

// defaultFolder is the default of the folder flag name: name in repoRoot,
// or "" ("no folder configured": name it with the flag) when that is not
// to be trusted.
func defaultFolder(name string) string {
	root, trusted := repoRoot()
	if !trusted {
		return ""
	}
	return filepath.Join(root, name)
}

// repoRoot is where the default folders are: the working directory when it
// holds policies/ and schemas/, else the root of the git work tree that
// contains it when that does, else the working directory. Never another
// ancestor, and never a folder another user could have planted things in:
// an empty file named .git with policies/ beside it in /tmp made every
// command run below /tmp load those policies. So the walk up takes only a
// real work tree (a .git folder or gitfile that git itself would take), and
// stops at the first folder that another user can write or owns, as git
// refuses a repository another user owns. A working directory that holds
// the folders but that another user can write (a shared /tmp) gives no
// defaults at all (trusted is false).
func repoRoot() (root string, trusted bool) {
	wd, err := os.Getwd()
	if err != nil {
		return ".", true
	}
	if hasFolders(wd) {
		return ".", ownFolder(wd)
	}
	for dir := wd; ownFolder(dir); dir = filepath.Dir(dir) {
		if isWorkTree(dir) {
			if hasFolders(dir) {
				rel, _ := filepath.Rel(wd, dir) // dir holds wd, both absolute: it cannot fail
				return rel, true
			}
			return ".", true
		}
		if filepath.Dir(dir) == dir {
			break
		}
	}
	return ".", true
}

// ownFolder reports whether dir is a folder that only this user (or root)
// owns and can write: not group- or world-writable, not another's.
func ownFolder(dir string) bool {
	st, err := os.Stat(dir)
	if err != nil || !st.IsDir() || st.Mode().Perm()&0o022 != 0 {
		return false
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	return ok && (int(sys.Uid) == os.Geteuid() || sys.Uid == 0)
}

// isWorkTree reports whether dir holds .git as git finds it: a git folder,
// or a gitfile ("gitdir: PATH", as in a linked worktree) naming one.
func isWorkTree(dir string) bool {
	dotGit := filepath.Join(dir, ".git")
	st, err := os.Lstat(dotGit)
	switch {
	case err != nil:
		return false
	case st.IsDir():
		return isGitDir(dotGit)
	case !st.Mode().IsRegular() || st.Size() > 4096:
		return false
	}
	b, err := os.ReadFile(dotGit)
	if err != nil {
		return false
	}
	path, ok := bytes.CutPrefix(bytes.TrimRight(b, "\r\n"), []byte("gitdir: "))
	if !ok || len(path) == 0 {
		return false
	}
	gitDir := string(path)
	if !filepath.IsAbs(gitDir) {
		gitDir = filepath.Join(dir, gitDir)
	}
	return isGitDir(gitDir)
}

// isGitDir is git's test of a repository folder: HEAD, objects/ and refs/,
// the last two in the common folder that a linked worktree's commondir
// names.
func isGitDir(dir string) bool {
	common := dir
	if b, err := os.ReadFile(filepath.Join(dir, "commondir")); err == nil {
		common = string(bytes.TrimRight(b, "\r\n"))
		if !filepath.IsAbs(common) {
			common = filepath.Join(dir, common)
		}
	}
	head, err := os.Stat(filepath.Join(dir, "HEAD"))
	return err == nil && head.Mode().IsRegular() && isDir(filepath.Join(common, "objects")) && isDir(filepath.Join(common, "refs"))
}

func hasFolders(dir string) bool {
	return isDir(filepath.Join(dir, "policies")) && isDir(filepath.Join(dir, "schemas"))
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}
