package engine

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/arbiter-dev/arbiter/engine/input"
)

// Problem is one reason a set of files cannot be served, located in a file.
type Problem struct {
	File    string `json:"file"`
	Line    int    `json:"line,omitempty"`
	Message string `json:"message"`
	// quotes marks a message that may quote the file: a Rego parse
	// error's (OPA's "got: hunter5", "PATH[<nil>] = <VALUE>").
	quotes bool
}

// Unquoted is p as it is shown to an HTTP caller who named the files
// (POST /v1/shadow: a folder may hold whatever the server can read): the
// file and the line, and a message that quotes nothing of the file. A
// parse error says only that the file does not parse; arbiter check on
// the folder says the rest. (A JSON file's syntax error quotes nothing:
// decodeJSON.)
func (p Problem) Unquoted() Problem {
	if p.quotes {
		p.Message = ast.ParseErr + ": the file does not parse as Rego (the parser's message may quote the file: arbiter check shows it)"
		p.quotes = false
	}
	return p
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

// ProblemsOf is the problems err names: a *LoadError's, or err's message as
// one problem.
func ProblemsOf(err error) []Problem {
	if le, ok := err.(*LoadError); ok {
		return le.Problems
	}
	return []Problem{{Message: err.Error()}}
}

func astProblems(errs ast.Errors) []Problem {
	out := make([]Problem, 0, len(errs))
	for _, e := range errs {
		p := Problem{Message: e.Message, quotes: e.Code == ast.ParseErr}
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

// decodeJSON decodes a JSON file of a revision (data, a schema, fixtures).
// A file that is not JSON is a problem naming the file, the line and the
// column, and what is wrong without quoting the file (input.SyntaxError's
// Quote is left out): a candidate's folders may hold whatever the server
// can read, and its problems reach the HTTP caller of POST /v1/shadow.
func decodeJSON(f sourceFile) (any, []Problem) {
	doc, err := input.Decode(f.data)
	if err == nil {
		return doc, nil
	}
	var syn *input.SyntaxError
	if !errors.As(err, &syn) {
		return nil, []Problem{{File: f.path, Message: err.Error()}}
	}
	at := min(max(syn.Offset, 0), len(f.data))
	start := bytes.LastIndexByte(f.data[:at], '\n') + 1
	return nil, []Problem{{File: f.path, Line: bytes.Count(f.data[:start], []byte("\n")) + 1,
		Message: fmt.Sprintf("invalid JSON at column %d: %s", at-start+1, syn.Msg)}}
}
