// Package constcheck holds no code, only a test over the whole module: the
// values of nlx's typed codes, phases and statuses are written once, as the
// constants that define them, and everything else names the constants.
package constcheck

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// concepts are the typed constant sets whose values must never be written
// as bare string literals: a package directory (relative to the module
// root) and the type of the constants it defines.
var concepts = []struct{ dir, typ string }{
	{"plan", "Action"},
	{"plan", "RiskCode"},
	{"reconcile", "ResourceStatus"},
	{"reconcile", "LedgerPhase"},
	{"reconcile", "Outcome"},
	{"state", "JournalPhase"},
	{"state", "ApplyStatus"},
	{"state", "ProcessStatus"},
	{"host", "HomeState"},
	{"state", "TurnStatus"},
	{"state", "PermissionStatus"},
	{"provider", "Status"},
	{"provider", "ToolStatus"},
	{"egress", "Decision"},
}

// allowed are the bare literals that stay, by file and value: each is
// another concept that happens to share the spelling.
var allowed = map[[2]string]string{
	{"internal/reason/codes.go", "not_applied"}:        "reason.NotApplied, the launch refusal, not the resolve outcome",
	{"internal/reason/codes.go", "held"}:               "reason.Held, the launch refusal, not the resource status",
	{"cmd/nlx/identity.go", "unknown"}:                 "the actor name when nothing names one",
	{"cmd/nlx/follow.go", "applied"}:                   "main.FollowApplied, what one look of nlx follow did, not a resolve outcome",
	{"cmd/nlx/follow.go", "refused"}:                   "main.FollowRefused, what one look of nlx follow found, not an egress decision",
	{"cmd/nlx/state_list.go", "running"}:               "the state lock holder's liveness, shown to people",
	{"images/golayer.go", "missing"}:                   "a layer cache key's tag for an absent input file, not a credential home's state",
	{"internal/openclawfix/openclawfix.go", "unknown"}: "the record kind of the fixture generator's counts (preserve.KindUnknown)",
	{"preserve/kinds.go", "unknown"}:                   "preserve.KindUnknown, the record kind of files nlx does not know",
	{"schema/types.go", "unknown"}:                     "the record kind schema.RecordKinds lists (preserve.KindUnknown)",
	{"cmd/nlx/preserve.go", "replace"}:                 "the --replace flag of nlx preserve export",
	{"state/tools.go", "failed"}:                       "state.RefreshFailed, a catalog refresh that failed before it knew anything unknown, not a turn's status",
	{"state/tools.go", "applied"}:                      "state.RefreshOutcomeApplied, a person's word on an unknown refresh, not a resolve of an apply",
	{"toolproxy/proxy.go", "refused"}:                  "toolproxy.CallRefused, a tool call nlx's proxy refused, not an egress decision",
	{"toolproxy/proxy.go", "failed"}:                   "toolproxy.CallFailed, a tool call whose server failed, not a turn's status",
	{"toolproxy/own.go", "failed"}:                     "toolproxy.ReportFailed, what a job's report says of its work",
}

// definition is where a concept's constant is defined.
type definition struct {
	concept string
	pos     token.Position
}

func TestNoBareCodeLiterals(t *testing.T) {
	root := moduleRoot(t)
	fset := token.NewFileSet()
	files := map[string]*ast.File{} // by path relative to root
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		files[filepath.ToSlash(rel)] = f
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	// The values, from the constant declarations of each concept's type.
	values := map[string][]definition{}
	defs := map[*ast.BasicLit]bool{}
	for _, c := range concepts {
		found := 0
		for rel, f := range files {
			if filepath.ToSlash(filepath.Dir(rel)) != c.dir {
				continue
			}
			for _, decl := range f.Decls {
				gd, ok := decl.(*ast.GenDecl)
				if !ok || gd.Tok != token.CONST {
					continue
				}
				for _, spec := range gd.Specs {
					vs := spec.(*ast.ValueSpec)
					if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != c.typ {
						continue
					}
					for _, v := range vs.Values {
						lit, ok := v.(*ast.BasicLit)
						if !ok || lit.Kind != token.STRING {
							t.Errorf("%s: a %s.%s constant that is not a string literal", fset.Position(v.Pos()), c.dir, c.typ)
							continue
						}
						s, _ := strconv.Unquote(lit.Value)
						values[s] = append(values[s], definition{c.dir + "." + c.typ, fset.Position(lit.Pos())})
						defs[lit] = true
						found++
					}
				}
			}
		}
		if found == 0 {
			t.Errorf("no constants of type %s in %s/: update concepts", c.typ, c.dir)
		}
	}

	t.Logf("%d values: %s", len(values), strings.Join(slices.Sorted(maps.Keys(values)), " "))

	// Every other string literal: none may be one of the values, nor quote
	// one for SQL ('value').
	used := map[[2]string]bool{}
	for _, rel := range slices.Sorted(maps.Keys(files)) {
		f := files[rel]
		skip := map[*ast.BasicLit]bool{}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.ImportSpec:
				skip[n.Path] = true
			case *ast.Field:
				if n.Tag != nil {
					skip[n.Tag] = true
				}
			case *ast.BasicLit:
				if n.Kind != token.STRING || skip[n] || defs[n] {
					return true
				}
				s, err := strconv.Unquote(n.Value)
				if err != nil {
					t.Errorf("%s: %v", fset.Position(n.Pos()), err)
					return true
				}
				for _, v := range slices.Sorted(maps.Keys(values)) {
					if s != v && !strings.Contains(s, "'"+v+"'") {
						continue
					}
					if _, ok := allowed[[2]string{rel, v}]; ok {
						used[[2]string{rel, v}] = true
						continue
					}
					var where []string
					for _, d := range values[v] {
						where = append(where, d.concept+" ("+rel0(root, d.pos.Filename)+":"+strconv.Itoa(d.pos.Line)+")")
					}
					pos := fset.Position(n.Pos())
					t.Errorf("%s:%d: %q is a value of %s: name the constant (or, if it is another concept, add it to allowed)",
						rel, pos.Line, v, strings.Join(where, " and "))
				}
			}
			return true
		})
	}
	for k, why := range allowed {
		if !used[k] {
			t.Errorf("allowed %q in %s (%s) is no longer there: remove it from allowed", k[1], k[0], why)
		}
	}
}

func rel0(root, path string) string {
	rel, err := filepath.Rel(root, path)
	if err != nil {
		return path
	}
	return filepath.ToSlash(rel)
}

// moduleRoot is the directory of go.mod above the test's directory.
func moduleRoot(t *testing.T) string {
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test directory")
		}
		dir = parent
	}
}
