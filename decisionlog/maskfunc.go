package decisionlog

import (
	"bytes"
	"encoding/json"
)

// NewMaskFunc compiles RFC 6901 pointers into a function that returns a JSON
// document with the value at each pointer replaced by MaskedValue, for other
// sinks of the same records (the decision-log upload). It fails closed: a
// document it cannot walk is masked whole.
func NewMaskFunc(pointers []string) (func(doc []byte) []byte, error) {
	m, err := newMasker(pointers)
	if err != nil {
		return nil, err
	}
	return func(doc []byte) []byte {
		var buf bytes.Buffer
		if json.Compact(&buf, doc) != nil {
			return maskedJSON
		}
		out, err := m.mask(buf.Bytes())
		if err != nil {
			return maskedJSON
		}
		return out
	}, nil
}
