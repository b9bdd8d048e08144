package input

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
)

// gen makes random JSON Schemas and instances for the differential tests:
// keyword combinations the repository's schemas do not have yet but a
// reliability engineer may add, in drafts 7 and 2020-12, refs with siblings
// included, and instances near what each schema allows (so that both
// valid and invalid ones are common), with numbers in every JSON form.
type gen struct {
	r     *rand.Rand
	draft int // 7 or 2020
	defs  []string
}

var (
	genKeys    = []string{"a", "b", "c", "id", "lifecycle", "n", "x/y", "t~", "é"}
	genStrings = []string{"", "a", "ab", "abc", "ready", "suspended", "2026-12-03T10:00:00Z", "x@y.z", "A1", "é", "\u0000"}
	genNumbers = []string{"0", "-0", "1", "2", "3", "-1", "0.5", "1.5", "2.0", "1e0", "1E+1", "10", "1e1", "100e-2",
		"18446744073709551615", "18446744073709551616", "18446744073709551615.000", "1.8446744073709551615e19",
		"1000000000000000000.0e0", "1000000000000000001.0e0", "-9223372036854775808", "0.1", "1e-3", "1e300"}
	genPatterns = []string{"^a", "b$", "^[a-z]+$", "^[A-Za-z0-9][A-Za-z0-9._:-]*$", "\\d", "^$"}
	genFormats  = []string{"date-time", "email", "ipv4", "uri"}
)

func (g *gen) pick(n int) int        { return g.r.IntN(n) }
func (g *gen) chance(p float64) bool { return g.r.Float64() < p }

func (g *gen) num() json.Number      { return json.Number(genNumbers[g.pick(len(genNumbers))]) }
func (g *gen) smallInt() json.Number { return json.Number(fmt.Sprint(g.pick(4))) }

func (g *gen) scalar() any {
	switch g.pick(4) {
	case 0:
		return nil
	case 1:
		return g.chance(0.5)
	case 2:
		return genStrings[g.pick(len(genStrings))]
	default:
		return g.num()
	}
}

// schema returns a random schema of at most depth levels.
func (g *gen) schema(depth int) any {
	if depth <= 0 || g.chance(0.1) {
		switch g.pick(5) {
		case 0:
			return true
		case 1:
			return g.chance(0.8) // mostly true; false schemas are rare
		case 2:
			return map[string]any{}
		}
		return map[string]any{"type": g.typeName()}
	}
	s := map[string]any{}
	n := 1 + g.pick(4)
	for i := 0; i < n; i++ {
		g.keyword(s, depth)
	}
	return s
}

func (g *gen) typeName() any {
	names := []string{"null", "boolean", "integer", "number", "string", "array", "object"}
	if g.chance(0.2) {
		return []any{names[g.pick(len(names))], names[g.pick(len(names))]}
	}
	return names[g.pick(len(names))]
}

func (g *gen) keyword(s map[string]any, depth int) {
	switch g.pick(30) {
	case 0, 1, 2:
		s["type"] = g.typeName()
	case 3:
		var e []any
		for i := 0; i < 1+g.pick(4); i++ {
			e = append(e, g.scalar())
		}
		if g.chance(0.1) {
			e = append(e, map[string]any{"a": g.smallInt()}, []any{g.smallInt()})
		}
		s["enum"] = e
	case 4:
		if g.chance(0.1) {
			s["const"] = []any{g.smallInt()}
		} else {
			s["const"] = g.scalar()
		}
	case 5, 6, 7:
		props := map[string]any{}
		for i := 0; i < 1+g.pick(3); i++ {
			props[genKeys[g.pick(len(genKeys))]] = g.schema(depth - 1)
		}
		s["properties"] = props
	case 8:
		s["patternProperties"] = map[string]any{genPatterns[g.pick(len(genPatterns))]: g.schema(depth - 1)}
	case 9, 10:
		if g.chance(0.5) {
			s["additionalProperties"] = g.chance(0.3)
		} else {
			s["additionalProperties"] = g.schema(depth - 1)
		}
	case 11:
		var req []any
		for i := 0; i < 1+g.pick(3); i++ {
			req = append(req, genKeys[g.pick(len(genKeys))])
		}
		s["required"] = uniq(req)
	case 12:
		if g.chance(0.5) {
			s["minProperties"] = g.smallInt()
		} else {
			s["maxProperties"] = g.smallInt()
		}
	case 13, 14:
		switch {
		case g.draft == 2020 && g.chance(0.4):
			s["prefixItems"] = []any{g.schema(depth - 1), g.schema(depth - 1)}
			if g.chance(0.5) {
				s["items"] = g.schema(depth - 1)
			}
		case g.draft == 7 && g.chance(0.3):
			s["items"] = []any{g.schema(depth - 1), g.schema(depth - 1)}
			if g.chance(0.5) {
				s["additionalItems"] = g.schema(depth - 1)
			} else {
				s["additionalItems"] = false
			}
		default:
			s["items"] = g.schema(depth - 1)
		}
	case 15:
		if g.chance(0.5) {
			s["minItems"] = g.smallInt()
		} else {
			s["maxItems"] = g.smallInt()
		}
	case 16:
		if g.chance(0.5) {
			s["minLength"] = g.smallInt()
		} else {
			s["maxLength"] = g.smallInt()
		}
	case 17:
		s["pattern"] = genPatterns[g.pick(len(genPatterns))]
	case 18, 19:
		kw := []string{"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"}[g.pick(5)]
		n := g.num()
		if kw == "multipleOf" {
			n = json.Number([]string{"1", "2", "0.5", "1e0", "3"}[g.pick(5)])
		}
		s[kw] = n
	case 20, 21:
		if len(g.defs) > 0 {
			s["$ref"] = g.refTo(g.defs[g.pick(len(g.defs))])
		}
	case 22:
		s["allOf"] = []any{g.schema(depth - 1), g.schema(depth - 1)}
	case 23:
		s["anyOf"] = []any{g.schema(depth - 1), g.schema(depth - 1)}
	case 24:
		s["oneOf"] = []any{g.schema(depth - 1), g.schema(depth - 1)}
	case 25:
		s["not"] = g.schema(depth - 1)
	case 26:
		s["if"] = g.schema(depth - 1)
		s["then"] = g.schema(depth - 1)
		if g.chance(0.5) {
			s["else"] = g.schema(depth - 1)
		}
	case 27:
		if g.chance(0.5) {
			s["uniqueItems"] = true
		} else {
			s["contains"] = g.schema(depth - 1)
		}
	case 28:
		s["format"] = genFormats[g.pick(len(genFormats))]
	case 29:
		switch g.pick(3) {
		case 0:
			s["propertyNames"] = map[string]any{"maxLength": g.smallInt()}
		case 1:
			if g.draft == 2020 {
				s["dependentRequired"] = map[string]any{genKeys[g.pick(3)]: []any{genKeys[g.pick(3)]}}
			} else {
				s["dependencies"] = map[string]any{genKeys[g.pick(3)]: []any{genKeys[g.pick(3)]}}
			}
		default:
			if g.draft == 2020 {
				s["unevaluatedProperties"] = false
			} else {
				s["title"] = "annotation only"
			}
		}
	}
}

func (g *gen) refTo(name string) string {
	if g.draft == 2020 {
		return "#/$defs/" + name
	}
	return "#/definitions/" + name
}

func uniq(list []any) []any {
	seen := map[any]bool{}
	var out []any
	for _, v := range list {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}

// document returns a root schema: an object whose member "x" carries a
// random schema, with a few definitions that refs (and refs with
// siblings) point at.
func (g *gen) document() map[string]any {
	g.defs = nil
	defs := map[string]any{}
	nd := g.pick(3)
	for i := 0; i < nd; i++ {
		g.defs = append(g.defs, fmt.Sprintf("d%d", i))
	}
	for _, name := range g.defs {
		defs[name] = g.schema(2)
	}
	root := map[string]any{
		"type":       "object",
		"properties": map[string]any{"x": g.schema(3)},
		"required":   []any{"x"},
	}
	if g.draft == 2020 {
		root["$schema"] = "https://json-schema.org/draft/2020-12/schema"
		root["$defs"] = defs
	} else {
		root["$schema"] = "http://json-schema.org/draft-07/schema#"
		root["definitions"] = defs
	}
	return root
}

// instance returns a random instance shaped by schema s (a guess at a
// valid one, changed at random), as JSON text.
func (g *gen) instance(s any, depth int) string {
	m, _ := s.(map[string]any)
	if m == nil || depth <= 0 || g.chance(0.08) {
		return g.randomJSON(depth)
	}
	if ref, ok := m["$ref"].(string); ok && g.chance(0.5) {
		name := ref[strings.LastIndex(ref, "/")+1:]
		_ = name // the target is not at hand here; a random value will do
	}
	if c, ok := m["const"]; ok && g.chance(0.7) {
		return toJSON(c)
	}
	if e, ok := m["enum"].([]any); ok && len(e) > 0 && g.chance(0.7) {
		return toJSON(e[g.pick(len(e))])
	}
	t, _ := m["type"].(string)
	if t == "" {
		switch {
		case m["properties"] != nil || m["required"] != nil || m["additionalProperties"] != nil:
			t = "object"
		case m["items"] != nil || m["prefixItems"] != nil:
			t = "array"
		case m["pattern"] != nil || m["minLength"] != nil:
			t = "string"
		case m["minimum"] != nil || m["maximum"] != nil || m["multipleOf"] != nil:
			t = "number"
		}
	}
	switch t {
	case "object":
		var b strings.Builder
		b.WriteByte('{')
		props, _ := m["properties"].(map[string]any)
		n := 0
		seen := map[string]bool{}
		add := func(k, v string) {
			if seen[k] {
				return
			}
			seen[k] = true
			if n > 0 {
				b.WriteByte(',')
			}
			b.WriteString(toJSON(k) + ":" + v)
			n++
		}
		for k, ps := range props {
			if g.chance(0.8) {
				add(k, g.instance(ps, depth-1))
			}
		}
		if req, ok := m["required"].([]any); ok {
			for _, r := range req {
				if g.chance(0.9) {
					add(r.(string), g.randomJSON(depth-1))
				}
			}
		}
		if g.chance(0.3) {
			add(genKeys[g.pick(len(genKeys))], g.randomJSON(depth-1))
		}
		b.WriteByte('}')
		return b.String()
	case "array":
		var parts []string
		items := m["items"]
		if pre, ok := m["prefixItems"].([]any); ok {
			for _, p := range pre {
				parts = append(parts, g.instance(p, depth-1))
			}
		}
		if tuple, ok := items.([]any); ok {
			for _, p := range tuple {
				parts = append(parts, g.instance(p, depth-1))
			}
			items = nil
		}
		for i := 0; i < g.pick(4); i++ {
			parts = append(parts, g.instance(items, depth-1))
		}
		return "[" + strings.Join(parts, ",") + "]"
	case "string":
		return toJSON(genStrings[g.pick(len(genStrings))])
	case "integer", "number":
		return string(g.num())
	case "boolean":
		return fmt.Sprint(g.chance(0.5))
	case "null":
		return "null"
	}
	return g.randomJSON(depth)
}

func (g *gen) randomJSON(depth int) string {
	switch k := g.pick(7); {
	case k == 0 && depth > 0:
		var parts []string
		for i := 0; i < g.pick(3); i++ {
			parts = append(parts, toJSON(genKeys[g.pick(len(genKeys))])+":"+g.randomJSON(depth-1))
		}
		return "{" + strings.Join(uniqMembers(parts), ",") + "}"
	case k == 1 && depth > 0:
		var parts []string
		for i := 0; i < g.pick(3); i++ {
			parts = append(parts, g.randomJSON(depth-1))
		}
		return "[" + strings.Join(parts, ",") + "]"
	default:
		if v := g.scalar(); v != nil {
			if n, ok := v.(json.Number); ok {
				return string(n)
			}
			return toJSON(v)
		}
		return "null"
	}
}

// uniqMembers drops members whose key repeats (duplicates are malformed).
func uniqMembers(parts []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, p := range parts {
		k := p[:strings.Index(p, ":")]
		if !seen[k] {
			seen[k] = true
			out = append(out, p)
		}
	}
	return out
}

func toJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}
