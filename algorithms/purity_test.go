package algorithms

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// impureImports are standard-library packages algorithms/ must not import:
// I/O, clocks, concurrency, randomness and escape hatches. Third-party
// packages (a dot in the first path element) are refused as well.
var impureImports = []string{
	"C", "unsafe", "syscall", "os", "net", "time", "sync", "runtime", "plugin",
	"math/rand", "crypto/rand", "log", "io/ioutil", "io/fs", "embed", "testing", "expvar", "internal",
}

func impure(path string) bool {
	if first, _, _ := strings.Cut(path, "/"); strings.Contains(first, ".") {
		return true
	}
	for _, bad := range impureImports {
		if path == bad || strings.HasPrefix(path, bad+"/") {
			return true
		}
	}
	return false
}

func TestPurityRules(t *testing.T) {
	for path, want := range map[string]bool{
		"fmt": false, "math/bits": false, "encoding/binary": false, "regexp": false, "io": false,
		"os": true, "os/exec": true, "net/http": true, "time": true, "sync": true, "sync/atomic": true,
		"unsafe": true, "C": true, "syscall": true, "math/rand": true, "math/rand/v2": true,
		"github.com/x/y": true, "golang.org/x/sync/errgroup": true, "runtime/cgo": true,
	} {
		if impure(path) != want {
			t.Errorf("impure(%q) = %v, want %v", path, !want, want)
		}
	}
}

// TestPurity parses every non-test Go file of the package and fails on an
// impure import or a go statement.
func TestPurity(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	checked := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, name, src, 0)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		checked++
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if impure(path) {
				t.Errorf("%s imports %q: algorithms/ must stay pure (stdlib without I/O, clocks, concurrency or randomness)", fset.Position(imp.Pos()), path)
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if g, ok := n.(*ast.GoStmt); ok {
				t.Errorf("%s: go statement: algorithms/ is deterministic and starts no goroutines", fset.Position(g.Pos()))
			}
			return true
		})
	}
	if checked < 5 {
		t.Fatalf("only %d files checked; is the test running in the package directory?", checked)
	}
}
