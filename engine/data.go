package engine

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
)

// parsePolicies parses Rego modules and places data files at the path of
// their folder, as OPA does (policies/decisions/x/data.json is data.decisions.x).
func parsePolicies(files []sourceFile) (map[string]*ast.Module, map[string]any, []Problem) {
	var probs []Problem
	modules := map[string]*ast.Module{}
	data := map[string]any{}
	for _, f := range files {
		switch filepath.Ext(f.rel) {
		case ".rego":
			m, err := ast.ParseModuleWithOpts(f.path, string(f.data), ast.ParserOptions{ProcessAnnotation: true, RegoVersion: ast.RegoV1})
			if err != nil {
				probs = append(probs, errProblems(f.path, err)...)
				continue
			}
			modules[f.path] = m
		case ".yaml", ".yml":
			probs = append(probs, Problem{File: f.path, Message: "data files must be JSON (.json)"})
		default:
			doc, p := decodeJSON(f)
			if p != nil {
				probs = append(probs, p...)
				continue
			}
			if err := mergeAt(data, dirPath(f.rel), doc); err != nil {
				probs = append(probs, Problem{File: f.path, Message: err.Error()})
			}
		}
	}
	return modules, data, probs
}

func dirPath(rel string) []string {
	dir := filepath.ToSlash(filepath.Dir(rel))
	if dir == "." {
		return nil
	}
	return strings.Split(dir, "/")
}

// mergeAt merges doc into root at path, refusing to overwrite a value.
func mergeAt(root map[string]any, path []string, doc any) error {
	node := root
	for _, k := range path {
		next, ok := node[k]
		if !ok {
			m := map[string]any{}
			node[k] = m
			node = m
			continue
		}
		m, ok := next.(map[string]any)
		if !ok {
			return fmt.Errorf("data conflict at %s", strings.Join(path, "."))
		}
		node = m
	}
	obj, ok := doc.(map[string]any)
	if !ok {
		return fmt.Errorf("a data file must hold a JSON object")
	}
	return mergeObjects(node, obj, path)
}

func mergeObjects(dst, src map[string]any, path []string) error {
	for k, v := range src {
		existing, ok := dst[k]
		if !ok {
			dst[k] = v
			continue
		}
		a, aok := existing.(map[string]any)
		b, bok := v.(map[string]any)
		if !aok || !bok {
			return fmt.Errorf("data conflict at %s", strings.Join(append(path, k), "."))
		}
		if err := mergeObjects(a, b, append(path, k)); err != nil {
			return err
		}
	}
	return nil
}
