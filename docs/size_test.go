package docs_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The sizes STYLE asks for and docs/design.md repeats: a function a reader
// takes in at once (at most 80 lines, tests included) and a file of one job
// (at most 500 lines outside tests). A long table of data is the exception
// and says so: its file or function carries the comment marker below,
// which this test counts (and reports) rather than hides.
const (
	maxFuncLines = 80
	maxFileLines = 500
	dataTable    = "data table:" // "// data table: <why it is one>"
)

func TestFunctionsAndFilesStaySmall(t *testing.T) {
	t.Parallel()
	var tables []string
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != ".." && (strings.HasPrefix(name, ".") || name == "node_modules" || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		rel, _ := filepath.Rel("..", path)
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, src, parser.ParseComments)
		if err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		fileTable := hasDataTableMark(f.Doc) || strings.Contains(headOf(string(src)), "// "+dataTable)
		if n := strings.Count(string(src), "\n"); !strings.HasSuffix(path, "_test.go") && n > maxFileLines {
			if fileTable {
				tables = append(tables, fmt.Sprintf("%s (%d lines)", rel, n))
			} else {
				t.Errorf("%s is %d lines, more than %d: split it along its jobs (or mark a data table)", rel, n, maxFileLines)
			}
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			n := fset.Position(fn.End()).Line - fset.Position(fn.Pos()).Line + 1
			if n <= maxFuncLines {
				continue
			}
			where := fmt.Sprintf("%s:%d %s", rel, fset.Position(fn.Pos()).Line, fn.Name.Name)
			if hasDataTableMark(fn.Doc) || fileTable {
				tables = append(tables, fmt.Sprintf("%s (%d lines)", where, n))
				continue
			}
			t.Errorf("%s is %d lines, more than %d: cut it into named steps (or mark a data table)", where, n, maxFuncLines)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("data tables over the limits: %s", strings.Join(tables, "; "))
}

func hasDataTableMark(doc *ast.CommentGroup) bool {
	return doc != nil && strings.Contains(doc.Text(), dataTable)
}

// headOf is a file's first lines, where a data table says what it is.
func headOf(src string) string {
	lines := strings.SplitN(src, "\n", 15)
	return strings.Join(lines[:min(len(lines), 14)], "\n")
}
