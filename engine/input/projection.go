package input

import (
	"maps"
	"slices"
	"strconv"
	"strings"
)

// Projection says which parts of the input an evaluation can observe, so
// that the walk builds values for those parts only; everything is still
// scanned strictly and validated against the whole schema. It comes from
// the analysis of a decision's compiled plan (engine/ireval), which must be
// conservative: anything it cannot bound is All. The rules are
// ireval.Projection's, whose Apply is the reference builder:
//
//   - nil at the top: the whole input; nil below: the value is not built.
//   - p.All, a scalar, or a value of another kind than p expects (Keys on
//     an array, Index on an object): the whole value.
//   - an object: with Any, every member (under Keys[k] when listed, Any
//     otherwise); else with Count, every member, the listed ones under their
//     projection and the others as null placeholders (count sees the right
//     number of keys); else only the members listed in Keys.
//   - an array: always its full length, each element under Index[i] when
//     listed, Any otherwise, and a null placeholder when neither is set.
type Projection struct {
	All   bool
	Count bool
	Keys  map[string]*Projection
	Index map[int]*Projection
	Any   *Projection
}

// whole is the projection that builds everything.
var whole = &Projection{All: true}

// child returns the projection of object member key (i < 0) or array
// element i, and whether a placeholder stands in for it.
func (p *Projection) child(key string, i int) (*Projection, bool) {
	var c *Projection
	switch {
	case p.All:
		return whole, false
	case i < 0:
		c = p.Keys[key] // Normalize merged Any into it
	default:
		c = p.Index[i]
	}
	switch {
	case c != nil:
		return c, false
	case p.Any != nil:
		return p.Any, false
	}
	return nil, i >= 0 || p.Count
}

// Normalize returns p with Any merged into every member Keys and Index
// name, which is what the walk expects (once per decision, at load).
func Normalize(p *Projection) *Projection {
	if p == nil || p.All {
		return p
	}
	return &Projection{Count: p.Count, Any: Normalize(p.Any), Keys: normalizeMembers(p.Keys, p.Any), Index: normalizeMembers(p.Index, p.Any)}
}

// normalizeMembers is Normalize of each member projection of m with any
// merged in (nil when m is empty).
func normalizeMembers[K comparable](m map[K]*Projection, any *Projection) map[K]*Projection {
	if len(m) == 0 {
		return nil
	}
	out := make(map[K]*Projection, len(m))
	for k, v := range m {
		out[k] = Normalize(Union(v, any))
	}
	return out
}

// Union returns a projection that observes what a or b observes.
func Union(a, b *Projection) *Projection {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	case a.All || b.All:
		return whole
	}
	u := &Projection{Count: a.Count || b.Count, Any: Union(a.Any, b.Any)}
	u.Keys = unionMembers(a.Keys, b.Keys)
	u.Index = unionMembers(a.Index, b.Index)
	return u
}

// unionMembers is the union of the member projections of a and b, by key
// or by index (nil when both are empty).
func unionMembers[K comparable](a, b map[K]*Projection) map[K]*Projection {
	if len(a)+len(b) == 0 {
		return nil
	}
	u := make(map[K]*Projection, len(a)+len(b))
	maps.Copy(u, a)
	for k, v := range b {
		u[k] = Union(u[k], v)
	}
	return u
}

// String renders p compactly, for tests and `arbiter check`: * is the
// whole value, #count its length, [any] every member.
func (p *Projection) String() string {
	if p == nil || p.All {
		return "*"
	}
	var parts []string
	if p.Count {
		parts = append(parts, "#count")
	}
	for _, k := range slices.Sorted(maps.Keys(p.Keys)) {
		parts = append(parts, strconv.Quote(k)+":"+p.Keys[k].String())
	}
	for _, i := range slices.Sorted(maps.Keys(p.Index)) {
		parts = append(parts, "["+strconv.Itoa(i)+"]:"+p.Index[i].String())
	}
	if p.Any != nil {
		parts = append(parts, "[any]:"+p.Any.String())
	}
	return "{" + strings.Join(parts, ",") + "}"
}
