package engine

import (
	"fmt"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
)

// Problem is one reason a set of files cannot be served, located in a file.
type Problem struct {
	File    string `json:"file"`
	Line    int    `json:"line,omitempty"`
	Message string `json:"message"`
}

func (p Problem) String() string {
	switch {
	case p.File == "":
		return p.Message
	case p.Line > 0:
		return fmt.Sprintf("%s:%d: %s", p.File, p.Line, p.Message)
	default:
		return fmt.Sprintf("%s: %s", p.File, p.Message)
	}
}

// LoadError lists every problem found while building a Snapshot.
type LoadError struct {
	Problems []Problem
	Skipped  []SkippedFile // files that were not read, see SkippedFile
	// Abandoned: the gate did not finish (its deadline, or cancellation),
	// so the same candidate may pass when it is judged again.
	Abandoned bool
}

func (e *LoadError) Error() string {
	lines := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		lines[i] = p.String()
	}
	return fmt.Sprintf("%d problem(s):\n  %s", len(lines), strings.Join(lines, "\n  "))
}

func astProblems(errs ast.Errors) []Problem {
	out := make([]Problem, 0, len(errs))
	for _, e := range errs {
		p := Problem{Message: e.Message}
		if e.Code != "" {
			p.Message = e.Code + ": " + e.Message
		}
		if e.Location != nil {
			p.File, p.Line = e.Location.File, e.Location.Row
		}
		out = append(out, p)
	}
	return out
}

func errProblems(file string, err error) []Problem {
	if errs, ok := err.(ast.Errors); ok {
		return astProblems(errs)
	}
	return []Problem{{File: file, Message: err.Error()}}
}
