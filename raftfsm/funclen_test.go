package raftfsm

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// maxFuncLines bounds a function of this package, from its func line to
// its closing brace, so that each reads on one screen.
const maxFuncLines = 60

// TestFunctionsAreShort fails for any function of the package (tests
// aside) longer than maxFuncLines.
func TestFunctionsAreShort(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fs := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fs, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			if n := fs.Position(fd.End()).Line - fs.Position(fd.Pos()).Line + 1; n > maxFuncLines {
				t.Errorf("%s: %s is %d lines, more than %d", fs.Position(fd.Pos()), fd.Name.Name, n, maxFuncLines)
			}
		}
	}
}
