package engine

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/arbiter-dev/arbiter/internal/jsonptr"
)

// RunIDKeyword marks, with true, the one property of an input schema that
// holds the run the decision is about: the pages list, filter and show a
// run's decisions by it, so that no Go names the field. A decision whose
// input schema marks none names no run.
const RunIDKeyword = "x-arbiter-run-id"

// RunID returns the members that lead to the run id in the inputs of
// decision name (its input schema's RunIDKeyword property), false when it
// names no run.
func (s *Snapshot) RunID(name string) ([]string, bool) {
	d, ok := s.decisions[name]
	if !ok || d.runID == nil {
		return nil, false
	}
	return append([]string(nil), d.runID...), true
}

// runIDMark is one property marked with RunIDKeyword: the members that
// lead to it, the mark's value and the property's schema.
type runIDMark struct {
	path   []string
	value  any
	schema map[string]any
}

// runIDMarks finds the properties of schema marked with RunIDKeyword,
// through "properties" and local "$ref"s (#/definitions/..., #/$defs/...),
// sorted by path. Array items are not followed: the pages' run filter is
// containment, which cannot say "this element".
func runIDMarks(schema any) []runIDMark {
	root, _ := schema.(map[string]any)
	var out []runIDMark
	var walk func(node map[string]any, path []string, depth int)
	walk = func(node map[string]any, path []string, depth int) {
		if node == nil || depth > 32 { // a $ref cycle
			return
		}
		if ref, ok := node["$ref"].(string); ok {
			walk(resolveLocalRef(root, ref), path, depth+1)
			return
		}
		if v, ok := node[RunIDKeyword]; ok && len(path) > 0 {
			out = append(out, runIDMark{path: path, value: v, schema: node})
		}
		props, _ := node["properties"].(map[string]any)
		for _, k := range slices.Sorted(maps.Keys(props)) {
			child, _ := props[k].(map[string]any)
			walk(child, append(path[:len(path):len(path)], k), depth+1)
		}
	}
	walk(root, nil, 0)
	return out
}

// resolveLocalRef is the schema a local reference names, nil for any other.
func resolveLocalRef(root map[string]any, ref string) map[string]any {
	if !strings.HasPrefix(ref, "#") {
		return nil
	}
	toks, err := jsonptr.Split(ref[1:])
	if err != nil {
		return nil
	}
	var node any = root
	for _, t := range toks {
		m, ok := node.(map[string]any)
		if !ok {
			return nil
		}
		node = m[t]
	}
	m, _ := node.(map[string]any)
	return m
}

// RunIDPointer is the property of an input schema marked as the run id:
// the members that lead to it, false when none is (or the first by path,
// should two be: the gate refuses that, checkRunID).
func RunIDPointer(schema any) ([]string, bool) {
	for _, m := range runIDMarks(schema) {
		if v, ok := m.value.(bool); ok && v {
			return m.path, true
		}
	}
	return nil, false
}

// checkRunID is part of the gate: the mark is true, on one property at
// most, and that property holds a string, so that the pages' run filter
// (a string's containment) can find what it marks.
func checkRunID(path string, doc any) []Problem {
	var probs []Problem
	var marked []string
	for _, m := range runIDMarks(doc) {
		ptr := jsonptr.Join(m.path)
		v, ok := m.value.(bool)
		if !ok {
			probs = append(probs, Problem{File: path, Message: fmt.Sprintf("%s at %s must be true or false", RunIDKeyword, ptr)})
			continue
		}
		if !v {
			continue
		}
		marked = append(marked, ptr)
		if t, _ := m.schema["type"].(string); t != "string" {
			probs = append(probs, Problem{File: path, Message: fmt.Sprintf("%s marks %s, which is not a string (\"type\": \"string\"): a run id is one", RunIDKeyword, ptr)})
		}
	}
	if len(marked) > 1 {
		probs = append(probs, Problem{File: path, Message: fmt.Sprintf("%s marks %d properties (%s): a decision names its run in one", RunIDKeyword, len(marked), strings.Join(marked, ", "))})
	}
	return probs
}
