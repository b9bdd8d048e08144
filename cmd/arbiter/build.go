package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/arbiter-dev/arbiter/diff"
	"github.com/arbiter-dev/arbiter/engine"
	"github.com/arbiter-dev/arbiter/policybundle"
)

// buildCommand packs the three folders into one OPA bundle that carries
// everything a revision needs (policies, data, schemas, the gate's tests and
// fixtures), after running that gate on the packed files themselves.
func buildCommand() *command {
	fs := newCommand("build", "Pack the folders into one gated OPA bundle, optionally signed", `Pack the policy, schema and test folders into one OPA bundle that carries everything a
revision needs, after running that gate on the packed files; with --diff-against, the
semantic diff of the previous revision against this one goes into the signed manifest.`, exitError)
	var f folders
	f.register(fs, true)
	var o policybundle.BuildOptions
	out := fs.String("output", "bundle.tar.gz", "bundle file to write (- for stdout)")
	fs.StringVar(&o.Revision, "revision", "", "manifest revision (default: the content hash)")
	fs.StringVar(&o.SigningKey, "signing-key", "", "sign with the private key (or HMAC secret) in this PEM file, as opa sign --signing-key")
	fs.StringVar(&o.SigningAlg, "signing-alg", "RS256", "signing algorithm, as opa sign --signing-alg")
	fs.StringVar(&o.SigningKeyID, "signing-key-id", "", "kid header of the signature (default: none; replicas use --bundle-verification-key-id)")
	fs.StringVar(&o.ClaimsFile, "claims-file", "", "extra JWT claims, as opa sign --claims-file")
	fs.BoolVar(&o.SkipGate, "no-gate", false, "pack files that fail their own tests (only to test that a fleet refuses them)")
	against := fs.String("diff-against", "", "the revision this one follows (a bundle file, a folder with policies/ and schemas/, or a policy folder): arbiter diff of it against this one, written into the signed manifest for replicas to show and use")
	budget := fs.Duration("diff-budget", diff.DefaultBudget, "with --diff-against: arbiter diff's --budget")
	fs.run = func(ctx context.Context, _ io.Reader, stdout, stderr io.Writer) int {
		if err := f.missing(); err != nil || fs.NArg() > 0 {
			return say(stderr, exitError, "arbiter build: %v", orArgs(err, fs.Args()))
		}
		o.Policies, o.Schemas, o.Tests = f.policies, f.schemas, f.tests
		if *against != "" {
			rep, err := buildDiff(ctx, *against, f, o.Revision, *budget)
			if err != nil {
				return say(stderr, exitError, "arbiter build: --diff-against: %v", err)
			}
			if o.Diff, err = json.Marshal(rep); err != nil {
				return exitError
			}
			for _, name := range rep.Names() {
				fmt.Fprintf(stderr, "arbiter build: diff against %s: decision %s: refuse_to_allow %s\n", rep.Old, name, rep.Decisions[name].RefuseToAllow.Verdict)
			}
		}
		raw, rev, err := policybundle.Build(ctx, o)
		if err != nil {
			return say(stderr, exitError, "arbiter build: %v", err)
		}
		if *out == "-" {
			if _, err := stdout.Write(raw); err != nil {
				return exitError
			}
		} else if err := writeFileAtomic(*out, raw); err != nil {
			return say(stderr, exitError, "arbiter build: %v", err)
		}
		fmt.Fprintf(stderr, "arbiter build: %s revision %s content %s signed %t: %d policy, %d schema, %d test files, %d bytes\n",
			*out, rev.Manifest.Revision, rev.ContentHash(), rev.Signed, len(rev.Files.Policies), len(rev.Files.Schemas), len(rev.Files.Tests), len(raw))
		return exitOK
	}
	return fs
}

// buildDiff diffs the revision at against (as arbiter diff loads a side)
// against the folders being built, named revision when it is set.
func buildDiff(ctx context.Context, against string, f folders, revision string, budget time.Duration) (*diff.Report, error) {
	old, err := loadSide(ctx, against, f.schemas, nil)
	if err != nil {
		return nil, err
	}
	new, err := engine.Load(ctx, engine.Config{Policies: f.policies, Schemas: f.schemas, Tests: f.tests})
	if err != nil {
		return nil, err
	}
	rep, err := diff.Run(ctx, old, new, new.Fixtures(), diff.Options{Solvers: splitList(os.Getenv("ARBITER_SOLVER")), Budget: budget})
	if err != nil {
		return nil, err
	}
	if revision != "" {
		rep.New = revision // the manifest's revision, which replicas know it by
	}
	return rep, nil
}

// writeFileAtomic writes by rename, so that a web server publishing the
// file never serves half of it.
func writeFileAtomic(name string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(name), ".build-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	_, werr := tmp.Write(data)
	if err := errors.Join(werr, tmp.Chmod(0o644), tmp.Close()); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), name)
}
