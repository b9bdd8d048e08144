// Package policybundle carries an Arbiter revision as an OPA bundle: it
// builds and signs one from the policy, schema and test folders, reads and
// verifies one with OPA's bundle reader, and fetches them over HTTP(S) or
// from an OCI registry with OPA's downloader. Everything here is glue over
// github.com/open-policy-agent/opa/v1/{bundle,download,plugins/rest,keys}.
//
// The layout keeps the bundle a plain OPA bundle, so that stock
// `opa run --server --bundle` serves the same decisions from it:
//
//	/.manifest                          revision, rego_version 1, metadata.arbiter
//	/.signatures.json                   when signed (OPA's format, `opa sign`'s hashes)
//	/<policy path>.rego, /<dir>/data.json   the policy folder as it is
//	/<test>_test.rego                   the Rego tests of the gate
//	/fixtures/<decision>/data.json      the gate's fixtures, one data file per decision
//	/schemas/<decision>/{input,result}.json   not data to OPA, carried and signed
package policybundle

import (
	"fmt"
	"path"
	"strings"
)

// The roles a file plays in a revision.
type role int

const (
	rolePolicy role = iota
	roleSchema
	roleTest
	roleManifest
)

// SchemaDir is the bundle folder that holds the schemas.
const SchemaDir = "schemas/"

// FixtureDir is the bundle (and test folder) folder that holds fixtures.
const FixtureDir = "fixtures/"

const (
	manifestFile   = ".manifest"
	signaturesFile = ".signatures.json"
	dataFile       = "data.json"
)

// classify names the role of a bundle file by its path (slash-separated,
// without a leading slash). Anything an OPA bundle may hold that Arbiter
// does not serve (wasm, plans, delta patches, YAML data) is refused rather
// than ignored: a revision is exactly the files that gate it.
func classify(p string) (role, string, error) {
	base := path.Base(p)
	switch {
	case p == manifestFile:
		return roleManifest, p, nil
	case strings.HasPrefix(p, SchemaDir):
		if path.Ext(p) != ".json" || base == dataFile {
			return 0, "", fmt.Errorf("%s: the schema folder holds <decision>/<name>.json schemas only (a data.json there would be data to OPA)", p)
		}
		return roleSchema, strings.TrimPrefix(p, SchemaDir), nil
	case strings.HasSuffix(p, "_test.rego"):
		return roleTest, p, nil
	case strings.HasPrefix(p, FixtureDir):
		if base != dataFile {
			return 0, "", fmt.Errorf("%s: a bundle carries fixtures as %s<decision>/data.json", p, FixtureDir)
		}
		return roleTest, p, nil
	case path.Ext(p) == ".rego", base == dataFile:
		return rolePolicy, p, nil
	default:
		return 0, "", fmt.Errorf("%s: not a file of an Arbiter bundle (Rego modules, data.json, schemas/, fixtures/, .manifest, .signatures.json)", p)
	}
}
