package schema

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/nlx-dev/nlx/internal/reason"
)

// mapFields are the fields whose keys the user names (resources by name,
// members, env, ...): a key there is no unknown field.
var mapFields = map[string]bool{
	"actors": true, "members": true, "env": true, "labels": true, "secrets": true,
	"counts": true, "hashes": true, "chatReset": true, "agents": true,
}

// TestEveryStructIsClosed puts a field no struct has into each struct of
// the examples in turn, and wants each refused as "field not allowed" at
// that field: a definition left open (as matchN embedded in one did under
// cue v0.17) lets a misspelt setting pass silently.
func TestEveryStructIsClosed(t *testing.T) {
	const unknown = "zz-not-a-field"
	for _, dir := range []string{"../examples/pi-team", "testdata/base"} {
		data := exportedData(t, dir)
		if host, ok := data["host"].(map[string]any); ok {
			host["retention"] = map[string]any{"days": 30} // an optional struct
		}
		if dir == "testdata/base" {
			// A preservation, so that its structs are walked too.
			data["preservations"] = map[string]any{"claw": map[string]any{
				"source":     map[string]any{"kind": "openclaw", "path": "/srv/openclaw", "lockDir": "/tmp/oc"},
				"workspace":  "core",
				"connection": "core-codex",
				"agents":     map[string]any{"main": map[string]any{"workspace": "core", "connection": "core-codex"}},
				"export":     "/srv/export",
				"expected":   map[string]any{"counts": map[string]any{"jobs": 1}},
				"chatReset":  map[string]any{"core": "preserve"},
			}}
		}
		var structs [][]string
		walkStructs(data, nil, &structs)
		sort.Slice(structs, func(i, j int) bool { return strings.Join(structs[i], ".") < strings.Join(structs[j], ".") })
		t.Run(filepath.Base(dir)+"/as is", func(t *testing.T) {
			if _, err := loadJSON(t, dir, data); err != nil {
				t.Fatalf("the config as exported does not load:\n%v", err)
			}
		})
		for _, path := range structs {
			want := strings.Join(append(append([]string(nil), path...), unknown), ".")
			t.Run(filepath.Base(dir)+"/"+strings.Join(path, "."), func(t *testing.T) {
				mutated := deepCopy(data)
				structAt(mutated, path)[unknown] = "x"
				_, err := loadJSON(t, dir, mutated)
				var errs Errors
				if !errors.As(err, &errs) {
					t.Fatalf("accepted an unknown field at %s (err %v)", want, err)
				}
				for _, e := range errs {
					if e.Path == want && e.Code == reason.SchemaViolation && strings.Contains(e.Msg, "field not allowed") {
						return
					}
				}
				t.Errorf("no field-not-allowed error at %s:\n%v", want, err)
			})
		}
	}
}

// walkStructs collects the path of every struct in v, the top level
// included, and recurses through maps the user keys.
func walkStructs(v any, path []string, out *[][]string) {
	switch v := v.(type) {
	case map[string]any:
		isMap := len(path) == 1 && path[0] != "host" || len(path) > 0 && mapFields[path[len(path)-1]]
		if !isMap {
			*out = append(*out, append([]string(nil), path...))
		}
		for k, c := range v {
			walkStructs(c, append(append([]string(nil), path...), k), out)
		}
	case []any:
		for i, c := range v {
			walkStructs(c, append(append([]string(nil), path...), strconv.Itoa(i)), out)
		}
	}
}

// structAt returns the struct at path in v.
func structAt(v any, path []string) map[string]any {
	for _, p := range path {
		switch c := v.(type) {
		case map[string]any:
			v = c[p]
		case []any:
			i, _ := strconv.Atoi(p)
			v = c[i]
		}
	}
	return v.(map[string]any)
}

func deepCopy(v any) map[string]any {
	data, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	var out map[string]any
	if err := json.Unmarshal(data, &out); err != nil {
		panic(err)
	}
	return out
}

// loadJSON loads data, written as the one CUE file of a copy of dir (JSON
// is CUE), on both paths.
func loadJSON(t *testing.T, dir string, data map[string]any) (*Config, error) {
	t.Helper()
	cp := copyTree(t, dir)
	old, _ := filepath.Glob(filepath.Join(cp, "*.cue"))
	for _, f := range old {
		if err := os.Remove(f); err != nil {
			t.Fatal(err)
		}
	}
	body, err := json.MarshalIndent(data, "", "\t")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cp, "config.cue"), append([]byte("package config\n\n"), body...), 0o644); err != nil {
		t.Fatal(err)
	}
	return loadBoth(t, cp)
}
