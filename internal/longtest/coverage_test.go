package longtest

import (
	"bufio"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestCIRunsEveryLongDrill holds .ci/run to the tests that call Require: a
// test gated here and left out of .ci/run's EDGERELAY_LONG_TESTS lines would
// never run anywhere, and nothing else would notice.
func TestCIRunsEveryLongDrill(t *testing.T) {
	root := filepath.Join("..", "..")
	patterns := ciPatterns(t, filepath.Join(root, ".ci", "run"))
	gated := gatedTests(t, root)
	if len(gated) == 0 {
		t.Fatal("found no test that calls longtest.Require: the scan is broken")
	}
	for pkg, names := range gated {
		res, ok := patterns[pkg]
		if !ok {
			t.Errorf(".ci/run has no EDGERELAY_LONG_TESTS=1 line for %s, which gates %v", pkg, names)
			continue
		}
		for _, name := range names {
			if !slices.ContainsFunc(res, func(re *regexp.Regexp) bool { return re.MatchString(name) }) {
				t.Errorf("%s calls longtest.Require but no .ci/run -run for %s (%v) matches it", name, pkg, res)
			}
		}
	}
}

// ciPatterns reads the top-level -run patterns of the long lines, by
// package (a package may have several lines).
func ciPatterns(t *testing.T, path string) map[string][]*regexp.Regexp {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	line := regexp.MustCompile(`^` + Env + `=1 go test .*-run '([^']+)' (\S+)$`)
	out := map[string][]*regexp.Regexp{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		m := line.FindStringSubmatch(strings.TrimSpace(sc.Text()))
		if m == nil {
			continue
		}
		top, _, _ := strings.Cut(m[1], "/") // go test matches the first element against the top-level name
		pkg := filepath.Clean(m[2])
		out[pkg] = append(out[pkg], regexp.MustCompile(`^(?:`+top+`)$`))
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(out) == 0 {
		t.Fatalf("%s has no %s=1 go test -run lines", path, Env)
	}
	return out
}

// gatedTests finds, per package directory, the Test functions whose body
// calls longtest.Require (directly or in a closure such as a subtest).
func gatedTests(t *testing.T, root string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		file, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, filepath.Dir(path))
		for _, decl := range file.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || fn.Body == nil || !strings.HasPrefix(fn.Name.Name, "Test") {
				continue
			}
			if callsRequire(fn.Body) {
				out[filepath.Clean(rel)] = append(out[filepath.Clean(rel)], fn.Name.Name)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func callsRequire(body ast.Node) bool {
	found := false
	ast.Inspect(body, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return !found
		}
		if sel, ok := call.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "Require" {
			if id, ok := sel.X.(*ast.Ident); ok && id.Name == "longtest" {
				found = true
			}
		}
		return !found
	})
	return found
}
