package reconcile

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/nlx-dev/nlx/plan"
	"github.com/nlx-dev/nlx/schema"
)

func res(kind schema.Kind, name, spec string) Resource {
	return Resource{Kind: kind, Name: name, Spec: json.RawMessage(spec), Hash: HashSpec([]byte(spec)), Status: "active"}
}

func TestDiffActions(t *testing.T) {
	job := `{"workspace":"w","connection":"c","schedule":{"cron":"0 7 * * *","timezone":"UTC"},"prompt":"p","enabled":true}`
	tests := []struct {
		name    string
		desired []Resource
		actual  []Resource
		action  plan.Action // "" when no change is expected
		diff    []plan.FieldDiff
	}{
		{
			name:    "create",
			desired: []Resource{res(schema.KindJob, "j", `{"prompt":"p","schedule":{"every":"1h"}}`)},
			action:  plan.Create,
			diff: []plan.FieldDiff{
				{Path: "prompt", After: json.RawMessage(`"p"`)},
				{Path: "schedule.every", After: json.RawMessage(`"1h"`)},
			},
		},
		{
			name:   "delete",
			actual: []Resource{res(schema.KindJob, "j", `{"prompt":"p"}`)},
			action: plan.Delete,
			diff:   []plan.FieldDiff{{Path: "prompt", Before: json.RawMessage(`"p"`)}},
		},
		{
			name:    "no change",
			desired: []Resource{res(schema.KindJob, "j", job)},
			actual:  []Resource{res(schema.KindJob, "j", job)},
		},
		{
			name:    "update one field",
			desired: []Resource{res(schema.KindJob, "j", strings.Replace(job, "0 7", "0 8", 1))},
			actual:  []Resource{res(schema.KindJob, "j", job)},
			action:  plan.Update,
			diff:    []plan.FieldDiff{{Path: "schedule.cron", Before: json.RawMessage(`"0 7 * * *"`), After: json.RawMessage(`"0 8 * * *"`)}},
		},
		{
			name:    "update adds and removes fields",
			desired: []Resource{res(schema.KindJob, "j", `{"skill":"s","workspace":"w"}`)},
			actual:  []Resource{res(schema.KindJob, "j", `{"policy":"read_only","workspace":"w"}`)},
			action:  plan.Update,
			diff: []plan.FieldDiff{
				{Path: "policy", Before: json.RawMessage(`"read_only"`)},
				{Path: "skill", After: json.RawMessage(`"s"`)},
			},
		},
		{
			name:    "replace when an immutable field changes",
			desired: []Resource{res(schema.KindJob, "j", `{"prompt":"q","workspace":"v"}`)},
			actual:  []Resource{res(schema.KindJob, "j", `{"prompt":"p","workspace":"w"}`)},
			action:  plan.Replace,
			diff: []plan.FieldDiff{
				{Path: "prompt", Before: json.RawMessage(`"p"`), After: json.RawMessage(`"q"`)},
				{Path: "workspace", Before: json.RawMessage(`"w"`), After: json.RawMessage(`"v"`), ForcesReplace: true},
			},
		},
		{
			name:    "replace by a nested immutable field",
			desired: []Resource{res(schema.KindPreservation, "p", `{"source":{"kind":"legacy-runtime","path":"/b"}}`)},
			actual:  []Resource{res(schema.KindPreservation, "p", `{"source":{"kind":"legacy-runtime","path":"/a"}}`)},
			action:  plan.Replace,
			diff:    []plan.FieldDiff{{Path: "source.path", Before: json.RawMessage(`"/a"`), After: json.RawMessage(`"/b"`), ForcesReplace: true}},
		},
		{
			name:    "replace when a tool's owner changes",
			desired: []Resource{res(schema.KindTool, "t", `{"command":["x"],"egress":"none","owner":"bob","scope":"personal"}`)},
			actual:  []Resource{res(schema.KindTool, "t", `{"command":["x"],"egress":"none","owner":"ann","scope":"personal"}`)},
			action:  plan.Replace,
			diff:    []plan.FieldDiff{{Path: "owner", Before: json.RawMessage(`"ann"`), After: json.RawMessage(`"bob"`), ForcesReplace: true}},
		},
		{
			name:    "replace when a tool's scope changes",
			desired: []Resource{res(schema.KindTool, "t", `{"command":["x"],"egress":"none","owner":"core","scope":"personal"}`)},
			actual:  []Resource{res(schema.KindTool, "t", `{"command":["x"],"egress":"none","owner":"core","scope":"team"}`)},
			action:  plan.Replace,
			diff:    []plan.FieldDiff{{Path: "scope", Before: json.RawMessage(`"team"`), After: json.RawMessage(`"personal"`), ForcesReplace: true}},
		},
		{
			name:    "a tool's command updates in place",
			desired: []Resource{res(schema.KindTool, "t", `{"command":["x","-v"],"egress":"none","owner":"core","scope":"team"}`)},
			actual:  []Resource{res(schema.KindTool, "t", `{"command":["x"],"egress":"none","owner":"core","scope":"team"}`)},
			action:  plan.Update,
			diff:    []plan.FieldDiff{{Path: "command", Before: json.RawMessage(`["x"]`), After: json.RawMessage(`["x","-v"]`)}},
		},
		{
			name:    "the same field of another kind updates in place",
			desired: []Resource{res(schema.KindConnection, "c", `{"owner":"bob"}`)},
			actual:  []Resource{res(schema.KindConnection, "c", `{"owner":"ann"}`)},
			action:  plan.Update,
			diff:    []plan.FieldDiff{{Path: "owner", Before: json.RawMessage(`"ann"`), After: json.RawMessage(`"bob"`)}},
		},
		{
			name:    "a list of scalars is one field",
			desired: []Resource{res(schema.KindWorkspace, "w", `{"skills":["a","c"]}`)},
			actual:  []Resource{res(schema.KindWorkspace, "w", `{"skills":["a","b","c"]}`)},
			action:  plan.Update,
			diff:    []plan.FieldDiff{{Path: "skills", Before: json.RawMessage(`["a","b","c"]`), After: json.RawMessage(`["a","c"]`)}},
		},
		{
			name:    "a list of objects is compared by element; odd keys are quoted",
			desired: []Resource{res(schema.KindImage, "i", `{"layers":[{"dest":"/x","go":"a"}],"labels":{"a.b":"2"}}`)},
			actual:  []Resource{res(schema.KindImage, "i", `{"layers":[{"dest":"/y","go":"a"}],"labels":{"a.b":"1"}}`)},
			action:  plan.Update,
			diff: []plan.FieldDiff{
				{Path: `labels["a.b"]`, Before: json.RawMessage(`"1"`), After: json.RawMessage(`"2"`)},
				{Path: "layers[0].dest", Before: json.RawMessage(`"/y"`), After: json.RawMessage(`"/x"`)},
			},
		},
		{
			name:    "members map",
			desired: []Resource{res(schema.KindWorkspace, "w", `{"members":{"ann":"admin","bob":"admin"}}`)},
			actual:  []Resource{res(schema.KindWorkspace, "w", `{"members":{"ann":"admin","bob":"member"}}`)},
			action:  plan.Update,
			diff:    []plan.FieldDiff{{Path: "members.bob", Before: json.RawMessage(`"member"`), After: json.RawMessage(`"admin"`)}},
		},
		{
			name:    "an emptied map is a field",
			desired: []Resource{res(schema.KindWorkspace, "w", `{"members":{}}`)},
			actual:  []Resource{res(schema.KindWorkspace, "w", `{"members":{"ann":"admin"}}`)},
			action:  plan.Update,
			diff: []plan.FieldDiff{
				{Path: "members", After: json.RawMessage(`{}`)},
				{Path: "members.ann", Before: json.RawMessage(`"admin"`)},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			changes, err := Diff(tt.desired, tt.actual)
			if err != nil {
				t.Fatal(err)
			}
			if tt.action == "" {
				if len(changes) != 0 {
					t.Fatalf("got %d changes, want none: %+v", len(changes), changes)
				}
				return
			}
			if len(changes) != 1 {
				t.Fatalf("got %d changes, want 1", len(changes))
			}
			c := changes[0]
			if c.Action != tt.action {
				t.Errorf("action: got %s, want %s", c.Action, tt.action)
			}
			if !reflect.DeepEqual(c.Diff, tt.diff) {
				t.Errorf("diff:\ngot  %s\nwant %s", show(c.Diff), show(tt.diff))
			}
			if c.Risks == nil {
				t.Error("risks must be an empty list, not null")
			}
			if (c.Action == plan.Create) != (string(c.Before) == "null") || (c.Action == plan.Delete) != (string(c.After) == "null") {
				t.Errorf("before %s / after %s do not fit %s", c.Before, c.After, c.Action)
			}
		})
	}
}

func show(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func TestDiffOrder(t *testing.T) {
	spec := `{"x":1}`
	other := `{"x":2}`
	desired := []Resource{
		res(schema.KindJob, "j-new", spec),
		res(schema.KindPreservation, "keep", other),
		res(schema.KindConnection, "c-new", spec),
		res(schema.KindWorkspace, "w-new", spec),
		res(schema.KindSkill, "s-changed", other),
		res(schema.KindProvider, "p-new", spec),
		res(schema.KindImage, "i-new", spec),
		res(schema.KindConnection, "a-changed", other),
	}
	actual := []Resource{
		res(schema.KindJob, "j-old", spec),
		res(schema.KindWorkspace, "w-old", spec),
		res(schema.KindConnection, "c-old", spec),
		res(schema.KindSkill, "s-changed", spec),
		res(schema.KindConnection, "a-changed", spec),
		res(schema.KindProvider, "p-old", spec),
		res(schema.KindPreservation, "keep", spec),
		res(schema.KindPreservation, "gone", spec),
	}
	changes, err := Diff(desired, actual)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range changes {
		got = append(got, string(c.Action)+" "+c.Address)
	}
	want := []string{
		// Creates and updates by rank: providers and images, workspaces,
		// connections and skills, jobs, preservations...
		"create image.i-new",
		"create provider.p-new",
		"create workspace.w-new",
		"update connection.a-changed",
		"create connection.c-new",
		"update skill.s-changed",
		"create job.j-new",
		"update preservation.keep",
		// ...then deletes in reverse rank.
		"delete preservation.gone",
		"delete job.j-old",
		"delete connection.c-old",
		"delete workspace.w-old",
		"delete provider.p-old",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("order:\ngot  %q\nwant %q", got, want)
	}
	if s := plan.Summarize(changes); s != (plan.Summary{Add: 5, Change: 3, Destroy: 5}) {
		t.Errorf("summary: got %+v", s)
	}
}

// TestDiffOrderTools: a tool is created before the workspace granted it
// and deleted after the workspace that stops granting it, whatever their
// names.
func TestDiffOrderTools(t *testing.T) {
	desired := []Resource{
		res(schema.KindWorkspace, "a-granted", `{"tools":["z-new"]}`),
		res(schema.KindTool, "z-new", `{"command":["x"]}`),
		res(schema.KindWorkspace, "b-ungranted", `{}`),
	}
	actual := []Resource{
		res(schema.KindWorkspace, "a-granted", `{}`),
		res(schema.KindWorkspace, "b-ungranted", `{"tools":["a-old"]}`),
		res(schema.KindTool, "a-old", `{"command":["x"]}`),
	}
	changes, err := Diff(desired, actual)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range changes {
		got = append(got, string(c.Action)+" "+c.Address)
	}
	want := []string{"create tool.z-new", "update workspace.a-granted", "update workspace.b-ungranted", "delete tool.a-old"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("order:\ngot  %q\nwant %q", got, want)
	}
}

// TestDesiredTools: tools are resources tool.NAME, sorted, after the
// images and before the workspaces that may be granted them.
func TestDesiredTools(t *testing.T) {
	cfg := &schema.Config{
		Images:     map[string]*schema.Image{"img": {Ref: "r:1"}},
		Tools:      map[string]*schema.Tool{"web": {Command: []string{"mcp-fetch"}, Egress: "full", Scope: "team", Owner: "core"}, "git": {URL: "http://127.0.0.1:1", Egress: "none", Scope: "team", Owner: "core"}},
		Workspaces: map[string]*schema.Workspace{"core": {Team: "core", Kind: "team", Tools: []string{"git", "web"}}},
		Skills:     map[string]*schema.Skill{"s": {}},
	}
	rs, err := Desired(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rs {
		got = append(got, r.Address())
	}
	want := []string{"host.config", "image.img", "tool.git", "tool.web", "workspace.core", "skill.s"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("desired:\ngot  %q\nwant %q", got, want)
	}
	if spec := string(rs[3].Spec); spec != `{"command":["mcp-fetch"],"egress":"full","scope":"team","owner":"core"}` {
		t.Errorf("tool.web's spec: %s", spec)
	}
	if spec := string(rs[4].Spec); !strings.Contains(spec, `"tools":["git","web"]`) {
		t.Errorf("workspace.core's spec lacks its tools: %s", spec)
	}
}

func TestLeafJSONMatchesPlanJSON(t *testing.T) {
	for _, v := range []any{"plain", `quote " and \ slash`, "tab\there", "<html> & ünïcode", "\u2028", json.Number("1.5"), true, false, nil, []any{"a", json.Number("2")}} {
		got, err := leafJSON(v)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := plan.JSON(v)
		if string(got) != string(want) {
			t.Errorf("leafJSON(%#v): got %s, want %s", v, got, want)
		}
	}
}
