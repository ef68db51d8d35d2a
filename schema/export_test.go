package schema

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"cuelang.org/go/cue"
	"cuelang.org/go/cue/build"
	"cuelang.org/go/cue/cuecontext"
	cueerrors "cuelang.org/go/cue/errors"
	cuejson "cuelang.org/go/encoding/json"
)

// exportedData is what `cue export DIR --out json` prints for a config.
func exportedData(t *testing.T, dir string) map[string]any {
	t.Helper()
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	files, _, err := readPackage(dir, root)
	if err != nil {
		t.Fatal(err)
	}
	inst := build.NewContext().NewInstance(dir, nil)
	for _, f := range files {
		if err := inst.AddSyntax(f.file); err != nil {
			t.Fatal(err)
		}
	}
	data, err := cuecontext.New().BuildInstance(inst).MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestExportedSchemaVetsData does what the documented check does,
//
//	cue export ./config --out json | cue vet -c -d '#Config' nlx_schema.cue json: -
//
// through the cue Go API: the exported file compiles on its own, accepts the
// example and refuses what nlx refuses.
func TestExportedSchemaVetsData(t *testing.T) {
	vet := exportedVet(t)
	tests := []struct {
		name   string
		mutate func(m map[string]any)
		want   string // "" accepts
	}{
		{"the example as is", func(map[string]any) {}, ""},
		{"wrong enum", func(m map[string]any) { conn(m, "alice-claude")["billing"] = "monthly" }, "billing: 2 errors in empty disjunction"},
		{"missing billing", func(m map[string]any) { delete(conn(m, "alice-claude"), "billing") }, "billing: field is required"},
		{"unknown field", func(m map[string]any) { conn(m, "alice-claude")["colour"] = "red" }, "colour: field not allowed"},
		{"unknown kind", func(m map[string]any) { m["widgets"] = map[string]any{} }, "widgets: field not allowed"},
		{"bad name", func(m map[string]any) {
			jobs := m["jobs"].(map[string]any)
			jobs["Nightly_Digest"] = jobs["nightly-digest"]
		}, "field not allowed"},
		{"raw secret", func(m map[string]any) { conn(m, "alice-claude")["secret"] = "sk-live-1" }, "secret"},
		{"two schedules", func(m map[string]any) {
			job(m, "alice-review-queue")["schedule"] = map[string]any{"every": "1h", "at": "2026-12-01T09:00:00Z"}
		}, "matchN"},
		{"an unknown field in a schedule", func(m map[string]any) {
			job(m, "alice-review-queue")["schedule"] = map[string]any{"every": "1h", "jitter": "5m"}
		}, "jitter: field not allowed"},
		{"an unknown field in a layer", func(m map[string]any) {
			img := m["images"].(map[string]any)["pi-runtime"].(map[string]any)
			img["layers"].([]any)[0].(map[string]any)["mode"] = "0755"
		}, "mode: field not allowed"},
		{"cron without timezone", func(m map[string]any) {
			job(m, "nightly-digest")["schedule"] = map[string]any{"cron": "0 7 * * *"}
		}, "timezone: field is required"},
		{"a tool granted", func(m map[string]any) {
			tool(m)["secrets"] = map[string]any{"GH_TOKEN": "env:GH_TOKEN"}
			m["workspaces"].(map[string]any)["platform"].(map[string]any)["tools"] = []any{"git"}
		}, ""},
		{"a tool with a command and a url", func(m map[string]any) { tool(m)["url"] = "http://127.0.0.1:9000/mcp" }, "a tool is a command or a url, not both"},
		{"an unknown field in a tool", func(m map[string]any) { tool(m)["colour"] = "red" }, "colour: field not allowed"},
		{"a tool's url off the loopback", func(m map[string]any) {
			delete(tool(m), "command")
			tool(m)["url"] = "http://example.com/mcp"
		}, "url: invalid value"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := exportedData(t, "../examples/pi-team")
			tt.mutate(m)
			err := vet(m)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

// exportedVet returns `cue vet -c -d '#Config' nlx_schema.cue json: -` of
// data, through the cue Go API.
func exportedVet(t *testing.T) func(data map[string]any) error {
	t.Helper()
	ctx := cuecontext.New()
	schemaVal := ctx.CompileBytes(Export(), cue.Filename("nlx_schema.cue"))
	if err := schemaVal.Err(); err != nil {
		t.Fatalf("the exported schema does not compile on its own: %v", err)
	}
	def := schemaVal.LookupPath(cue.ParsePath("#Config"))
	return func(data map[string]any) error {
		b, err := json.Marshal(data)
		if err != nil {
			t.Fatal(err)
		}
		expr, err := cuejson.Extract("data.json", b)
		if err != nil {
			t.Fatal(err)
		}
		return def.Unify(ctx.BuildExpr(expr)).Validate(cue.Concrete(true))
	}
}

// TestExportedSchemaNeverPrintsASecret: the documented cue vet refuses a
// connection secret written as a value of any kind, and what cue prints of
// the refusal (errors.Details, as cmd/cue prints it) never holds the value.
func TestExportedSchemaNeverPrintsASecret(t *testing.T) {
	vet := exportedVet(t)
	tests := []struct {
		name   string
		secret any
		shown  string // what must not be printed
	}{
		{"a string", "sk-live-0123456789abcdef", "sk-live"},
		{"a number", 987654321, "987654321"},
		{"a boolean", true, "true"},
		{"null", nil, "null"},
		{"a struct", map[string]any{"key": "sk-live-in-a-struct"}, "sk-live"},
		{"a list", []any{"sk-live-in-a-list"}, "sk-live"},
		{"a reference that almost is one", "env:", `"env:"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := exportedData(t, "../examples/pi-team")
			conn(m, "alice-claude")["secret"] = tt.secret
			err := vet(m)
			if err == nil {
				t.Fatal("accepted")
			}
			printed := cueerrors.Details(err, nil)
			if !strings.Contains(printed, `connections."alice-claude"`) || !strings.Contains(printed, "the value is not shown") {
				t.Errorf("the refusal does not say what is refused:\n%s", printed)
			}
			if strings.Contains(printed, tt.shown) {
				t.Errorf("cue prints the value:\n%s", printed)
			}
		})
	}
	for _, ref := range []string{"env:OPENAI_API_KEY", "file:/run/secrets/key", "keychain:codex"} {
		m := exportedData(t, "../examples/pi-team")
		conn(m, "alice-claude")["secret"] = ref
		if err := vet(m); err != nil {
			t.Errorf("secret %q refused: %v", ref, err)
		}
	}
}

// TestExportedSchemaNeverPrintsAToolSecret: the same of a tool's secrets,
// an entry of any kind or the whole field.
func TestExportedSchemaNeverPrintsAToolSecret(t *testing.T) {
	vet := exportedVet(t)
	tests := []struct {
		name    string
		secrets any
		shown   string // what must not be printed
	}{
		{"a string", map[string]any{"GH_TOKEN": "sk-live-0123456789abcdef"}, "sk-live"},
		{"a number", map[string]any{"GH_TOKEN": 987654321}, "987654321"},
		{"a boolean", map[string]any{"GH_TOKEN": true}, "true"},
		{"null", map[string]any{"GH_TOKEN": nil}, "null"},
		{"a struct", map[string]any{"GH_TOKEN": map[string]any{"key": "sk-live-in-a-struct"}}, "sk-live"},
		{"a list", map[string]any{"GH_TOKEN": []any{"sk-live-in-a-list"}}, "sk-live"},
		{"a reference that almost is one", map[string]any{"GH_TOKEN": "env:"}, `"env:"`},
		{"secrets that are a string", "sk-live-0123456789abcdef", "sk-live"},
		{"secrets that are a list", []any{"sk-live-in-a-list"}, "sk-live"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := exportedData(t, "../examples/pi-team")
			tool(m)["secrets"] = tt.secrets
			err := vet(m)
			if err == nil {
				t.Fatal("accepted")
			}
			printed := cueerrors.Details(err, nil)
			if !strings.Contains(printed, "tools.git") || !strings.Contains(printed, "the value is not shown") {
				t.Errorf("the refusal does not say what is refused:\n%s", printed)
			}
			if strings.Contains(printed, tt.shown) {
				t.Errorf("cue prints the value:\n%s", printed)
			}
		})
	}
}

// tool adds to m a team tool git, a command, and returns it.
func tool(m map[string]any) map[string]any {
	tools, _ := m["tools"].(map[string]any)
	if tools == nil {
		tools = map[string]any{}
		m["tools"] = tools
	}
	if tools["git"] == nil {
		tools["git"] = map[string]any{"command": []any{"mcp-git"}, "scope": "team", "owner": "platform"}
	}
	return tools["git"].(map[string]any)
}

func conn(m map[string]any, name string) map[string]any {
	return m["connections"].(map[string]any)[name].(map[string]any)
}

func job(m map[string]any, name string) map[string]any {
	return m["jobs"].(map[string]any)[name].(map[string]any)
}
