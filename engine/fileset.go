package engine

import (
	"context"
	"fmt"
	"regexp"
)

// File is one file of a policy revision held in memory: its path relative
// to its folder (slash-separated) and its bytes.
type File struct {
	Path string
	Data []byte
}

// FileSet is everything one revision needs, held in memory: what the three
// folders hold, or what a bundle carries. A FileSet goes through exactly the
// gate a folder does (compile, type-check against its schemas, its own tests
// and fixtures).
type FileSet struct {
	// Origin prefixes every file name in problems and explanations (a
	// bundle's name); "" shows the paths as they are.
	Origin string
	// Revision is reported as the Snapshot's revision (a bundle's manifest
	// revision); "" reports the content hash, as folders do.
	Revision string
	Policies []File // Rego modules and data files, paths as in a policy folder
	Schemas  []File // <decision>/input.json and <decision>/result.json
	Tests    []File // *_test.rego and fixtures/<decision>/*.json
	// Diff is a report of the semantic diff of this revision against
	// another (package diff's JSON, opaque here), carried by its bundle
	// (`arbiter build --diff-against`): Snapshot.CarriedDiff.
	Diff []byte
}

// revisionPattern bounds a reported revision: it is shown in every answer,
// in metrics labels and in logs, and comes from a file a publisher wrote.
var revisionPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:+@/-]{0,127}$`)

// LoadFiles builds a Snapshot from files held in memory through the same
// gate as Load: it compiles, type-checks against fs.Schemas and passes every
// test and fixture of fs.Tests, or it is a *LoadError. cfg's folders are
// ignored; its EvalTimeout applies.
func LoadFiles(ctx context.Context, fs FileSet, cfg Config) (*Snapshot, error) {
	if fs.Revision != "" && !revisionPattern.MatchString(fs.Revision) {
		return nil, &LoadError{Problems: []Problem{{File: fs.Origin, Message: fmt.Sprintf("revision %q must match %s", fs.Revision, revisionPattern)}}}
	}
	cfg.Policies, cfg.Schemas, cfg.Tests = fs.Origin, fs.Origin, fs.Origin
	b, err := buildFrom(cfg, sources(fs.Origin, fs.Policies), sources(fs.Origin, fs.Schemas))
	if err != nil {
		return nil, err
	}
	b.testFiles = sources(fs.Origin, fs.Tests) // never nil: these are the tests
	if fs.Revision != "" {
		b.snap.Revision = fs.Revision
	}
	b.snap.carriedDiff = fs.Diff
	return b.test(ctx, fs.Origin)
}

// ReadFolders reads cfg's folders into a FileSet, exactly as Load reads
// them (dot files and editor leftovers skipped). Tests are left empty when
// cfg.Tests is "".
func ReadFolders(cfg Config) (FileSet, error) {
	var fs FileSet
	r := newTreeReader(context.Background(), cfg)
	for _, f := range []struct {
		dir  string
		dst  *[]File
		exts []string
	}{
		{cfg.Policies, &fs.Policies, []string{".rego", ".json", ".yaml", ".yml"}},
		{cfg.Schemas, &fs.Schemas, []string{".json"}},
		{cfg.Tests, &fs.Tests, []string{".rego", ".json"}},
	} {
		if f.dst == &fs.Tests && f.dir == "" {
			continue
		}
		files, probs := r.read(f.dir, f.exts...)
		if len(probs) > 0 {
			return FileSet{}, &LoadError{Problems: probs, Skipped: r.skipped}
		}
		for _, sf := range files {
			*f.dst = append(*f.dst, File{Path: sf.rel, Data: sf.data})
		}
	}
	return fs, nil
}

func sources(origin string, files []File) []sourceFile {
	out := make([]sourceFile, len(files))
	for i, f := range files {
		p := f.Path
		if origin != "" {
			p = origin + ":" + f.Path
		}
		out[i] = sourceFile{path: p, rel: f.Path, data: f.Data}
	}
	return out
}

// loadSuite is the test suite that gates b: the files it holds in memory,
// or those of the test folder dir.
func (b *sourcedSnapshot) loadSuite(r *treeReader, dir string) (*suite, []Problem) {
	if b.testFiles == nil {
		return loadSuite(r, dir)
	}
	return parseSuite(b.testFiles)
}
