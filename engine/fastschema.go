package engine

import (
	"fmt"
	"math/big"
	"regexp"
	"strings"
)

// fastSchema is a JSON Schema (draft-07) compiled for the single-pass
// validating parser in parsevalue.go. It covers the keywords decision input
// schemas use; a schema with any other keyword is not compiled, and its
// decision validates through the general validator instead. It only has to
// say valid or invalid: when it says invalid, the general validator runs to
// report the violations, so messages are the same on both paths.
type fastSchema struct {
	never bool // the false schema
	types typeSet

	props       map[string]*fastSchema
	required    []string
	addlAllowed bool        // additionalProperties is true or absent
	addl        *fastSchema // additionalProperties schema, when one is given

	items              *fastSchema
	minItems, maxItems int // -1: no bound

	minLen, maxLen int // -1: no bound
	pattern        *regexp.Regexp

	min, max        *big.Rat
	exclMin, exclMx *big.Rat

	enum []jsonScalar // enum or const; nil: any value

	// Only the tree validator (validValue, for results) implements these;
	// a schema using them is not compiled for the streaming input parser.
	cond, then, els *fastSchema
	unique          bool
}

type typeSet uint8

const (
	tNull typeSet = 1 << iota
	tBool
	tInteger
	tNumber
	tString
	tArray
	tObject
)

var typeNames = map[string]typeSet{"null": tNull, "boolean": tBool, "integer": tInteger, "number": tNumber, "string": tString, "array": tArray, "object": tObject}

// jsonScalar is an enum member: a string, a number, a bool or null.
type jsonScalar struct {
	kind typeSet // tNull, tBool, tNumber or tString
	s    string
	b    bool
	n    *big.Rat
}

// keywords the fast validator implements, and annotations it may ignore.
var fastKeywords = map[string]bool{
	"type": true, "properties": true, "required": true, "additionalProperties": true,
	"items": true, "minItems": true, "maxItems": true, "minLength": true, "maxLength": true,
	"pattern": true, "minimum": true, "maximum": true, "exclusiveMinimum": true,
	"exclusiveMaximum": true, "enum": true, "const": true, "$ref": true,
	"if": true, "then": true, "else": true, "uniqueItems": true,
	// annotations, no effect on validity
	"$schema": true, "$comment": true, "title": true, "description": true, "definitions": true,
	"default": true, "examples": true, "readOnly": true, "writeOnly": true,
}

type fastCompiler struct {
	root     any
	refs     map[string]*fastSchema
	treeOnly bool // the schema uses keywords only validValue implements
}

// compileFast compiles a whole schema document for the streaming input
// parser, or returns an error naming the first construct it does not
// implement.
func compileFast(doc any) (*fastSchema, error) {
	c := &fastCompiler{root: doc, refs: map[string]*fastSchema{}}
	fs, err := c.compile(doc, "#")
	if err == nil && c.treeOnly {
		return nil, fmt.Errorf("if/then/else and uniqueItems need the tree validator")
	}
	return fs, err
}

// compileTree compiles a schema for validValue, which also implements
// if/then/else and uniqueItems.
func compileTree(doc any) (*fastSchema, error) {
	c := &fastCompiler{root: doc, refs: map[string]*fastSchema{}}
	return c.compile(doc, "#")
}

func (c *fastCompiler) compile(v any, at string) (*fastSchema, error) {
	switch s := v.(type) {
	case bool:
		return &fastSchema{never: !s, minItems: -1, maxItems: -1, minLen: -1, maxLen: -1, addlAllowed: true}, nil
	case map[string]any:
		if ref, ok := s["$ref"]; ok {
			// Draft-07: a $ref replaces its siblings.
			r, ok := ref.(string)
			if !ok {
				return nil, fmt.Errorf("%s: $ref is not a string", at)
			}
			return c.ref(r)
		}
		return c.object(s, at)
	default:
		return nil, fmt.Errorf("%s: a schema must be an object or a boolean", at)
	}
}

func (c *fastCompiler) ref(r string) (*fastSchema, error) {
	if fs, ok := c.refs[r]; ok {
		return fs, nil // compiled, or being compiled (recursion)
	}
	if !strings.HasPrefix(r, "#/definitions/") || strings.ContainsAny(r[len("#/definitions/"):], "/~%") {
		return nil, fmt.Errorf("$ref %q: only #/definitions/NAME is supported", r)
	}
	defs, _ := c.root.(map[string]any)["definitions"].(map[string]any)
	target, ok := defs[r[len("#/definitions/"):]]
	if !ok {
		return nil, fmt.Errorf("$ref %q: no such definition", r)
	}
	fs := &fastSchema{}
	c.refs[r] = fs
	compiled, err := c.compile(target, r)
	if err != nil {
		return nil, err
	}
	*fs = *compiled
	return fs, nil
}

func (c *fastCompiler) object(s map[string]any, at string) (*fastSchema, error) {
	fs := &fastSchema{minItems: -1, maxItems: -1, minLen: -1, maxLen: -1, addlAllowed: true}
	for k, v := range s {
		if !fastKeywords[k] && !strings.HasPrefix(k, "x-") {
			return nil, fmt.Errorf("%s: keyword %q is not implemented by the fast validator", at, k)
		}
		var err error
		switch k {
		case "type":
			err = fs.setTypes(v)
		case "properties":
			props, ok := v.(map[string]any)
			if !ok {
				return nil, fmt.Errorf("%s: properties is not an object", at)
			}
			fs.props = make(map[string]*fastSchema, len(props))
			for name, p := range props {
				if fs.props[name], err = c.compile(p, at+"/properties/"+name); err != nil {
					return nil, err
				}
			}
		case "required":
			list, ok := v.([]any)
			if !ok {
				return nil, fmt.Errorf("%s: required is not an array", at)
			}
			for _, r := range list {
				name, ok := r.(string)
				if !ok {
					return nil, fmt.Errorf("%s: required holds a non-string", at)
				}
				fs.required = append(fs.required, name)
			}
		case "additionalProperties":
			if b, ok := v.(bool); ok {
				fs.addlAllowed = b
			} else if fs.addl, err = c.compile(v, at+"/additionalProperties"); err != nil {
				return nil, err
			}
		case "items":
			if _, ok := v.([]any); ok {
				return nil, fmt.Errorf("%s: tuple items are not implemented", at)
			}
			fs.items, err = c.compile(v, at+"/items")
		case "minItems":
			fs.minItems, err = count(v)
		case "maxItems":
			fs.maxItems, err = count(v)
		case "minLength":
			fs.minLen, err = count(v)
		case "maxLength":
			fs.maxLen, err = count(v)
		case "pattern":
			p, ok := v.(string)
			if !ok {
				return nil, fmt.Errorf("%s: pattern is not a string", at)
			}
			fs.pattern, err = regexp.Compile(p)
		case "minimum":
			fs.min, err = rat(v)
		case "maximum":
			fs.max, err = rat(v)
		case "exclusiveMinimum":
			fs.exclMin, err = rat(v)
		case "exclusiveMaximum":
			fs.exclMx, err = rat(v)
		case "enum":
			list, ok := v.([]any)
			if !ok {
				return nil, fmt.Errorf("%s: enum is not an array", at)
			}
			fs.enum = []jsonScalar{}
			for _, e := range list {
				sc, err := scalar(e)
				if err != nil {
					return nil, fmt.Errorf("%s: enum: %w", at, err)
				}
				fs.enum = append(fs.enum, sc)
			}
		case "if", "then", "else":
			c.treeOnly = true
			var sub *fastSchema
			if sub, err = c.compile(v, at+"/"+k); err == nil {
				switch k {
				case "if":
					fs.cond = sub
				case "then":
					fs.then = sub
				default:
					fs.els = sub
				}
			}
		case "uniqueItems":
			b, ok := v.(bool)
			if !ok {
				return nil, fmt.Errorf("%s: uniqueItems is not a boolean", at)
			}
			if b {
				c.treeOnly = true
				fs.unique = true
			}
		case "const":
			sc, err := scalar(v)
			if err != nil {
				return nil, fmt.Errorf("%s: const: %w", at, err)
			}
			fs.enum = []jsonScalar{sc}
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w", at, k, err)
		}
	}
	return fs, nil
}

func (fs *fastSchema) setTypes(v any) error {
	var names []any
	switch t := v.(type) {
	case string:
		names = []any{t}
	case []any:
		names = t
	default:
		return fmt.Errorf("type must be a string or an array")
	}
	for _, n := range names {
		s, _ := n.(string)
		bit, ok := typeNames[s]
		if !ok {
			return fmt.Errorf("unknown type %v", n)
		}
		fs.types |= bit
	}
	return nil
}

func count(v any) (int, error) {
	r, err := rat(v)
	if err != nil || !r.IsInt() || r.Sign() < 0 || !r.Num().IsInt64() || r.Num().Int64() > 1<<31 {
		return 0, fmt.Errorf("not a small non-negative integer")
	}
	return int(r.Num().Int64()), nil
}

func rat(v any) (*big.Rat, error) {
	n, ok := v.(interface{ String() string })
	if !ok {
		return nil, fmt.Errorf("not a number")
	}
	r, ok := new(big.Rat).SetString(n.String())
	if !ok {
		return nil, fmt.Errorf("not a number")
	}
	return r, nil
}

func scalar(v any) (jsonScalar, error) {
	switch x := v.(type) {
	case nil:
		return jsonScalar{kind: tNull}, nil
	case bool:
		return jsonScalar{kind: tBool, b: x}, nil
	case string:
		return jsonScalar{kind: tString, s: x}, nil
	case interface{ String() string }: // json.Number
		r, err := rat(x)
		if err != nil {
			return jsonScalar{}, err
		}
		return jsonScalar{kind: tNumber, n: r}, nil
	default:
		return jsonScalar{}, fmt.Errorf("only scalar members are implemented")
	}
}
