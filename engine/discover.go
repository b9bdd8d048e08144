package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/storage"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/arbiter-dev/arbiter/engine/input"
)

// parseSchemas decodes every schema file and keys it as `opa check -s` does:
// schemas/NAME/input.json is schema.NAME.input.
func parseSchemas(files []sourceFile) (*ast.SchemaSet, map[string]schemaDoc, []Problem) {
	var probs []Problem
	ss := ast.NewSchemaSet()
	docs := map[string]schemaDoc{}
	for _, f := range files {
		doc, p := decodeJSON(f)
		if p != nil {
			probs = append(probs, p...)
			continue
		}
		key := strings.TrimSuffix(f.rel, ".json")
		ref := ast.Ref{ast.SchemaRootDocument}
		for _, part := range strings.Split(key, "/") {
			ref = append(ref, ast.StringTerm(part))
		}
		ss.Put(ref, doc)
		docs[key] = schemaDoc{path: f.path, doc: doc}
	}
	return ss, docs, probs
}

type schemaDoc struct {
	path string
	doc  any
}

// discover finds the decisions: every package decisions.NAME with a rule
// named decision. Nothing here knows any decision by name.
func (s *Snapshot) discover(c *ast.Compiler, store storage.Store, modules map[string]*ast.Module, schemas map[string]schemaDoc) []Problem {
	var probs []Problem
	found := map[string]string{} // name -> file declaring it
	for file, m := range modules {
		path := m.Package.Path
		if len(path) != 3 || !path[1].Equal(ast.StringTerm("decisions")) {
			continue
		}
		name, ok := path[2].Value.(ast.String)
		if !ok {
			continue
		}
		for _, r := range m.Rules {
			if r.Head.Name.String() == "decision" || r.Head.Ref().String() == "decision" {
				found[string(name)] = file
			}
		}
	}
	as := c.GetAnnotationSet()
	for _, name := range slices.Sorted(maps.Keys(found)) {
		file := found[name]
		if !decisionName.MatchString(name) {
			probs = append(probs, Problem{File: file, Message: fmt.Sprintf("decision name %q must match %s", name, decisionName)})
			continue
		}
		def := &decisionDef{name: name}
		in, okIn := schemas[name+"/input"]
		out, okOut := schemas[name+"/result"]
		if !okIn || !okOut {
			probs = append(probs, Problem{File: file, Message: fmt.Sprintf("decision %s needs schemas %s/input.json and %s/result.json in the schema folder", name, name, name)})
			continue
		}
		var err error
		if def.inputSchema, err = compileSchema(in.path, in.doc, ""); err != nil {
			probs = append(probs, Problem{File: in.path, Message: err.Error()})
			continue
		}
		def.input = input.NewSchema(def.inputSchema)
		if def.result, err = compileSchema(out.path, out.doc, ""); err != nil {
			probs = append(probs, Problem{File: out.path, Message: err.Error()})
			continue
		}
		def.inputDoc, def.resultDoc = in.doc, out.doc
		obj, _ := out.doc.(map[string]any) // a nil map reads as empty
		def.outcomeKey = "outcome"
		if k, ok := obj[OutcomeKeyword].(string); ok {
			def.outcomeKey = k
		}
		if p := checkAllow(out.path, out.doc, def.outcomeKey); len(p) > 0 {
			probs = append(probs, p...)
			continue
		}
		if p := checkRunID(in.path, in.doc); len(p) > 0 {
			probs = append(probs, p...)
			continue
		}
		def.runID, _ = RunIDPointer(in.doc)
		pkg := ast.MustParseRef("data.decisions." + name)
		var declared bool
		if def.title, def.description, def.rules, declared = describe(as, pkg, name); !declared {
			probs = append(probs, Problem{File: file, Line: 1, Message: fmt.Sprintf("package decisions.%s must declare `schemas: [{input: schema.%s.input}]` in its package METADATA so that every input reference is type-checked", name, name)})
			continue
		}
		pq, err := rego.New(
			rego.Query(pkg.String()+".decision"),
			rego.Compiler(c),
			rego.Store(store),
			rego.StrictBuiltinErrors(true),
		).PrepareForEval(context.Background())
		if err != nil {
			probs = append(probs, Problem{File: file, Message: "preparing query: " + err.Error()})
			continue
		}
		def.query = pq
		s.decisions[name] = def
		s.names = append(s.names, name)
	}
	if len(found) == 0 {
		probs = append(probs, Problem{Message: "no decision found: a decision is a package decisions.NAME with a rule named decision"})
	}
	for key, sd := range schemas {
		dir, _, _ := strings.Cut(key, "/")
		if _, ok := found[dir]; !ok {
			probs = append(probs, Problem{File: sd.path, Message: fmt.Sprintf("schema for unknown decision %q (no package decisions.%s with a decision rule)", dir, dir)})
		}
	}
	sort.Slice(probs, func(i, j int) bool { return probs[i].String() < probs[j].String() })
	return probs
}

// compileSchema compiles one schema document already decoded with exact
// numbers, or its subschema at the fragment at ("" for the whole). url is
// only a name for messages.
func compileSchema(url string, doc any, at string) (*jsonschema.Schema, error) {
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft7)
	if err := c.AddResource(url, doc); err != nil {
		return nil, fmt.Errorf("adding schema: %w", err)
	}
	return c.Compile(url + at)
}

// describe reads the package title and the reason rules of decision name
// from its METADATA, and whether the package declares its input schema. A
// reason rule is an annotated rule whose head key is a literal [rank,
// "code"]: the engine learns every reason from the policy files, so adding
// one never touches Go.
func describe(as *ast.AnnotationSet, pkg ast.Ref, name string) (title, description string, rules []RuleInfo, declared bool) {
	want := ast.MustParseRef("schema." + name + ".input")
	for _, a := range as.Flatten() {
		ann := a.Annotations
		if a.Path.Equal(pkg) && ann.Scope == "package" {
			title, description = ann.Title, ann.Description
			declared = declared || slices.ContainsFunc(ann.Schemas, func(sa *ast.SchemaAnnotation) bool {
				return sa.Path.Equal(ast.InputRootRef) && sa.Schema.Equal(want)
			})
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
	return title, description, rules, declared
}
