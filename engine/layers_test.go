package engine

import (
	"go/types"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/tools/go/packages"
)

// runtimeFiles are the files of the runtime role (doc.go): one decision on
// one Snapshot. Every other file of the package is the compiler's.
var runtimeFiles = []string{"snapshot.go", "decide.go", "compiled.go", "evidence.go", "errors.go", "yield.go"}

// TestRuntimeReferencesNoCompilerFile: the package's two roles stay
// layered, as doc.go says: no name a runtime file uses is declared in a
// compiler file (the compiler builds the runtime's Snapshot, never the
// reverse). Types decide what a name refers to, methods and fields
// included.
func TestRuntimeReferencesNoCompilerFile(t *testing.T) {
	pkgs, err := packages.Load(&packages.Config{Mode: packages.NeedName | packages.NeedFiles | packages.NeedSyntax | packages.NeedTypes | packages.NeedTypesInfo}, ".")
	if err != nil || len(pkgs) != 1 || len(pkgs[0].Errors) > 0 {
		t.Fatalf("loading the package: %v %v", err, pkgs)
	}
	p := pkgs[0]
	seen := 0
	for id, obj := range p.TypesInfo.Uses {
		from := filepath.Base(p.Fset.Position(id.Pos()).Filename)
		if !slices.Contains(runtimeFiles, from) || obj.Pkg() != p.Types || !obj.Pos().IsValid() {
			continue
		}
		if v, ok := obj.(*types.Var); ok && !v.IsField() && obj.Parent() != p.Types.Scope() {
			continue // a local
		}
		seen++
		to := filepath.Base(p.Fset.Position(obj.Pos()).Filename)
		if !slices.Contains(runtimeFiles, to) {
			t.Errorf("%s: the runtime's %s uses %s of the compiler's %s", p.Fset.Position(id.Pos()), from, obj.Name(), to)
		}
	}
	if seen == 0 {
		t.Fatal("no name of the package used in a runtime file: nothing was checked")
	}
}
