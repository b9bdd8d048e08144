package decisionlog

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/arbiter-dev/arbiter/internal/jsonptr"
)

// MaskedValue replaces every masked value of a logged input. A record whose
// input holds it cannot be decided again faithfully.
const MaskedValue = "**masked**"

var maskedJSON = []byte(`"` + MaskedValue + `"`)

// masker replaces the values at a set of JSON pointers. The pointers are a
// tree of reference tokens; a leaf is a value to replace.
type masker struct {
	leaf     bool
	pointer  string // at a leaf: the pointer as configured
	children map[string]*masker
}

// newMasker compiles RFC 6901 JSON pointers ("" is the whole document).
func newMasker(pointers []string) (*masker, error) {
	root := &masker{}
	for _, p := range pointers {
		if p != "" && !strings.HasPrefix(p, "/") {
			return nil, fmt.Errorf("mask %q is not a JSON pointer: it must be empty or start with /", p)
		}
		node := root
		if p != "" {
			for _, tok := range strings.Split(p[1:], "/") {
				tok = jsonptr.Unescape(tok)
				if node.children == nil {
					node.children = map[string]*masker{}
				}
				next, ok := node.children[tok]
				if !ok {
					next = &masker{}
					node.children[tok] = next
				}
				node = next
			}
		}
		node.leaf, node.pointer = true, p
	}
	return root, nil
}

// mask returns doc, which must be valid JSON, with the value at each
// pointer replaced by MaskedValue, and the pointers that named a value.
// Everything else keeps its bytes and its order: the record stays the input
// as received, minus the masked values. Pointers that name nothing in doc
// are ignored.
func (m *masker) mask(doc []byte) ([]byte, []string, error) {
	dec := json.NewDecoder(bytes.NewReader(doc))
	var spans []span
	if err := m.walk(dec, &spans); err != nil {
		return nil, nil, err
	}
	if len(spans) == 0 {
		return doc, nil, nil
	}
	matched := make([]string, len(spans))
	out := make([]byte, 0, len(doc))
	var at int64
	for i, s := range spans {
		matched[i] = s.pointer
		out = append(out, doc[at:s.start]...)
		out = append(out, maskedJSON...)
		at = s.end
	}
	return append(out, doc[at:]...), matched, nil
}

// span is the bytes of one value to mask.
type span struct {
	start, end int64
	pointer    string
}

// walk consumes one value from dec, recording the byte span of every value
// to mask: a value decoded into a RawMessage is exactly the bytes that end
// at the decoder's offset.
func (m *masker) walk(dec *json.Decoder, spans *[]span) error {
	if m == nil || m.leaf {
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return err
		}
		if m != nil {
			end := dec.InputOffset()
			*spans = append(*spans, span{end - int64(len(raw)), end, m.pointer})
		}
		return nil
	}
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	switch tok {
	case json.Delim('{'):
		for dec.More() {
			key, err := dec.Token()
			if err != nil {
				return err
			}
			k, _ := key.(string)
			if err := m.children[k].walk(dec, spans); err != nil {
				return err
			}
		}
	case json.Delim('['):
		for i := 0; dec.More(); i++ {
			if err := m.children[strconv.Itoa(i)].walk(dec, spans); err != nil {
				return err
			}
		}
	default:
		return nil // a scalar where the pointer expects a container: nothing to mask
	}
	_, err = dec.Token() // the closing delimiter
	return err
}

// maskViolations returns a copy of e (the record's error may be shared) in
// which each violation at or under a masked pointer has MaskedValue for a
// message: the schema library's messages quote the value they refuse.
func (m *masker) maskViolations(e RecordError) *RecordError {
	vs := make([]Violation, len(e.Violations))
	for i, v := range e.Violations {
		if m.covers(v.Path) {
			v.Message = MaskedValue
		}
		vs[i] = v
	}
	e.Violations = vs
	return &e
}

// covers reports whether ptr is at or under one of m's pointers. A pointer
// that is not one ("" or /...) is covered: fail closed.
func (m *masker) covers(ptr string) bool {
	node := m
	if node.leaf {
		return true
	}
	if ptr == "" {
		return false
	}
	if !strings.HasPrefix(ptr, "/") {
		return true
	}
	for _, tok := range strings.Split(ptr[1:], "/") {
		if node = node.children[jsonptr.Unescape(tok)]; node == nil {
			return false
		}
		if node.leaf {
			return true
		}
	}
	return false
}

// recordMasker masks the records of the pipeline, once each, before any
// sink sees them. data masks the inputs logged on the OPA Data API path,
// where a failed request's body ({"input": ...}) is logged as received:
// each pointer also applies under /input.
type recordMasker struct{ plain, data *masker }

func newRecordMasker(pointers []string) (*recordMasker, error) {
	if len(pointers) == 0 {
		return nil, nil
	}
	plain, err := newMasker(pointers)
	if err != nil {
		return nil, err
	}
	wrapped := append([]string(nil), pointers...)
	for _, p := range pointers {
		wrapped = append(wrapped, "/input"+p)
	}
	data, _ := newMasker(wrapped) // valid: built from valid pointers
	return &recordMasker{plain, data}, nil
}

// mask applies the configured pointers to rec's input and records which
// values it replaced. A body that is not JSON cannot be masked, so it is
// erased; an input that cannot be walked is masked whole (fail closed). A
// nil recordMasker masks nothing.
func (rm *recordMasker) mask(rec Record) Record {
	if rm == nil {
		return rec
	}
	if rec.BodyBase64 != "" {
		rec.BodyBase64, rec.Erased = "", append(rec.Erased, "/body_base64")
	}
	if rec.BodyPrefix != "" {
		rec.BodyPrefix, rec.Erased = "", append(rec.Erased, "/body_prefix_base64")
	}
	if rec.Error != nil && len(rec.Error.Violations) > 0 {
		rec.Error = rm.plain.maskViolations(*rec.Error)
	}
	if len(rec.Input) == 0 {
		return rec
	}
	m := rm.plain
	if strings.HasPrefix(rec.Path, "/v1/data/") {
		m = rm.data
	}
	masked, matched, err := m.mask(rec.Input)
	if err != nil {
		rec.Input, rec.Masked = maskedJSON, append(rec.Masked, "/input")
		if rec.Error != nil && len(rec.Error.Violations) > 0 {
			rec.Error = (&masker{leaf: true}).maskViolations(*rec.Error) // the input masked whole: every violation
		}
		return rec
	}
	rec.Input = masked
	for _, p := range matched {
		rec.Masked = append(rec.Masked, "/input"+p)
	}
	return rec
}
