package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/arbiter-dev/arbiter/diff"
	"github.com/arbiter-dev/arbiter/engine"
	"github.com/arbiter-dev/arbiter/policybundle"
	"github.com/open-policy-agent/opa/v1/bundle"
)

// diffCommand is the command line of package diff: for each decision, whether
// an input exists that OLD refuses and NEW allows (and the other two
// questions), proved absent or shown. It exits 0 when no refuse_to_allow
// exists (proved), 1 when one was found, 2 when an answer is unknown or the
// command failed.
func diffCommand() *command {
	c := newCommand("diff OLD NEW", "Prove whether an edit newly allows, refuses or fails an input", `For each decision, whether an input exists that OLD refuses and NEW allows (and the other
questions), proved absent (by an SMT solver) or shown with a confirmed example. OLD and
NEW are each a policy folder, a folder with policies/ and schemas/, or a bundle file.
A signed bundle is read without verifying its signature unless --verification-key is
given (as opa build names it): then each bundle side must be signed with that key, or the
diff refuses it; a folder side has no signature to verify.
Exit 0: no refuse_to_allow exists (proved); 1: one was found; 2: a verdict is unknown, or
the command failed.`, exitInput)
	// OLD and NEW name the policies; the schemas and the fixtures (the
	// examples' starting points) come from the usual folders.
	var f folders
	c.StringVar(&f.schemas, "schemas", defaultFolder("schemas"), "folder of input and result JSON Schemas, for a side that is a policy folder")
	c.StringVar(&f.tests, "tests", defaultFolder("policy_test"), "folder whose fixtures' inputs the examples start from ('' for none)")
	c.fromEnv("schemas", "tests")
	format := c.format("text", "output format: text or json")
	solver := c.String("solver", "", "the SMT solvers to run side by side, comma-separated: z3, cvc5 (names on PATH or paths; default: those on PATH)")
	budget := c.Duration("budget", diff.DefaultBudget, "time the solvers may spend on one decision's questions together; a question not decided within it is unknown")
	c.fromEnv("solver", "budget")
	var keys policybundle.Keys
	c.StringVar(&keys.File, "verification-key", "", "PEM public key (or HMAC secret) file that each bundle side must be signed with, as opa build --verification-key (default: a signature is not verified)")
	c.StringVar(&keys.ID, "verification-key-id", "", "id of the verification key, a signature's kid must name it, as opa build's (default: default)")
	c.StringVar(&keys.Algorithm, "signing-alg", "RS256", "algorithm of the verification key, as opa build --signing-alg")
	c.run = func(ctx context.Context, _ io.Reader, stdout, stderr io.Writer) int {
		if c.NArg() != 2 {
			return say(stderr, exitInput, "arbiter diff: OLD and NEW are required")
		}
		vc, err := keys.VerificationConfig()
		if err != nil {
			return say(stderr, exitInput, "arbiter diff: --verification-key: %v", err)
		}
		var snaps [2]*engine.Snapshot
		for i, p := range c.Args() {
			if snaps[i], err = loadSide(ctx, p, f.schemas, vc); err != nil {
				return say(stderr, exitInput, "arbiter diff: loading %s: %v", p, err)
			}
		}
		var fixtures []engine.Fixture
		if f.tests != "" {
			if fixtures, err = engine.LoadFixtures(f.tests); err != nil {
				return say(stderr, exitInput, "arbiter diff: %v", err)
			}
		}
		rep, err := diff.Run(ctx, snaps[0], snaps[1], fixtures, diff.Options{Solvers: splitList(*solver), Budget: *budget})
		if err != nil {
			return say(stderr, exitInput, "arbiter diff: %v", err)
		}
		if *format == "json" {
			writeJSON(stdout, rep)
		} else {
			writeDiffText(stdout, rep)
		}
		return diffExit(rep)
	}
	return c
}

func diffExit(rep *diff.Report) int {
	code := exitOK
	for _, d := range rep.Decisions {
		switch d.RefuseToAllow.Verdict {
		case diff.Found:
			return exitError
		case diff.Unknown:
			code = exitInput
		}
	}
	return code
}

// loadSide loads one revision: a bundle file (verified with vc when there
// is a key), a folder holding policies/ and schemas/, or a policy folder
// with the schemas of --schemas.
func loadSide(ctx context.Context, p, schemas string, vc *bundle.VerificationConfig) (*engine.Snapshot, error) {
	st, err := os.Stat(p)
	if err != nil {
		return nil, err
	}
	if !st.IsDir() {
		var rev *policybundle.Revision
		if vc == nil {
			rev, err = policybundle.ReadLocalFile(p, policybundle.Limits{})
		} else {
			rev, err = policybundle.ReadFile(p, vc, policybundle.Limits{})
		}
		if err != nil {
			return nil, err
		}
		return engine.LoadFiles(ctx, rev.Files, engine.Config{})
	}
	if hasFolders(p) {
		return engine.Load(ctx, engine.Config{Policies: filepath.Join(p, "policies"), Schemas: filepath.Join(p, "schemas")})
	}
	return engine.Load(ctx, engine.Config{Policies: p, Schemas: schemas})
}

func writeDiffText(w io.Writer, rep *diff.Report) {
	if rep.Old != "" || rep.New != "" {
		fmt.Fprintf(w, "old %s, new %s\n", orNone(rep.Old), orNone(rep.New))
	}
	if len(rep.Solvers) > 0 {
		fmt.Fprintf(w, "solvers %s\n", strings.Join(rep.Solvers, ", "))
	}
	for _, name := range rep.Names() {
		d := rep.Decisions[name]
		fmt.Fprintf(w, "decision %s (%ss)\n", name, strconv.FormatFloat(d.Seconds, 'f', -1, 64))
		for _, q := range diff.Questions {
			a, q := d.Get(q), diff.QuestionName(q)
			switch a.Verdict {
			case diff.None:
				fmt.Fprintf(w, "  %s: none (proved for %s)\n", q, a.Bounds)
			case diff.Unknown:
				fmt.Fprintf(w, "  %s: unknown: %s\n", q, a.Reason)
			case diff.Found:
				fmt.Fprintf(w, "  %s: found; the fields that matter are marked <-\n", q)
				writeMarked(w, a.Example, a.Fields)
				for _, side := range []struct {
					name string
					o    *diff.Outcome
				}{{"old", a.Old}, {"new", a.New}} {
					if side.o.Error != nil {
						fmt.Fprintf(w, "    %s: error %s: %s\n", side.name, side.o.Error.Code, side.o.Error.Message)
						continue
					}
					fmt.Fprintf(w, "    %s: %s\n", side.name, side.o.Result)
					for _, r := range side.o.Fired {
						var ev []string
						for _, e := range r.Evidence {
							switch {
							case e.Absent:
								ev = append(ev, e.Path+" absent")
							case e.Data != "":
								ev = append(ev, "data."+e.Data+"="+string(e.Value))
							default:
								ev = append(ev, e.Path+"="+string(e.Value))
							}
						}
						fmt.Fprintf(w, "      fired %s (%s:%d): %s\n", r.Reason, r.File, r.Line, strings.Join(ev, ", "))
						if r.Title != "" || r.Description != "" {
							fmt.Fprintf(w, "        %s: %s\n", r.Title, r.Description)
						}
					}
				}
			}
		}
	}
}

// writeMarked prints an example as indented JSON, marking the lines of
// the members at the pointers in fields.
func writeMarked(w io.Writer, doc json.RawMessage, fields []string) {
	var v any
	_ = json.Unmarshal(doc, &v)
	var walk func(v any, ptr, indent, key string, last bool)
	mark := func(ptr string) string {
		if slices.Contains(fields, ptr) {
			return "   <-"
		}
		return ""
	}
	walk = func(v any, ptr, indent, key string, last bool) {
		comma := ","
		if last {
			comma = ""
		}
		if m, ok := v.(map[string]any); ok && len(m) > 0 {
			fmt.Fprintf(w, "    %s%s{%s\n", indent, key, mark(ptr))
			keys := slices.Sorted(maps.Keys(m))
			for i, k := range keys {
				kj, _ := json.Marshal(k)
				walk(m[k], ptr+"/"+strings.ReplaceAll(strings.ReplaceAll(k, "~", "~0"), "/", "~1"), indent+"  ", string(kj)+": ", i == len(keys)-1)
			}
			fmt.Fprintf(w, "    %s}%s\n", indent, comma)
			return
		}
		b, _ := json.Marshal(v)
		fmt.Fprintf(w, "    %s%s%s%s%s\n", indent, key, b, comma, mark(ptr))
	}
	walk(v, "", "", "", true)
}

// splitList reads a comma-separated list ("" is none).
func splitList(s string) []string {
	var out []string
	for _, x := range strings.Split(s, ",") {
		if x = strings.TrimSpace(x); x != "" {
			out = append(out, x)
		}
	}
	return out
}
