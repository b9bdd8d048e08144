package input

import (
	"fmt"
	"math/big"
	"reflect"
	"slices"
	"sort"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Schema is a decision's input schema as the library compiled it, prepared
// for the single-pass walk. The library is the one authority on validity:
// the walk reads the library's compiled keywords (never the raw schema
// document), applies in the stream only the keywords whose meaning is a
// local check of one value (types, const and enum of scalars, bounds,
// lengths, patterns, properties, required, items, ...), and hands every
// value under any other keyword to the library itself (Schema.Validate on
// that value). A schema that uses a keyword whose meaning depends on the
// path of evaluation ($dynamicRef, $recursiveRef), or a field this code
// does not know, is validated by the library alone, over the whole input.
type Schema struct {
	lib  *jsonschema.Schema
	root *node
	// why is set when the walk cannot validate this schema: the library
	// validates every input, and says why in Streaming.
	why string
}

// node is one compiled library schema with what the walk needs at hand.
type node struct {
	s *jsonschema.Schema

	// set is what applies to a value under this schema: this node when it
	// has stream keywords of its own, and the nodes its $ref and allOf
	// reach in place, flattened and without repeats.
	set []*node

	never     bool  // the false schema
	delegated bool  // the library validates values under this node
	own       bool  // has stream keywords of its own
	extra     *node // an enum beside a const, checked as a node of its own

	types     typeMask // 0: any
	enum      []scalar // const and enum of scalars; nil: any
	enumConst bool     // enum came from const (for the message)

	props    map[string]*node
	patterns []patternNode
	addl     *node // additionalProperties as a schema
	addlNo   bool  // additionalProperties: false

	itemsAll   *node   // every element (items / items2020)
	prefix     []*node // tuple items / prefixItems
	additional *node   // additionalItems as a schema (draft < 2020)
	addItemsNo bool    // additionalItems: false

	bounds []bound
}

type patternNode struct {
	re jsonschema.Regexp
	n  *node
}

// bound is one of minimum, maximum, exclusiveMinimum, exclusiveMaximum and
// multipleOf, with a 64-bit fast path when it is a small integer.
type bound struct {
	kind  boundKind
	r     *big.Rat
	u     uint64
	isU64 bool
}

type boundKind uint8

const (
	bMin boundKind = iota
	bMax
	bExclMin
	bExclMax
	bMultiple
)

type typeMask uint8

const (
	tNull typeMask = 1 << iota
	tBool
	tInteger
	tNumber
	tString
	tArray
	tObject
)

var typeBits = map[string]typeMask{"null": tNull, "boolean": tBool, "integer": tInteger, "number": tNumber, "string": tString, "array": tArray, "object": tObject}

// scalar is a const or enum member that is not an object or an array.
type scalar struct {
	kind typeMask // tNull, tBool, tNumber or tString
	s    string   // a string, or a number's canonical text
	b    bool
}

// field classes: what the walk does with each exported field of the
// library's Schema. A field missing from this table (a newer library) makes
// every schema fall back to the library: nothing is ignored silently.
type fieldClass uint8

const (
	fStream   fieldClass = iota + 1 // applied in the stream, by this node (own)
	fApplies                        // applied in the stream, own only as the code below says
	fDelegate                       // values under it are validated by the library
	fWhole                          // the library validates the whole input
	fIgnore                         // annotations and bookkeeping, no effect on validity
)

var fieldClasses = map[string]fieldClass{
	"DraftVersion": fIgnore, "Location": fIgnore, "ID": fIgnore, "Anchor": fIgnore,
	"DynamicAnchor": fIgnore, "RecursiveAnchor": fIgnore,
	"Title": fIgnore, "Description": fIgnore, "Default": fIgnore, "Comment": fIgnore,
	"ReadOnly": fIgnore, "WriteOnly": fIgnore, "Examples": fIgnore, "Deprecated": fIgnore,

	"Bool": fApplies, "Ref": fApplies, "AllOf": fApplies, "AdditionalProperties": fApplies, "AdditionalItems": fApplies,
	"Types": fStream, "Enum": fStream, "Const": fStream,
	"Properties": fStream, "PatternProperties": fStream, "Required": fStream, "MinProperties": fStream, "MaxProperties": fStream,
	"Items": fStream, "PrefixItems": fStream, "Items2020": fStream,
	"MinItems": fStream, "MaxItems": fStream, "MinLength": fStream, "MaxLength": fStream, "Pattern": fStream,
	"Maximum": fStream, "Minimum": fStream, "ExclusiveMaximum": fStream, "ExclusiveMinimum": fStream,
	"MultipleOf": fStream,

	"Not": fDelegate, "AnyOf": fDelegate, "OneOf": fDelegate, "If": fDelegate, "Then": fDelegate, "Else": fDelegate,
	"Format": fDelegate, "PropertyNames": fDelegate, "Dependencies": fDelegate, "DependentRequired": fDelegate,
	"DependentSchemas": fDelegate, "UnevaluatedProperties": fDelegate, "UniqueItems": fDelegate,
	"Contains": fDelegate, "MinContains": fDelegate, "MaxContains": fDelegate, "UnevaluatedItems": fDelegate,
	"ContentEncoding": fDelegate, "ContentMediaType": fDelegate, "ContentSchema": fDelegate, "Extensions": fDelegate,

	"RecursiveRef": fWhole, "DynamicRef": fWhole,
}

// NewSchema prepares a compiled library schema for the walk.
func NewSchema(lib *jsonschema.Schema) *Schema {
	c := &compiler{nodes: map[*jsonschema.Schema]*node{}}
	root := c.node(lib)
	if c.err == nil {
		c.err = c.flatten()
	}
	if c.err != nil {
		return &Schema{lib: lib, why: c.err.Error()}
	}
	return &Schema{lib: lib, root: root}
}

type compiler struct {
	nodes map[*jsonschema.Schema]*node
	order []*node
	err   error // the first schema the walk cannot validate, and why
}

func (c *compiler) fail(format string, args ...any) *node {
	if c.err == nil {
		c.err = fmt.Errorf(format, args...)
	}
	return nil
}

// node prepares s; a schema the walk cannot validate is kept in c.err.
func (c *compiler) node(s *jsonschema.Schema) *node {
	if s == nil || c.err != nil {
		return nil
	}
	if n, ok := c.nodes[s]; ok {
		return n
	}
	n := &node{s: s}
	c.nodes[s] = n
	c.order = append(c.order, n)

	v := reflect.ValueOf(s).Elem()
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		f, fv := t.Field(i), v.Field(i)
		// An empty map or list (properties: {}) checks nothing either: it
		// must not put a node of its own in every set below it.
		if !f.IsExported() || fv.IsZero() || (fv.Kind() == reflect.Map || fv.Kind() == reflect.Slice) && fv.Len() == 0 {
			continue
		}
		switch fieldClasses[f.Name] {
		case fStream:
			n.own = true
		case fApplies, fIgnore:
		case fDelegate:
			n.delegated = true
		case fWhole:
			return c.fail("%s: %s depends on the path of evaluation", s.Location, f.Name)
		default:
			return c.fail("%s: schema field %s is not known to the single-pass validator", s.Location, f.Name)
		}
	}
	if s.Bool != nil {
		n.never = !*s.Bool
		n.own = n.never
		return n
	}
	if n.delegated {
		// The library applies all of this schema to the value, refs and
		// in-place applicators included; nothing below needs compiling
		// for the stream.
		return n
	}
	if s.Types != nil {
		for _, name := range s.Types.ToStrings() {
			n.types |= typeBits[name]
		}
	}
	if s.Const != nil {
		sc, ok := scalarOf(*s.Const)
		if !ok {
			n.delegated = true
			return n
		}
		n.enum, n.enumConst = []scalar{sc}, true
	}
	if s.Enum != nil {
		list := make([]scalar, 0, len(s.Enum.Values))
		for _, v := range s.Enum.Values {
			sc, ok := scalarOf(v)
			if !ok {
				n.delegated = true
				return n
			}
			list = append(list, sc)
		}
		if n.enum != nil {
			// const and enum together: a value must satisfy both, which the
			// walk does by checking the enum in a node of its own.
			n.extra = &node{s: s, enum: list, own: true}
		} else {
			n.enum = list
		}
	}
	if len(s.Properties) > 0 {
		n.props = make(map[string]*node, len(s.Properties))
		for name, ps := range s.Properties {
			n.props[name] = c.node(ps)
		}
	}
	for re, ps := range s.PatternProperties {
		n.patterns = append(n.patterns, patternNode{re: re, n: c.node(ps)})
	}
	// The library's map order is random; the walk's order must not matter,
	// but a fixed one keeps messages stable.
	sort.Slice(n.patterns, func(i, j int) bool { return n.patterns[i].re.String() < n.patterns[j].re.String() })
	switch a := s.AdditionalProperties.(type) {
	case nil:
	case bool:
		n.addlNo, n.own = !a, n.own || !a
	case *jsonschema.Schema:
		n.addl, n.own = c.node(a), true
	default:
		return c.fail("%s: additionalProperties of type %T", s.Location, a)
	}
	switch it := s.Items.(type) {
	case nil:
	case *jsonschema.Schema:
		n.itemsAll = c.node(it)
	case []*jsonschema.Schema:
		for _, ps := range it {
			n.prefix = append(n.prefix, c.node(ps))
		}
		switch a := s.AdditionalItems.(type) {
		case nil:
		case bool:
			n.addItemsNo = !a
		case *jsonschema.Schema:
			n.additional = c.node(a)
		default:
			return c.fail("%s: additionalItems of type %T", s.Location, a)
		}
	default:
		return c.fail("%s: items of type %T", s.Location, it)
	}
	for _, ps := range s.PrefixItems {
		n.prefix = append(n.prefix, c.node(ps))
	}
	if s.Items2020 != nil {
		n.itemsAll = c.node(s.Items2020)
	}
	for _, b := range []struct {
		k boundKind
		r *big.Rat
	}{{bMin, s.Minimum}, {bMax, s.Maximum}, {bExclMin, s.ExclusiveMinimum}, {bExclMax, s.ExclusiveMaximum}, {bMultiple, s.MultipleOf}} {
		if b.r != nil {
			u, ok := ratUint64(b.r)
			n.bounds = append(n.bounds, bound{kind: b.k, r: b.r, u: u, isU64: ok})
		}
	}
	// In-place applicators: their nodes apply to the same value.
	for _, a := range inPlace(s) {
		c.node(a)
	}
	return n
}

// inPlace lists the in-place applicators of s: its $ref, then allOf.
func inPlace(s *jsonschema.Schema) []*jsonschema.Schema {
	if s.Ref == nil {
		return s.AllOf
	}
	return append([]*jsonschema.Schema{s.Ref}, s.AllOf...)
}

// flatten computes every node's set once all nodes exist.
func (c *compiler) flatten() error {
	for _, n := range c.order {
		var out []*node
		if err := c.expand(n, &out, map[*node]bool{}); err != nil {
			return err
		}
		if len(out) > 64 {
			return fmt.Errorf("%s: more than 64 schemas apply to one value", n.s.Location)
		}
		n.set = out
	}
	return nil
}

func (c *compiler) expand(n *node, out *[]*node, onPath map[*node]bool) error {
	if onPath[n] {
		return fmt.Errorf("%s: $ref or allOf cycle", n.s.Location)
	}
	if slices.Contains(*out, n) {
		return nil
	}
	onPath[n] = true
	defer delete(onPath, n)
	if n.own || n.delegated || n.never {
		*out = append(*out, n)
	}
	if n.extra != nil {
		*out = append(*out, n.extra)
	}
	if n.delegated || n.s.Bool != nil {
		return nil
	}
	for _, a := range inPlace(n.s) {
		if err := c.expand(c.nodes[a], out, onPath); err != nil {
			return err
		}
	}
	return nil
}

// scalarOf turns a const or enum member into a scalar; false for objects
// and arrays, which the library compares itself.
func scalarOf(v any) (scalar, bool) {
	switch x := v.(type) {
	case nil:
		return scalar{kind: tNull}, true
	case bool:
		return scalar{kind: tBool, b: x}, true
	case string:
		return scalar{kind: tString, s: x}, true
	case fmt.Stringer, float64, int, int64: // json.Number, or a number decoded otherwise
		c, ok := CanonicalNumber(strings.TrimSpace(fmt.Sprint(x)))
		return scalar{kind: tNumber, s: c}, ok
	default:
		return scalar{}, false
	}
}
