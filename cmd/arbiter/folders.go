package main

import (
	"flag"
	"os"
	"path/filepath"
)

// folders are the policy, schema and test folders every command reads.
type folders struct {
	policies, schemas, tests string
}

// register adds --policies, --schemas and (when withTests) --tests to fs,
// defaulting to the environment or to the repository's own folders.
func (f *folders) register(fs *flag.FlagSet, withTests bool) {
	root := repoRoot()
	fs.StringVar(&f.policies, "policies", envOr("ARBITER_POLICIES", filepath.Join(root, "policies")), "folder of Rego policies and data files")
	fs.StringVar(&f.schemas, "schemas", envOr("ARBITER_SCHEMAS", filepath.Join(root, "schemas")), "folder of input and result JSON Schemas")
	if withTests {
		fs.StringVar(&f.tests, "tests", envOr("ARBITER_TESTS", filepath.Join(root, "policy_test")), "folder of Rego tests and fixtures ('' for none)")
	}
}

func envOr(key, def string) string {
	if v, ok := os.LookupEnv(key); ok {
		return v
	}
	return def
}

// repoRoot is the nearest folder, from the working directory up, that holds
// both policies/ and schemas/; the working directory if there is none.
func repoRoot() string {
	wd, err := os.Getwd()
	if err != nil {
		return "."
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if isDir(filepath.Join(dir, "policies")) && isDir(filepath.Join(dir, "schemas")) {
			if rel, err := filepath.Rel(wd, dir); err == nil {
				return rel
			}
			return dir
		}
		if filepath.Dir(dir) == dir {
			return "."
		}
	}
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}
