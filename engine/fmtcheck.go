package engine

import (
	"path/filepath"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/format"
)

// formatProblems reports Rego files that `opa fmt` would change.
func formatProblems(files []sourceFile) []Problem {
	var probs []Problem
	for _, f := range files {
		if filepath.Ext(f.rel) != ".rego" {
			continue
		}
		want, err := format.SourceWithOpts(f.path, f.data, format.Opts{RegoVersion: ast.RegoV1})
		if err != nil {
			probs = append(probs, errProblems(f.path, err)...)
			continue
		}
		if string(want) != string(f.data) {
			probs = append(probs, Problem{File: f.path, Line: firstDiffLine(f.data, want), Message: "not formatted as `opa fmt` would (run `make fmt`)"})
		}
	}
	return probs
}

func firstDiffLine(a, b []byte) int {
	line := 1
	for i := 0; i < len(a) && i < len(b); i++ {
		if a[i] != b[i] {
			return line
		}
		if a[i] == '\n' {
			line++
		}
	}
	return line
}
