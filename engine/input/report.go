package input

import (
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/arbiter-dev/arbiter/internal/jsonptr"
)

// Violation is one failing location of an input, as a JSON pointer relative
// to the input document ("" is the document itself).
type Violation struct {
	Path    string `json:"path"`
	Message string `json:"message"`
}

// MaxViolations bounds the violations reported for one input. A 600 KB body
// of 200,000 empty outbox entries has a million failing leaves; listing them
// all took seconds and hundreds of megabytes.
const MaxViolations = 100

var printer = message.NewPrinter(language.English)

// reporter collects the violations of the report pass, at most
// MaxViolations, counting the rest.
type reporter struct {
	path       []pathToken
	violations []Violation
	extra      int
}

// pathToken is one step of a JSON pointer: an object key or an array index.
type pathToken struct {
	key   string
	index int // -1 for a key
}

func (r *reporter) push(key string, index int) {
	if index < 0 {
		key = strings.Clone(key) // keys may be views of the body
	}
	r.path = append(r.path, pathToken{key: key, index: index})
}

func (r *reporter) pop() { r.path = r.path[:len(r.path)-1] }

func (r *reporter) pointer() string {
	toks := make([]string, len(r.path))
	for i, t := range r.path {
		if toks[i] = t.key; t.index >= 0 {
			toks[i] = strconv.Itoa(t.index)
		}
	}
	return jsonptr.Join(toks)
}

// add records msg at the current location plus names (a missing or
// unexpected property is reported at the property).
func (r *reporter) add(msg string, names ...string) {
	ptr := r.pointer()
	for _, n := range names {
		ptr += "/" + jsonptr.Escape(n)
	}
	r.addAt(ptr, msg)
}

func (r *reporter) addAt(ptr, msg string) {
	if len(r.violations) >= MaxViolations {
		r.extra++
		return
	}
	r.violations = append(r.violations, Violation{Path: ptr, Message: msg})
}

// finish returns the violations sorted by path, each once, with a last
// entry counting those beyond MaxViolations (extra and those past it).
func finish(out []Violation, extra int) []Violation {
	sort.SliceStable(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	out = slices.Compact(out)
	if len(out) > MaxViolations {
		extra += len(out) - MaxViolations
		out = out[:MaxViolations:MaxViolations]
	}
	if extra > 0 {
		out = append(out, Violation{Path: "", Message: strconv.Itoa(extra) + " more violations not listed"})
	}
	return out
}

// Violations flattens a library validation error into its leaf failures,
// each at the JSON pointer of the value that failed. A missing required
// property and a property that is not allowed are reported at the property
// itself ("/run/runId"), not at the enclosing object, so a caller can point
// at the exact field. At most MaxViolations are listed, then a count.
func Violations(err error) []Violation { return finish(flatten(err), 0) }

func flatten(err error) []Violation {
	ve, ok := err.(*jsonschema.ValidationError)
	if !ok {
		return []Violation{{Path: "", Message: err.Error()}}
	}
	var out []Violation
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) > 0 {
			for _, c := range e.Causes {
				walk(c)
			}
			return
		}
		base := jsonptr.Join(e.InstanceLocation)
		switch k := e.ErrorKind.(type) {
		case *kind.Required:
			for _, name := range k.Missing {
				out = append(out, Violation{Path: base + "/" + jsonptr.Escape(name), Message: "missing required property"})
			}
		case *kind.AdditionalProperties:
			for _, name := range k.Properties {
				out = append(out, Violation{Path: base + "/" + jsonptr.Escape(name), Message: "property is not allowed"})
			}
		default:
			out = append(out, Violation{Path: base, Message: e.ErrorKind.LocalizedString(printer)})
		}
	}
	walk(ve)
	return out
}
