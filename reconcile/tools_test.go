package reconcile_test

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/nlx-dev/nlx/plan"
	"github.com/nlx-dev/nlx/reconcile"
	"github.com/nlx-dev/nlx/schema"
)

// toolsCUE adds tools to the pi-team example: a team tool granted to the
// team's workspace, a personal one granted to its owner's, and a team
// tool with the host's network that nobody is granted.
const toolsCUE = `package pihost

tools: git: {
	command: ["mcp-git", "--stdio"]
	env: GIT_DIR:      "/srv/repo"
	secrets: GH_TOKEN:    "env:GH_TOKEN"
	scope: "team"
	owner: "platform"
}
tools: "bob-notes": {
	url:   "http://127.0.0.1:8931/mcp"
	scope: "personal"
	owner: "bob"
}
tools: web: {
	command: ["mcp-fetch"]
	egress: "full"
	scope:  "team"
	owner:  "platform"
}
workspaces: platform: tools: ["git"]
workspaces: bob: tools: ["bob-notes"]
`

// withTools is the example with toolsCUE, applied.
func withTools(t *testing.T) *fixture {
	t.Helper()
	f := newFixture(t)
	if err := os.WriteFile(filepath.Join(f.dir, "tools.cue"), []byte(toolsCUE), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := f.apply(f.plan(), reconcile.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	if again := f.plan(); !again.Empty() {
		t.Fatalf("plan after applying tools has %d changes", len(again.Changes))
	}
	return f
}

// TestToolRisks: granting a tool widens the workspace granted it; a tool
// that changes what it runs or where it connects, or whose command gets
// the host's network, widens every workspace granted it. Taking a tool
// away, deleting one, or creating a workspace with tools is no risk.
func TestToolRisks(t *testing.T) {
	widening := []string{string(plan.RiskPermissionWidening)}
	tests := []struct {
		name    string
		edit    func(f *fixture)
		gates   map[string][]string
		reasons []string // every risk's "address: reason", in plan order
		actions []string // "action address" of every change, in plan order; checked when set
	}{
		{
			name: "a tool granted, with the tool created in the same plan",
			edit: func(f *fixture) {
				f.edit("tools.cue", `workspaces: platform: tools: ["git"]`, `workspaces: platform: tools: ["git", "search", "web"]
tools: search: {url: "unix:///run/search.sock", endpoint: "/mcp", scope: "team", owner: "platform"}`)
			},
			gates:   map[string][]string{"workspace.platform": widening},
			reasons: []string{"workspace.platform: tools granted: search, web"},
			actions: []string{"create tool.search", "update workspace.platform"},
		},
		{
			name: "a personal tool granted to its owner's workspace",
			edit: func(f *fixture) {
				f.edit("tools.cue", "\ntools: web: {", "\ntools: \"alice-notes\": {url: \"http://[::1]:9000\", scope: \"personal\", owner: \"alice\"}\ntools: web: {")
				f.appendFile("tools.cue", "workspaces: alice: tools: [\"alice-notes\", \"git\"]\n")
			},
			gates:   map[string][]string{"workspace.alice": widening},
			reasons: []string{"workspace.alice: tools granted: alice-notes, git"},
		},
		{
			name: "no risk: a tool taken away",
			edit: func(f *fixture) {
				f.edit("tools.cue", `workspaces: platform: tools: ["git"]`, `workspaces: platform: tools: []`)
			},
			gates: map[string][]string{},
		},
		{
			name: "no risk: a tool deleted, after the workspace stops granting it",
			edit: func(f *fixture) {
				f.edit("tools.cue", `workspaces: bob: tools: ["bob-notes"]`, ``)
				f.edit("tools.cue", "tools: \"bob-notes\": {\n\turl:   \"http://127.0.0.1:8931/mcp\"\n\tscope: \"personal\"\n\towner: \"bob\"\n}\n", "")
			},
			gates:   map[string][]string{},
			actions: []string{"update workspace.bob", "delete tool.bob-notes"},
		},
		{
			name: "no risk: a workspace created with tools",
			edit: func(f *fixture) {
				f.appendFile("tools.cue", `workspaces: carol: {
	team:      "platform"
	kind:      "personal"
	owner:     "carol"
	policy:    "read_only"
	chatReset: "never"
	members: carol: "admin"
	limits: {memory: "1Gi", cpu: 1, pids: 64}
	tools: ["git", "web"]
	network: egress: "none"
}
`)
			},
			gates: map[string][]string{},
		},
		{
			name: "permission_widening: a tool's command and env change",
			edit: func(f *fixture) {
				f.edit("tools.cue", `command: ["mcp-git", "--stdio"]`, `command: ["mcp-git", "--stdio", "--write"]`)
				f.edit("tools.cue", `GIT_DIR:      "/srv/repo"`, `GIT_DIR:      "/srv/other"`)
			},
			gates:   map[string][]string{"tool.git": widening},
			reasons: []string{"tool.git: tool git changes what it runs: command, env"},
		},
		{
			name: "permission_widening: a tool reads another secret",
			edit: func(f *fixture) {
				f.edit("tools.cue", `"env:GH_TOKEN"`, `"file:/run/secrets/gh"`)
			},
			gates:   map[string][]string{"tool.git": widening},
			reasons: []string{"tool.git: tool git changes what it runs: secrets"},
		},
		{
			name: "permission_widening: a tool connects elsewhere",
			edit: func(f *fixture) {
				f.edit("tools.cue", `url:   "http://127.0.0.1:8931/mcp"`, `url:      "unix:///run/notes.sock"
	endpoint: "/mcp"`)
			},
			gates:   map[string][]string{"tool.bob-notes": widening},
			reasons: []string{"tool.bob-notes: tool bob-notes changes where it connects: url, endpoint"},
		},
		{
			name: "permission_widening: a url tool becomes a command",
			edit: func(f *fixture) {
				f.edit("tools.cue", `url:   "http://127.0.0.1:8931/mcp"`, `command: ["mcp-notes"]`)
			},
			gates:   map[string][]string{"tool.bob-notes": widening},
			reasons: []string{"tool.bob-notes: tool bob-notes changes what it runs: command; tool bob-notes changes where it connects: url"},
		},
		{
			name: "permission_widening: a tool's egress grows",
			edit: func(f *fixture) {
				f.edit("tools.cue", `secrets: GH_TOKEN:    "env:GH_TOKEN"`, `secrets: GH_TOKEN:    "env:GH_TOKEN"
	egress: "full"`)
			},
			gates:   map[string][]string{"tool.git": widening},
			reasons: []string{"tool.git: tool git's egress grows from none to full"},
		},
		{
			name: "no risk: a tool's egress narrows",
			edit: func(f *fixture) {
				f.edit("tools.cue", `egress: "full"`, `egress: "none"`)
			},
			gates: map[string][]string{},
		},
		{
			name: "no risk: a tool nobody is granted changes owner (a replace)",
			edit: func(f *fixture) {
				f.edit("tools.cue", "scope:  \"team\"\n\towner:  \"platform\"", "scope:  \"personal\"\n\towner:  \"alice\"")
			},
			gates:   map[string][]string{},
			actions: []string{"replace tool.web"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := withTools(t)
			tt.edit(f)
			p := f.plan()
			if got := gates(p); !reflect.DeepEqual(got, tt.gates) {
				t.Errorf("gates:\ngot  %v\nwant %v", got, tt.gates)
			}
			var reasons, actions []string
			for _, c := range p.Changes {
				actions = append(actions, string(c.Action)+" "+c.Address)
				for _, r := range c.Risks {
					reasons = append(reasons, c.Address+": "+r.Reason)
				}
			}
			if !reflect.DeepEqual(reasons, tt.reasons) {
				t.Errorf("reasons:\ngot  %q\nwant %q", reasons, tt.reasons)
			}
			if tt.actions != nil && !reflect.DeepEqual(actions, tt.actions) {
				t.Errorf("changes:\ngot  %q\nwant %q", actions, tt.actions)
			}
		})
	}
}

// TestToolChangesAreHostWide: a tool serves every workspace granted it,
// so its changes are the host's: operators approve them, not a
// workspace's admin.
func TestToolChangesAreHostWide(t *testing.T) {
	c := &plan.Change{Address: "tool.git", Kind: schema.KindTool, Name: "git", Action: plan.Update,
		Before: []byte(`{"command":["mcp-git"],"egress":"none","scope":"team","owner":"platform"}`),
		After:  []byte(`{"command":["mcp-git","--write"],"egress":"none","scope":"team","owner":"platform"}`)}
	if s := reconcile.ScopeOf(c); !s.Host || len(s.Workspaces) != 0 {
		t.Errorf("scope of %s: %+v, want the host", c.Address, s)
	}
	a := &reconcile.Authority{Operators: map[string]bool{"alice": true}, Admins: map[string]map[string]bool{"platform": {"carol": true}}}
	if ok, _ := a.MayApprove("alice", c); !ok {
		t.Error("an operator may not approve a tool change")
	}
	if ok, why := a.MayApprove("carol", c); ok || why == "" {
		t.Errorf("a workspace admin may approve a tool change (%q)", why)
	}
}
