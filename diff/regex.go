package diff

import (
	"fmt"
	"regexp/syntax"
	"unicode"

	"github.com/arbiter-dev/arbiter/diff/smt"
)

// regexTerm translates a regular expression of Go's syntax (the schema
// library's and OPA's regex.match) into SMT-LIB's regular languages, for a
// search anywhere in the string as both use it: "^" and "$" anchor it where
// they stand first and last (in each top-level alternative), and an
// unanchored end matches anything. What it cannot translate exactly (word
// boundaries, anchors elsewhere, multi-line mode) is an error.
func regexTerm(b *smt.Builder, pattern string) (*smt.Term, error) {
	re, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil {
		return nil, err
	}
	all := b.App("re.*", smt.RegLan, b.App("re.allchar", smt.RegLan))
	branches := []*syntax.Regexp{re}
	if re.Op == syntax.OpAlternate {
		branches = re.Sub
	}
	var out []*smt.Term
	for _, br := range branches {
		parts := []*syntax.Regexp{br}
		if br.Op == syntax.OpConcat {
			parts = br.Sub
		}
		begin, end := false, false
		for len(parts) > 0 && parts[0].Op == syntax.OpBeginText {
			begin, parts = true, parts[1:]
		}
		for len(parts) > 0 && parts[len(parts)-1].Op == syntax.OpEndText {
			end, parts = true, parts[:len(parts)-1]
		}
		seq, err := regexParts(b, parts)
		if err != nil {
			return nil, err
		}
		if !begin {
			seq = append([]*smt.Term{all}, seq...)
		}
		if !end {
			seq = append(seq, all)
		}
		out = append(out, reConcat(b, seq))
	}
	return reUnion(b, out), nil
}

// reUnion is the union of alts: re.none for none.
func reUnion(b *smt.Builder, alts []*smt.Term) *smt.Term {
	switch len(alts) {
	case 0:
		return b.App("re.none", smt.RegLan)
	case 1:
		return alts[0]
	}
	return b.App("re.union", smt.RegLan, alts...)
}

// regexParts translates each of res.
func regexParts(b *smt.Builder, res []*syntax.Regexp) ([]*smt.Term, error) {
	out := make([]*smt.Term, len(res))
	for i, re := range res {
		t, err := regexPart(b, re)
		if err != nil {
			return nil, err
		}
		out[i] = t
	}
	return out, nil
}

func reConcat(b *smt.Builder, seq []*smt.Term) *smt.Term {
	switch len(seq) {
	case 0:
		s, _ := b.StrLit("")
		return b.App("str.to_re", smt.RegLan, s)
	case 1:
		return seq[0]
	}
	return b.App("re.++", smt.RegLan, seq...)
}

func regexPart(b *smt.Builder, re *syntax.Regexp) (*smt.Term, error) {
	switch re.Op {
	case syntax.OpNoMatch:
		return b.App("re.none", smt.RegLan), nil
	case syntax.OpEmptyMatch:
		return reConcat(b, nil), nil
	case syntax.OpLiteral:
		if re.Flags&syntax.FoldCase != 0 {
			var seq []*smt.Term
			for _, r := range re.Rune {
				var ranges []rune
				for f := r; ; {
					ranges = append(ranges, f, f)
					if f = unicode.SimpleFold(f); f == r {
						break
					}
				}
				seq = append(seq, reClass(b, ranges))
			}
			return reConcat(b, seq), nil
		}
		s, ok := b.StrLit(string(re.Rune))
		if !ok {
			return nil, fmt.Errorf("a character past U+%X", smt.MaxChar)
		}
		return b.App("str.to_re", smt.RegLan, s), nil
	case syntax.OpCharClass:
		return reClass(b, re.Rune), nil
	case syntax.OpAnyCharNotNL:
		return reClass(b, []rune{0, '\n' - 1, '\n' + 1, unicode.MaxRune}), nil
	case syntax.OpAnyChar:
		return b.App("re.allchar", smt.RegLan), nil
	case syntax.OpCapture:
		return regexPart(b, re.Sub[0])
	case syntax.OpStar, syntax.OpPlus, syntax.OpQuest, syntax.OpRepeat, syntax.OpConcat, syntax.OpAlternate:
		subs, err := regexParts(b, re.Sub)
		if err != nil {
			return nil, err
		}
		switch op := re.Op; {
		case op == syntax.OpConcat:
			return reConcat(b, subs), nil
		case op == syntax.OpAlternate:
			return b.App("re.union", smt.RegLan, subs...), nil
		case op == syntax.OpRepeat && re.Max < 0:
			return reConcat(b, []*smt.Term{b.App(fmt.Sprintf("(_ re.loop %d %d)", re.Min, re.Min), smt.RegLan, subs[0]), b.App("re.*", smt.RegLan, subs[0])}), nil
		case op == syntax.OpRepeat:
			return b.App(fmt.Sprintf("(_ re.loop %d %d)", re.Min, re.Max), smt.RegLan, subs[0]), nil
		}
		op := map[syntax.Op]string{syntax.OpStar: "re.*", syntax.OpPlus: "re.+", syntax.OpQuest: "re.opt"}[re.Op]
		return b.App(op, smt.RegLan, subs[0]), nil
	}
	return nil, fmt.Errorf("%s is not translated", re)
}

// reClass is a character class as a union of ranges, cut at the end of the
// solvers' alphabet.
func reClass(b *smt.Builder, ranges []rune) *smt.Term {
	var alts []*smt.Term
	for i := 0; i+1 < len(ranges); i += 2 {
		lo, hi := ranges[i], min(ranges[i+1], smt.MaxChar)
		if lo > hi {
			continue
		}
		l := charLit(b, lo)
		if lo == hi {
			alts = append(alts, b.App("str.to_re", smt.RegLan, l))
			continue
		}
		h := charLit(b, hi)
		alts = append(alts, b.App("re.range", smt.RegLan, l, h))
	}
	return reUnion(b, alts)
}

// charLit is the one-character string r, surrogates included (which a Go
// string cannot hold), written as StrLit writes it.
func charLit(b *smt.Builder, r rune) *smt.Term {
	if r >= 0xD800 && r <= 0xDFFF {
		return b.Lit(fmt.Sprintf(`"\u{%x}"`, r), smt.String)
	}
	t, _ := b.StrLit(string(r))
	return t
}
