package policybundle

import (
	"archive/tar"
	"bytes"
	"cmp"
	"compress/gzip"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/open-policy-agent/opa/v1/bundle"
	"github.com/open-policy-agent/opa/v1/util"

	"github.com/arbiter-dev/arbiter/engine"
)

// BuildOptions say what `arbiter build` packs and how it signs it.
type BuildOptions struct {
	Policies, Schemas, Tests string // the folders; Tests "" packs no gate
	Revision                 string // the manifest revision; "" is the content hash
	// SigningKey, when set, names the file of the PEM private key (or HMAC
	// secret) that signs the bundle as `opa sign` does. (OPA also takes the
	// key text itself, but first stats it as a file name, which fails for
	// some PEM texts: pass a file.)
	SigningKey   string
	SigningAlg   string // default RS256
	SigningKeyID string // the JWT's kid header; "" leaves it to the verifier's key id
	ClaimsFile   string // extra JWT claims (scope, ...), as `opa sign --claims-file`
	// SkipGate packs files that do not pass their own gate. For testing a
	// fleet's refusal only: replicas will refuse such a bundle.
	SkipGate bool
	// EvalTimeout of the gate's fixtures.
	EvalTimeout time.Duration
	// Diff, when set, is the report of `arbiter diff` of this revision
	// against the one it follows (JSON), written into the manifest's
	// metadata as arbiter.diff, where the signature covers it: replicas
	// show and use it instead of running their own.
	Diff json.RawMessage
}

// Build reads the folders, lays them out as an OPA bundle, runs the
// bundle's own gate on exactly the files it packed (as a replica will) and
// returns the tarball, signed when a key is given.
func Build(ctx context.Context, o BuildOptions) ([]byte, *Revision, error) {
	fs, err := engine.ReadFolders(engine.Config{Policies: o.Policies, Schemas: o.Schemas, Tests: o.Tests})
	if err != nil {
		return nil, nil, err
	}
	files, err := layout(fs)
	if err != nil {
		return nil, nil, err
	}
	// What a replica will see: the laid-out files, sorted back into folders.
	back, _, err := fileSet(files)
	if err != nil {
		return nil, nil, err
	}
	back.Origin = "bundle"
	revision, hash := o.Revision, ""
	if !o.SkipGate {
		snap, err := engine.LoadFiles(ctx, back, engine.Config{EvalTimeout: o.EvalTimeout})
		if err != nil {
			return nil, nil, err
		}
		hash = snap.Hash
		revision = cmp.Or(revision, hash)
	} else if revision == "" {
		return nil, nil, errors.New("a bundle built without its gate needs an explicit revision")
	}

	one := 1
	meta := map[string]any{"format": 1}
	if hash != "" {
		meta["content_hash"] = hash
	}
	if len(o.Diff) > 0 {
		meta["diff"] = o.Diff
	}
	manifest := bundle.Manifest{Revision: revision, RegoVersion: &one, Metadata: map[string]any{"arbiter": meta}}
	mb, err := json.MarshalIndent(manifest, "", "  ")
	if err != nil {
		return nil, nil, err
	}
	files[manifestFile] = append(mb, '\n')

	if o.SigningKey != "" {
		sig, err := sign(files, o)
		if err != nil {
			return nil, nil, err
		}
		files[signaturesFile] = sig
	}
	raw, err := writeTarball(files)
	if err != nil {
		return nil, nil, err
	}
	// Read it back with OPA's reader: what stock OPA cannot read is no bundle.
	rev, err := read(raw, nil, true, "bundle")
	if err != nil {
		return nil, nil, fmt.Errorf("reading the bundle back: %w", err)
	}
	rev.Signed = o.SigningKey != ""
	return raw, rev, nil
}

// layout places a revision's files at their bundle paths (see the package
// comment) and refuses what would not come back in the same folder.
func layout(fs engine.FileSet) (map[string][]byte, error) {
	files := map[string][]byte{}
	var errs []error
	put := func(p string, data []byte, want role, from string) {
		if r, _, err := classify(p); err != nil || r != want {
			if err == nil {
				err = fmt.Errorf("%s/%s: would be read back as another kind of file (tests end in _test.rego, fixtures live in %s, schemas in %s)", from, p, FixtureDir, SchemaDir)
			}
			errs = append(errs, err)
			return
		}
		if _, dup := files[p]; dup {
			errs = append(errs, fmt.Errorf("%s: two folders put a file at this bundle path", p))
			return
		}
		files[p] = data
	}
	for _, f := range fs.Policies {
		switch {
		case path.Ext(f.Path) == ".rego", path.Base(f.Path) == dataFile:
			put(f.Path, f.Data, rolePolicy, "policies")
		default:
			errs = append(errs, fmt.Errorf("policies/%s: a bundle carries data as data.json files (OPA's bundle format): rename it", f.Path))
		}
	}
	for _, f := range fs.Schemas {
		put(SchemaDir+f.Path, f.Data, roleSchema, "schemas")
	}
	fixtures := map[string][]engine.File{}
	for _, f := range fs.Tests {
		switch {
		case strings.HasSuffix(f.Path, "_test.rego"):
			put(f.Path, f.Data, roleTest, "tests")
		case path.Ext(f.Path) == ".json" && strings.HasPrefix(f.Path, FixtureDir) && strings.Count(f.Path, "/") == 2:
			dir := path.Dir(f.Path)
			fixtures[dir] = append(fixtures[dir], f)
		default:
			errs = append(errs, fmt.Errorf("tests/%s: a test folder holds *_test.rego files and %s<decision>/*.json", f.Path, FixtureDir))
		}
	}
	for dir, group := range fixtures {
		data, err := mergeObjects(group)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		put(dir+"/"+dataFile, data, roleTest, "tests")
	}
	return files, errors.Join(errs...)
}

// mergeObjects joins the members of JSON object texts into one object text,
// byte for byte: OPA loads every JSON file of a folder at the folder's path,
// a bundle only its data.json, and numbers must keep their literal form. A
// case defined twice is a duplicate key, which the gate refuses.
func mergeObjects(files []engine.File) ([]byte, error) {
	slices.SortFunc(files, func(a, b engine.File) int { return strings.Compare(a.Path, b.Path) })
	if len(files) == 1 {
		return files[0].Data, nil
	}
	out := []byte("{")
	for _, f := range files {
		t := bytes.TrimSpace(f.Data)
		if len(t) < 2 || t[0] != '{' || t[len(t)-1] != '}' || !json.Valid(t) {
			return nil, fmt.Errorf("tests/%s: a fixture file is one JSON object", f.Path)
		}
		inner := bytes.TrimSpace(t[1 : len(t)-1])
		if len(inner) == 0 {
			continue
		}
		if len(out) > 1 {
			out = append(out, ",\n"...)
		}
		out = append(out, inner...)
	}
	return append(out, '}', '\n'), nil
}

// sign hashes every file as `opa sign` does (structured documents by their
// JSON value, others by their bytes) and signs the list with OPA's signer.
func sign(files map[string][]byte, o BuildOptions) ([]byte, error) {
	h, err := bundle.NewSignatureHasher(bundle.SHA256)
	if err != nil {
		return nil, err
	}
	paths := slices.Sorted(maps.Keys(files))
	infos := make([]bundle.FileInfo, 0, len(paths))
	for _, p := range paths {
		var v any = files[p]
		if bundle.IsStructuredDoc(p) {
			if err := util.Unmarshal(files[p], &v); err != nil {
				return nil, fmt.Errorf("%s: %w", p, err)
			}
		}
		sum, err := h.HashFile(v)
		if err != nil {
			return nil, err
		}
		infos = append(infos, bundle.NewFile(p, hex.EncodeToString(sum), bundle.SHA256.String()))
	}
	token, err := bundle.GenerateSignedToken(infos, bundle.NewSigningConfig(o.SigningKey, o.SigningAlg, o.ClaimsFile), o.SigningKeyID)
	if err != nil {
		return nil, fmt.Errorf("signing: %w", err)
	}
	return json.Marshal(bundle.SignaturesConfig{Signatures: []string{token}})
}

// writeTarball writes a reproducible gzip tarball: sorted paths, fixed
// times and modes, the signatures and manifest first as `opa build` does.
func writeTarball(files map[string][]byte) ([]byte, error) {
	paths := slices.DeleteFunc(slices.Sorted(maps.Keys(files)), func(p string) bool { return p == signaturesFile || p == manifestFile })
	for _, p := range []string{manifestFile, signaturesFile} {
		if _, ok := files[p]; ok {
			paths = append([]string{p}, paths...)
		}
	}
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, p := range paths {
		hdr := &tar.Header{Name: "/" + p, Mode: 0o644, Size: int64(len(files[p])), Typeflag: tar.TypeReg, ModTime: time.Unix(0, 0)}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(files[p]); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := gz.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
