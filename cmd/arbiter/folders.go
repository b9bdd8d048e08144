package main

import (
	"os"
	"path/filepath"
)

// folders are the policy, schema and test folders every command reads.
type folders struct {
	policies, schemas, tests string
}

// register adds --policies, --schemas and (when withTests) --tests to c,
// set from ARBITER_POLICIES, ARBITER_SCHEMAS, ARBITER_TESTS or defaulting
// to the folders of the working directory or of its git repository.
func (f *folders) register(c *command, withTests bool) {
	root := repoRoot()
	c.StringVar(&f.policies, "policies", filepath.Join(root, "policies"), "folder of Rego policies and data files")
	c.StringVar(&f.schemas, "schemas", filepath.Join(root, "schemas"), "folder of input and result JSON Schemas")
	c.fromEnv("policies", "schemas")
	if withTests {
		c.StringVar(&f.tests, "tests", filepath.Join(root, "policy_test"), "folder of Rego tests and fixtures ('' for none)")
		c.fromEnv("tests")
	}
}

// repoRoot is where the default folders are: the working directory when it
// holds policies/ and schemas/, else the root of the git repository that
// contains it when that does, else the working directory. Never another
// ancestor: a policies/ planted in /tmp must not be loaded by a command run
// anywhere below it.
func repoRoot() string {
	wd, err := os.Getwd()
	if err != nil {
		return "."
	}
	if hasFolders(wd) {
		return "."
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if _, err := os.Lstat(filepath.Join(dir, ".git")); err == nil { // a folder, or a file in a worktree
			if hasFolders(dir) {
				if rel, err := filepath.Rel(wd, dir); err == nil {
					return rel
				}
				return dir
			}
			return "."
		}
		if filepath.Dir(dir) == dir {
			return "."
		}
	}
}

func hasFolders(dir string) bool {
	return isDir(filepath.Join(dir, "policies")) && isDir(filepath.Join(dir, "schemas"))
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}
