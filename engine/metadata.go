package engine

import (
	"encoding/json"
	"sort"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
)

func declaresInputSchema(as *ast.AnnotationSet, pkg ast.Ref, name string) bool {
	want := ast.MustParseRef("schema." + name + ".input")
	for _, a := range as.Flatten() {
		if !a.Path.Equal(pkg) || a.Annotations.Scope != "package" {
			continue
		}
		for _, sa := range a.Annotations.Schemas {
			if sa.Path.Equal(ast.InputRootRef) && sa.Schema.Equal(want) {
				return true
			}
		}
	}
	return false
}

// describe reads the package title and the reason rules of a decision from
// its METADATA. A reason rule is an annotated rule whose head key is a
// literal [rank, "code"]: the engine learns every reason from the policy
// files, so adding one never touches Go.
func describe(as *ast.AnnotationSet, pkg ast.Ref) (title, description string, rules []RuleInfo) {
	for _, a := range as.Flatten() {
		ann := a.Annotations
		if a.Path.Equal(pkg) && ann.Scope == "package" {
			title, description = ann.Title, ann.Description
			continue
		}
		r := a.GetRule()
		if r == nil || !a.Path.HasPrefix(pkg) || r.Head.Key == nil || ann.Title == "" {
			continue
		}
		arr, ok := r.Head.Key.Value.(*ast.Array)
		if !ok || arr.Len() != 2 {
			continue
		}
		rank, ok1 := arr.Elem(0).Value.(ast.Number)
		code, ok2 := arr.Elem(1).Value.(ast.String)
		if !ok1 || !ok2 {
			continue
		}
		rules = append(rules, RuleInfo{Rank: json.Number(rank), Reason: string(code), Title: ann.Title, Description: strings.TrimSpace(ann.Description), File: r.Location.File, Line: r.Location.Row})
	}
	sort.SliceStable(rules, func(i, j int) bool {
		return ast.NumberCompare(ast.Number(rules[i].Rank), ast.Number(rules[j].Rank)) < 0
	})
	return title, description, rules
}
