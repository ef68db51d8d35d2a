package arch

import (
	"encoding/json"
	"go/parser"
	"go/token"
	"maps"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/nlx-dev/nlx/"

// pkg is what go list says of one package.
type pkg struct {
	ImportPath string
	Dir        string
	GoFiles    []string
	Imports    []string
	Deps       []string
}

func list(t *testing.T) map[string]pkg {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", "-json", "../../...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	pkgs := map[string]pkg{}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for dec.More() {
		var p pkg
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		if rel, ok := strings.CutPrefix(p.ImportPath, module); ok {
			pkgs[rel] = p
		}
	}
	return pkgs
}

// own lists the nlx packages among paths, module prefix cut.
func own(paths []string) []string {
	var out []string
	for _, p := range paths {
		if rel, ok := strings.CutPrefix(p, module); ok {
			out = append(out, rel)
		}
	}
	return out
}

// leaves are the internal packages anything may import: they import no
// nlx package themselves (checked below).
var leaves = []string{"internal/reason", "internal/bytesize", "internal/atomicfile", "internal/jsonrpc", "internal/fault", "internal/fdpass"}

// TestImportRules enforces the arrows of docs/architecture.md.
func TestImportRules(t *testing.T) {
	pkgs := list(t)
	for _, leaf := range leaves {
		if got := own(pkgs[leaf].Imports); len(got) > 0 {
			t.Errorf("%s is a leaf but imports %v", leaf, got)
		}
	}
	allowed := map[string][]string{
		// The pure core: the schema and the plan import nothing of nlx
		// but the leaves (and the plan the schema).
		"schema": leaves,
		"plan":   append([]string{"schema"}, leaves...),
		// The planner and the apply engine see the state, images and the
		// host only through interfaces of their own.
		"reconcile": append([]string{"plan", "schema", "internal/procid"}, leaves...),
		// The adapters see the provider's pipes, the turn and the
		// handler: never the state, a launch, a config or a secret's
		// source.
		"provider":        leaves,
		"provider/codex":  append([]string{"provider"}, leaves...),
		"provider/claude": append([]string{"provider"}, leaves...),
		// The signed-approval format and the registry artifacts know
		// nothing of the state or the engine: what a signature or an
		// artifact means is the commands' and apply's to decide.
		"approval": append([]string{"plan", "schema"}, leaves...),
		"publish":  leaves,
		// The tool proxy sees a catalog, connections to servers and a
		// recorder it defines: never the state, a launch or a config.
		"toolproxy": leaves,
	}
	for p, ok := range allowed {
		for _, imp := range own(pkgs[p].Imports) {
			if !slices.Contains(ok, imp) {
				t.Errorf("%s imports %s; it may import only %v", p, imp, ok)
			}
		}
	}
	// Nothing but a launch decides a launch, and nothing below the
	// commands reaches up to them.
	for name, p := range pkgs {
		for _, imp := range own(p.Imports) {
			switch {
			case imp == "cmd/nlx" || strings.HasPrefix(imp, "cmd/"):
				t.Errorf("%s imports %s: nothing imports a command", name, imp)
			case imp == "launch" && !strings.HasPrefix(name, "cmd/") && !launchers[name]:
				t.Errorf("%s imports launch: only commands and %v start launches", name, slices.Sorted(maps.Keys(launchers)))
			}
		}
	}
	// SQLite is the state's alone.
	for name, p := range pkgs {
		// preserve reads OpenClaw's SQLite store through state's foreign
		// API (state/foreign.go), never with SQL of its own.
		if name == "state" || strings.HasPrefix(name, "cmd/") || name == "launch" || launchers[name] || name == "bench" || name == "preserve" {
			continue
		}
		if name == "internal/openclawfix" {
			// a test fixture generator writing OpenClaw's own SQLite format
			continue
		}
		if slices.Contains(p.Deps, "modernc.org/sqlite") || slices.Contains(p.Deps, "database/sql") {
			t.Errorf("%s depends on SQLite: only state speaks SQL", name)
		}
	}
}

// launchers are the packages besides the commands that start launches,
// through package launch: a provider turn (and later the scheduler).
var launchers = map[string]bool{"turn": true, "serve": true}

// pure are the planning files: pure functions over values, with no I/O.
var pure = map[string][]string{
	"reconcile": {"diff.go", "risks.go", "flatten.go", "derive.go", "plan.go", "authority.go"},
	"plan":      {"plan.go", "canon.go", "render.go", "decode.go"},
}

// io are the packages a pure file may not import.
var io = []string{"os", "os/exec", "io/fs", "io/ioutil", "net", "net/http", "database/sql", "syscall", "golang.org/x/sys/unix",
	module + "state", module + "isolate", module + "images", module + "host", module + "launch", module + "internal/procid"}

// TestPureFilesDoNoIO fails when a planning file imports an I/O package.
func TestPureFilesDoNoIO(t *testing.T) {
	pkgs := list(t)
	fset := token.NewFileSet()
	for p, files := range pure {
		for _, f := range files {
			path := filepath.Join(pkgs[p].Dir, f)
			file, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
			if err != nil {
				t.Errorf("%s/%s: %v", p, f, err)
				continue
			}
			for _, imp := range file.Imports {
				ip, _ := strconv.Unquote(imp.Path.Value)
				if slices.Contains(io, ip) {
					t.Errorf("%s/%s imports %s: planning files do no I/O", p, f, ip)
				}
			}
		}
	}
}
