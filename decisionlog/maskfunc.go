package decisionlog

import (
	"bytes"
	"encoding/json"
)

// NewMaskFunc compiles RFC 6901 pointers into a function that returns a JSON
// document with the value at each pointer replaced by MaskedValue, for other
// sinks of the same records (the decision-log upload). It fails closed: a
// document it cannot walk is masked whole. It also returns the pointers it
// masked in this document (the root "" when masked whole), as OPA's events
// list them.
func NewMaskFunc(pointers []string) (func(doc []byte) ([]byte, []string), error) {
	m, err := newMasker(pointers)
	if err != nil {
		return nil, err
	}
	return func(doc []byte) ([]byte, []string) {
		var buf bytes.Buffer
		if json.Compact(&buf, doc) != nil {
			return maskedJSON, []string{""}
		}
		out, masked, err := m.mask(buf.Bytes())
		if err != nil {
			return maskedJSON, []string{""}
		}
		return out, masked
	}, nil
}
