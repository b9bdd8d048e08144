package diff

import (
	"context"
	"os"
	"strings"

	"github.com/open-policy-agent/opa/v1/ir"
	"testing"
	"time"

	"github.com/arbiter-dev/arbiter/diff/smt"
	"github.com/arbiter-dev/arbiter/engine"
)

func TestDebugEncode(t *testing.T) {
	if os.Getenv("DIFF_DEBUG") == "" {
		t.Skip()
	}
	s, err := engine.Load(context.Background(), engine.Config{Policies: "../policies", Schemas: "../schemas"})
	if err != nil {
		t.Fatal(err)
	}
	name := os.Getenv("DIFF_DEBUG")
	ao, _ := s.Analysis(name)
	v, _ := s.Verdict(name)
	an2 := ao
	if dir := os.Getenv("DIFF_NEW"); dir != "" {
		s2, err := engine.Load(context.Background(), engine.Config{Policies: dir + "/policies", Schemas: dir + "/schemas"})
		if err != nil {
			t.Fatal(err)
		}
		an2, _ = s2.Analysis(name)
		v, _ = s2.Verdict(name)
	}
	debugFail = func(at string, st ir.Stmt, cond *smt.Term) {
		if strings.HasSuffix(at, ":99") {
			t.Logf("%s %#v %s", at, st, dump(cond, 6))
		}
	}
	start := time.Now()
	an, enc, err := encode(context.Background(), ao, an2, v, 0)
	if err != nil {
		t.Fatal(err)
	}
	if os.Getenv("DIFF_ASSUME_LEMMAS") != "" {
		enc.resultOK = [2]*smt.Term{an.vs.b.True(), an.vs.b.True()}
	}
	qs, bg := enc.questions(an.vs.b), enc.background
	if os.Getenv("DIFF_LEMMA") != "" {
		qs = []question{{f: an.vs.b.Not(enc.resultOK[1])}}
	}
	if q := os.Getenv("DIFF_Q"); q != "" {
		for _, x := range qs {
			if string(x.class) == q {
				qs = []question{x}
			}
		}
	}
	t.Logf("encode: %v, %d terms; err sites %v", time.Since(start), an.vs.b.Size(), an.errSites)
	sc := smt.NewScript(an.vs.b)
	for _, x := range bg {
		sc.Assert(x)
	}
	for _, q := range qs {
		sc.Push()
		sc.Assert(q.f)
		sc.Raw("(check-sat)")
		sc.Pop()
	}
	os.WriteFile("/tmp/diff.smt2", []byte(sc.Take()), 0o644)
	t.Logf("script written: %v", time.Since(start))
}

func dump(t *smt.Term, depth int) string {
	if depth == 0 {
		return "…"
	}
	if len(t.Args()) == 0 {
		if t.Lit() != "" {
			return t.Lit()
		}
		return t.Op()
	}
	out := "(" + t.Op()
	for _, a := range t.Args() {
		out += " " + dump(a, depth-1)
	}
	return out + ")"
}

func TestDebugValidity(t *testing.T) {
	if os.Getenv("DIFF_DEBUG_V") == "" {
		t.Skip()
	}
	s, err := engine.Load(context.Background(), engine.Config{Policies: "../policies", Schemas: "../schemas"})
	if err != nil {
		t.Fatal(err)
	}
	name := os.Getenv("DIFF_DEBUG_V")
	ao, _ := s.Analysis(name)
	v, _ := s.Verdict(name)
	_, enc, err := encode(context.Background(), ao, ao, v, 0)
	if err != nil {
		t.Fatal(err)
	}
	bg := enc.background
	for _, x := range bg {
		t.Logf("%s", dump(x, 12))
	}
}
