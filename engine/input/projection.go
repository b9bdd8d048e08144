package input

// Projection says which parts of the input an evaluation can observe, so
// that the walk builds values for those parts only; everything is still
// scanned strictly and validated against the whole schema. It comes from
// the analysis of a decision's compiled plan, which must be conservative:
// anything it cannot bound is All.
//
// Building a value under a projection p:
//   - nil: nothing (the value is not observable).
//   - scalars are built whole whatever p says.
//   - p.All: the whole value.
//   - an object: the members named in Keys (with their projections), every
//     member with Any when Any is set, and when Count is set every other
//     member with a null placeholder (count sees the right number of keys).
//     A member of neither kind is left out.
//   - an array: with Index, Any or Count, every element (placeholders for
//     elements no projection names, so indexes and length stay right);
//     otherwise the empty array (only the value's kind is observable).
type Projection struct {
	All   bool
	Count bool
	Keys  map[string]*Projection
	Index map[int]*Projection
	Any   *Projection
}

// whole is the projection that builds everything.
var whole = &Projection{All: true}

// member returns the projection of the object member key, and whether a
// placeholder stands in for it.
func (p *Projection) member(key string) (child *Projection, placeholder bool) {
	if p.All {
		return whole, false
	}
	if c := p.Keys[key]; c != nil {
		return c, false // Normalize merged Any into it
	}
	if p.Any != nil {
		return p.Any, false
	}
	return nil, p.Count
}

// element returns the projection of array element i, and whether a
// placeholder stands in for it.
func (p *Projection) element(i int) (child *Projection, placeholder bool) {
	if p.All {
		return whole, false
	}
	if c := p.Index[i]; c != nil {
		return c, false
	}
	if p.Any != nil {
		return p.Any, false
	}
	return nil, true
}

// elements reports whether an array under p keeps its elements.
func (p *Projection) elements() bool {
	return p.All || p.Count || p.Any != nil || len(p.Index) > 0
}

// Normalize returns p with Any merged into every member Keys and Index
// name, which is what the walk expects (once per decision, at load).
func Normalize(p *Projection) *Projection {
	if p == nil || p.All {
		return p
	}
	n := &Projection{Count: p.Count, Any: Normalize(p.Any)}
	if len(p.Keys) > 0 {
		n.Keys = make(map[string]*Projection, len(p.Keys))
		for k, v := range p.Keys {
			n.Keys[k] = Normalize(Union(v, p.Any))
		}
	}
	if len(p.Index) > 0 {
		n.Index = make(map[int]*Projection, len(p.Index))
		for k, v := range p.Index {
			n.Index[k] = Normalize(Union(v, p.Any))
		}
	}
	return n
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
	if len(a.Keys)+len(b.Keys) > 0 {
		u.Keys = make(map[string]*Projection, len(a.Keys)+len(b.Keys))
		for k, v := range a.Keys {
			u.Keys[k] = v
		}
		for k, v := range b.Keys {
			u.Keys[k] = Union(u.Keys[k], v)
		}
	}
	if len(a.Index)+len(b.Index) > 0 {
		u.Index = make(map[int]*Projection, len(a.Index)+len(b.Index))
		for k, v := range a.Index {
			u.Index[k] = v
		}
		for k, v := range b.Index {
			u.Index[k] = Union(u.Index[k], v)
		}
	}
	return u
}
