package engine

import (
	"fmt"
	"sort"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

var printer = message.NewPrinter(language.English)

// violations flattens a validation error into its leaf failures, each at the
// JSON pointer of the value that failed. A missing required property and a
// property that is not allowed are reported at the property itself
// ("/run/runId"), not at the enclosing object, so a caller can point at the
// exact field.
func violations(err error) []Violation {
	ve, ok := err.(*jsonschema.ValidationError)
	if !ok {
		return []Violation{{Path: "", Message: err.Error()}}
	}
	var out []Violation
	seen := map[Violation]bool{}
	add := func(v Violation) {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) > 0 {
			for _, c := range e.Causes {
				walk(c)
			}
			return
		}
		base := pointer(e.InstanceLocation)
		switch k := e.ErrorKind.(type) {
		case *kind.Required:
			for _, name := range k.Missing {
				add(Violation{Path: base + "/" + escapePointer(name), Message: "missing required property"})
			}
		case *kind.AdditionalProperties:
			for _, name := range k.Properties {
				add(Violation{Path: base + "/" + escapePointer(name), Message: "property is not allowed"})
			}
		default:
			add(Violation{Path: base, Message: e.ErrorKind.LocalizedString(printer)})
		}
	}
	walk(ve)
	sort.SliceStable(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

func pointer(tokens []string) string {
	if len(tokens) == 0 {
		return ""
	}
	var b strings.Builder
	for _, t := range tokens {
		b.WriteByte('/')
		b.WriteString(escapePointer(t))
	}
	return b.String()
}

// escapePointer escapes one reference token (RFC 6901).
func escapePointer(s string) string {
	if !strings.ContainsAny(s, "~/") {
		return s
	}
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(s)
}

// compileSchema compiles one schema document already decoded with exact
// numbers. url is only a name for messages.
func compileSchema(url string, doc any) (*jsonschema.Schema, error) {
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft7)
	if err := c.AddResource(url, doc); err != nil {
		return nil, fmt.Errorf("adding schema: %w", err)
	}
	return c.Compile(url)
}
