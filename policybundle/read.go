package policybundle

import (
	"archive/tar"
	"bytes"
	"cmp"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path"
	"slices"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/bundle"
	"github.com/open-policy-agent/opa/v1/keys"

	"github.com/arbiter-dev/arbiter/engine"
)

// DefaultMaxFileBytes bounds one file of a bundle (OPA's own default is
// 1 GiB, a gzip bomb's playground).
const DefaultMaxFileBytes = 64 << 20

// Limits bound one bundle download before OPA's reader unpacks it (it holds
// every file before it checks the signature).
type Limits struct {
	Bytes         int64 // the compressed download
	UnpackedBytes int64 // all files of the tarball, unpacked
	Files         int   // entries of the tarball
}

// DefaultLimits are far above an Arbiter bundle (policies, schemas, tests:
// a few MiB unpacked) and far below a replica's memory limit.
var DefaultLimits = Limits{Bytes: 16 << 20, UnpackedBytes: 128 << 20, Files: 10000}

// scan streams a gzip tarball through, holding only its signatures file,
// and refuses it past lim: counting each entry's declared size before
// reading it. With vc, a .signatures.json that comes first (as `opa build`
// writes it) is verified at once, and every later file must be one it
// signs; OPA's reader then checks the hashes.
func scan(raw []byte, vc *bundle.VerificationConfig, lim Limits) error {
	gz, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		return fmt.Errorf("bundle archive: %w", err)
	}
	tr := tar.NewReader(gz)
	var unpacked int64
	var signed map[string]bundle.FileInfo
	for n := 1; ; n++ {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("bundle archive: %w", err)
		}
		if n > lim.Files {
			return fmt.Errorf("bundle refused while unpacking: more than %d files", lim.Files)
		}
		if unpacked += h.Size; unpacked > lim.UnpackedBytes {
			return fmt.Errorf("bundle refused while unpacking: more than %d bytes unpacked", lim.UnpackedBytes)
		}
		if h.Typeflag != tar.TypeReg || vc == nil {
			continue
		}
		p := strings.TrimPrefix(path.Clean("/"+h.Name), "/")
		switch _, ok := signed[p]; {
		case signed == nil && p == signaturesFile:
			var sc bundle.SignaturesConfig
			if err := json.NewDecoder(tr).Decode(&sc); err != nil {
				return fmt.Errorf("bundle signatures: %w", err)
			}
			if signed, err = bundle.VerifyBundleSignature(sc, vc); err != nil {
				return signatureError{err}
			}
		case signed == nil:
			vc = nil // not first: OPA's reader verifies it at the end, within lim
		case !ok:
			return fmt.Errorf("bundle file %s is not signed", p)
		}
	}
}

// signatureError is a bundle whose signatures do not verify with the key:
// the key's fault as much as the bundle's (Source.Failure).
type signatureError struct{ err error }

func (e signatureError) Error() string { return "bundle signature: " + e.err.Error() }
func (e signatureError) Unwrap() error { return e.err }

// ErrNoSchemas refuses a bundle without a schemas/ folder, such as one
// stock `opa build` makes: every decision is checked against its schemas,
// so the gate would refuse it with one undefined schema after another.
var ErrNoSchemas = errors.New("the bundle carries no " + SchemaDir + " folder (is it from stock `opa build`?): " +
	"Arbiter checks every decision's input and result against " + SchemaDir + "<decision>/{input,result}.json; " +
	"`arbiter build` makes bundles that carry them")

// Revision is a bundle read and verified: its manifest and the files of
// the revision it carries, ready for engine.LoadFiles.
type Revision struct {
	Manifest bundle.Manifest
	Files    engine.FileSet
	Signed   bool // it carried a .signatures.json that verified
	Size     int  // bytes of the tarball
}

// ContentHash is the content hash the builder recorded in the manifest.
func (r *Revision) ContentHash() string {
	a, _ := r.Manifest.Metadata["arbiter"].(map[string]any)
	h, _ := a["content_hash"].(string)
	return h
}

// Keys configure signature verification. With no key, a signed bundle is
// refused as OPA refuses one ("verification key not provided") and an
// unsigned one is read; with a key, an unsigned, tampered or otherwise
// signed bundle is refused.
type Keys struct {
	File      string // PEM public key (or HMAC secret), as OPA's --verification-key
	ID        string // key id, as OPA's --verification-key-id (default "default")
	Algorithm string // default RS256
	Scope     string // the signature's scope claim must equal it when set
}

// VerificationConfig is OPA's verification configuration for k, or nil when
// no key is configured.
func (k Keys) VerificationConfig() (*bundle.VerificationConfig, error) {
	if k.File == "" {
		if k.ID != "" {
			return nil, errors.New("a verification key id needs a verification key file")
		}
		return nil, nil
	}
	pem, err := os.ReadFile(k.File)
	if err != nil {
		return nil, fmt.Errorf("reading the verification key: %w", err)
	}
	alg := cmp.Or(k.Algorithm, "RS256")
	if !keys.IsSupportedAlgorithm(alg) {
		return nil, fmt.Errorf("verification key algorithm %q is not supported", alg)
	}
	// Not keys.NewKeyConfig: it first takes the key text for a file name, and
	// a PEM whose base64 holds a long run between two slashes fails that
	// stat with "file name too long".
	kc := &keys.Config{Key: string(pem), Algorithm: alg, Scope: k.Scope}
	id := cmp.Or(k.ID, "default")
	return bundle.NewVerificationConfig(map[string]*bundle.KeyConfig{id: kc}, id, k.Scope, nil), nil
}

// Read reads a bundle tarball with OPA's bundle reader, verifying its
// signatures against vc (see Keys), and returns the revision it carries.
// Exactly the bytes OPA's reader verified are the bytes returned.
func Read(raw []byte, vc *bundle.VerificationConfig, origin string) (*Revision, error) {
	return read(raw, vc, false, origin)
}

// ReadFile reads the bundle file at path within lim, as a download is read
// (at most lim.Bytes, its entries and unpacked size bounded before OPA's
// reader holds them), verifying it against vc; the zero Limits are
// DefaultLimits.
func ReadFile(path string, vc *bundle.VerificationConfig, lim Limits) (*Revision, error) {
	return readFile(path, vc, false, lim)
}

// ReadLocalFile is ReadFile for a bundle the operator names on a command
// line to compare against (arbiter diff, arbiter build --diff-against): a
// signature it carries is not verified (the tool holds no public key), all
// else is read and bounded as ReadFile does. Never for what is served.
func ReadLocalFile(path string, lim Limits) (*Revision, error) {
	return readFile(path, nil, true, lim)
}

func readFile(path string, vc *bundle.VerificationConfig, skipVerify bool, lim Limits) (*Revision, error) {
	lim = cmp.Or(lim, DefaultLimits)
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	raw, err := io.ReadAll(io.LimitReader(f, lim.Bytes+1))
	if err != nil {
		return nil, err
	}
	if int64(len(raw)) > lim.Bytes {
		return nil, fmt.Errorf("bundle %s: larger than %d bytes", path, lim.Bytes)
	}
	if err := scan(raw, vc, lim); err != nil {
		return nil, err
	}
	return read(raw, vc, skipVerify, path)
}

func read(raw []byte, vc *bundle.VerificationConfig, skipVerify bool, origin string) (*Revision, error) {
	rec := &recordingLoader{
		DirectoryLoader: bundle.NewTarballLoaderWithBaseURL(bytes.NewReader(raw), "").WithSizeLimitBytes(DefaultMaxFileBytes),
		files:           map[string][]byte{},
	}
	b, err := bundle.NewCustomReader(rec).
		WithBundleVerificationConfig(vc).
		WithSkipBundleVerification(skipVerify).
		WithRegoVersion(ast.RegoV1).
		WithSizeLimitBytes(DefaultMaxFileBytes).
		Read()
	if err != nil {
		return nil, err
	}
	if rec.err != nil {
		return nil, rec.err
	}
	if b.Type() != bundle.SnapshotBundleType {
		return nil, errors.New("delta bundles are not served: publish a snapshot bundle")
	}
	if v := b.Manifest.RegoVersion; v != nil && *v != 1 {
		return nil, fmt.Errorf("manifest rego_version %d: Arbiter serves Rego v1 only", *v)
	}
	for f, v := range b.Manifest.FileRegoVersions {
		if v != 1 {
			return nil, fmt.Errorf("manifest file_rego_versions %s: %d: Arbiter serves Rego v1 only", f, v)
		}
	}
	rev := &Revision{Manifest: b.Manifest, Size: len(raw)}
	rev.Files, rev.Signed, err = fileSet(rec.files)
	if err != nil {
		return nil, err
	}
	if len(rev.Files.Schemas) == 0 {
		return nil, ErrNoSchemas
	}
	rev.Files.Origin, rev.Files.Revision = origin, b.Manifest.Revision
	// The diff report the builder wrote (BuildOptions.Diff), covered by
	// the signature as the whole manifest is.
	if a, ok := b.Manifest.Metadata["arbiter"].(map[string]any); ok && a["diff"] != nil {
		if rev.Files.Diff, err = json.Marshal(a["diff"]); err != nil {
			return nil, fmt.Errorf("manifest metadata arbiter.diff: %w", err)
		}
	}
	return rev, nil
}

// fileSet sorts a bundle's files into the folders of a revision.
func fileSet(files map[string][]byte) (engine.FileSet, bool, error) {
	var fs engine.FileSet
	signed := false
	var errs []error
	for _, p := range slices.Sorted(maps.Keys(files)) {
		if p == signaturesFile {
			signed = true
			continue
		}
		role, rel, err := classify(p)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		f := engine.File{Path: rel, Data: files[p]}
		switch role {
		case rolePolicy:
			fs.Policies = append(fs.Policies, f)
		case roleSchema:
			fs.Schemas = append(fs.Schemas, f)
		case roleTest:
			fs.Tests = append(fs.Tests, f)
		}
	}
	return fs, signed, errors.Join(errs...)
}

// recordingLoader hands OPA's reader each file of the tarball and keeps its
// bytes, so that what the reader verified is what the engine compiles.
type recordingLoader struct {
	bundle.DirectoryLoader
	files map[string][]byte
	err   error
}

func (l *recordingLoader) NextFile() (*bundle.Descriptor, error) {
	d, err := l.DirectoryLoader.NextFile()
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	_, err = d.Read(&buf, DefaultMaxFileBytes+1)
	_ = d.Close()
	if err != nil && err != io.EOF {
		return nil, err
	}
	if buf.Len() > DefaultMaxFileBytes {
		return nil, fmt.Errorf("bundle file %s is larger than %d bytes", d.Path(), DefaultMaxFileBytes)
	}
	p := strings.TrimPrefix(path.Clean("/"+d.Path()), "/")
	if _, dup := l.files[p]; dup {
		// OPA's reader would verify both copies; which one a reader keeps
		// is not worth betting on.
		l.err = fmt.Errorf("bundle holds %s twice", p)
	}
	data := buf.Bytes()
	l.files[p] = data
	return bundle.NewDescriptor(d.URL(), d.Path(), bytes.NewBuffer(bytes.Clone(data))), nil
}
