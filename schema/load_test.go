package schema

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/nlx-dev/nlx/internal/reason"
	"github.com/nlx-dev/nlx/internal/testgen"
)

// copyTree copies the directory src into a new temporary directory.
func copyTree(t testing.TB, src string) string {
	t.Helper()
	dst := t.TempDir()
	if err := testgen.CopyTree(src, dst); err != nil {
		t.Fatal(err)
	}
	return dst
}

// loadBoth loads dir on the fast path and through CUE unification and
// checks that they agree.
func loadBoth(t *testing.T, dir string) (*Config, error) {
	t.Helper()
	ctx := context.Background()
	fast, ferr := Load(ctx, dir)
	full, cerr := LoadWith(ctx, dir, Options{ForceCUE: true})
	if (ferr == nil) != (cerr == nil) {
		t.Fatalf("fast path and CUE disagree:\nfast: %v\ncue:  %v", ferr, cerr)
	}
	if ferr != nil {
		if ferr.Error() != cerr.Error() {
			t.Errorf("fast path and CUE report differently:\nfast: %v\ncue:  %v", ferr, cerr)
		}
		return nil, ferr
	}
	if full.FastPath {
		t.Fatal("ForceCUE took the fast path")
	}
	fastCopy, fullCopy := *fast, *full
	fastCopy.FastPath, fullCopy.FastPath = false, false
	if !reflect.DeepEqual(fastCopy, fullCopy) {
		t.Fatalf("fast path and CUE decode differently:\nfast: %+v\ncue:  %+v", fastCopy, fullCopy)
	}
	return fast, nil
}

func TestExamplesLoad(t *testing.T) {
	dirs, err := filepath.Glob("../examples/*")
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no examples: %v", err)
	}
	for _, dir := range append(dirs, "testdata/base") {
		name := filepath.Base(dir)
		if fi, err := os.Stat(filepath.Join(dir, "config")); err == nil && fi.IsDir() {
			dir = filepath.Join(dir, "config") // a config repository: examples/gitops
		}
		t.Run(name, func(t *testing.T) {
			cfg, err := loadBoth(t, dir)
			if err != nil {
				t.Fatalf("example does not load:\n%v", err)
			}
			if !cfg.FastPath {
				t.Errorf("example did not take the fast path")
			}
			if len(cfg.Inputs.Files) == 0 || !strings.HasPrefix(cfg.Inputs.Hash, "sha256:") {
				t.Errorf("inputs not recorded: %+v", cfg.Inputs)
			}
		})
	}
}

func TestPiTeamExample(t *testing.T) {
	cfg, err := Load(context.Background(), "../examples/pi-team")
	if err != nil {
		t.Fatal(err)
	}
	count := func(kind string, got, want int) {
		if got != want {
			t.Errorf("%s: got %d, want %d", kind, got, want)
		}
	}
	count("providers", len(cfg.Providers), 3)
	count("images", len(cfg.Images), 1)
	count("workspaces", len(cfg.Workspaces), 3)
	count("connections", len(cfg.Connections), 3)
	count("skills", len(cfg.Skills), 2)
	count("jobs", len(cfg.Jobs), 4)
	if got := cfg.Providers["opencode"].Status; got != "disabled" {
		t.Errorf("opencode status: got %q, want the default disabled", got)
	}
	if got := cfg.Images["pi-runtime"].Platforms; !reflect.DeepEqual(got, []string{"linux/arm64", "linux/amd64"}) {
		t.Errorf("platforms: got %v", got)
	}
	billing := map[string]bool{}
	scope := map[string]bool{}
	for _, c := range cfg.Connections {
		billing[c.Billing], scope[c.Scope] = true, true
	}
	if !billing["api"] || !billing["subscription"] || !scope["team"] || !scope["personal"] {
		t.Errorf("connections should cover both billings and scopes: %v %v", billing, scope)
	}
	for name, s := range cfg.Skills {
		if s.Description == "" || !strings.HasPrefix(s.Digest, "sha256:") {
			t.Errorf("skill %s: description %q digest %q", name, s.Description, s.Digest)
		}
	}
	if j := cfg.Jobs["nightly-digest"]; !j.Enabled || j.Concurrency != "skip" || j.CatchUp != "skip" || j.BackgroundAuthority {
		t.Errorf("job defaults not applied: %+v", j)
	}
}

// edit is one change to a copy of testdata/base.
type edit struct {
	file     string // relative to the config directory
	old, new string // replace old (which must occur) by new; old "" appends new
}

func TestBadConfigs(t *testing.T) {
	tests := []struct {
		name  string
		edits []edit
		code  reason.Code
		msg   string // substring of the message
		at    string // "file:marker": the error is where marker starts in file
		path  string // the error's path, if checked
		alone bool   // it is the only error
	}{
		{
			name:  "wrong enum",
			edits: []edit{{"connections.cue", `billing:        "api"`, `billing:        "monthly"`}},
			code:  reason.SchemaViolation, msg: `"monthly"`, at: `connections.cue:"monthly"`,
			path: "connections.ana-codex.billing",
		},
		{
			name:  "wrong enum holding the word and",
			edits: []edit{{"connections.cue", `billing:        "api"`, `billing:        "monthly and yearly"`}},
			code:  reason.SchemaViolation, msg: `"monthly and yearly" is not allowed; want one of "api", "subscription"`, at: `connections.cue:"monthly and yearly"`,
			path: "connections.ana-codex.billing",
		},
		{
			name:  "wrong enum of another type",
			edits: []edit{{"connections.cue", `billing:        "api"`, `billing:        3`}},
			code:  reason.SchemaViolation, msg: `3 is not allowed; want one of "api", "subscription"`, at: `connections.cue:3`,
			path: "connections.ana-codex.billing",
		},
		{
			name:  "missing billing",
			edits: []edit{{"connections.cue", "\tbilling:        \"subscription\"\n", ""}},
			code:  reason.SchemaViolation, msg: "required but not present", at: `connections.cue:{`,
			path: "connections.core-codex.billing",
		},
		{
			name:  "missing chat reset policy",
			edits: []edit{{"workspaces.cue", "\tchatReset: \"manual\"\n", ""}},
			code:  reason.SchemaViolation, msg: "required but not present", at: `workspaces.cue:{`,
			path: "workspaces.core.chatReset",
		},
		{
			name:  "credential home climbing out with ..",
			edits: []edit{{"connections.cue", `credentialHome: "ana/codex"`, `credentialHome: "ana/../core/codex"`}},
			code:  reason.SchemaViolation, msg: `invalid value "ana/../core/codex"`, at: `connections.cue:"ana/../core/codex"`,
			path: "connections.ana-codex.credentialHome",
		},
		{
			name:  "credential home that is the root",
			edits: []edit{{"connections.cue", `credentialHome: "ana/codex"`, `credentialHome: "."`}},
			code:  reason.SchemaViolation, msg: `invalid value "."`, at: `connections.cue:"."`,
			path: "connections.ana-codex.credentialHome",
		},
		{
			name:  "missing job connection",
			edits: []edit{{"jobs.cue", "\tconnection: \"ana-codex\"\n", ""}},
			code:  reason.SchemaViolation, msg: "required but not present", at: "jobs.cue:{\n\tworkspace:  \"ana\"",
			path: "jobs.ana-hourly.connection",
		},
		{
			name:  "bad name",
			edits: []edit{{"jobs.cue", `jobs: digest: {`, `jobs: Digest_Job: {`}},
			code:  reason.InvalidName, msg: `invalid job name "Digest_Job"`, at: `jobs.cue:Digest_Job`,
		},
		{
			name: "unknown field",
			edits: []edit{{"workspaces.cue", `	team:      "core"`, `	team:      "core"
	colour:    "red"`}},
			code: reason.SchemaViolation, msg: "field not allowed", at: `workspaces.cue:"red"`, path: "workspaces.core.colour",
		},
		{
			name:  "a layer with two sources",
			edits: []edit{{"jobs.cue", "", "images: i: {platforms: [\"linux/amd64\"], base: \"scratch\", layers: [{nlx: {}, go: \"example.com/x\", dest: \"/x\"}]}\n"}},
			code:  reason.SchemaViolation, msg: "a layer has exactly one source: files, go, skills or nlx; this one has go and nlx", at: `jobs.cue:{nlx`,
			path: "images.i.layers.0", alone: true,
		},
		{
			name:  "a layer with no source",
			edits: []edit{{"jobs.cue", "", "images: i: {platforms: [\"linux/amd64\"], base: \"scratch\", layers: [{dest: \"/x\"}]}\n"}},
			code:  reason.SchemaViolation, msg: "a layer has exactly one source: files, go, skills or nlx; this one has none", at: `jobs.cue:{dest`,
			path: "images.i.layers.0", alone: true,
		},
		{
			name:  "a layer with a field it does not have",
			edits: []edit{{"jobs.cue", "", "images: i: {platforms: [\"linux/amd64\"], base: \"scratch\", layers: [{files: \"data\", dest: \"/x\", mode: \"0755\"}]}\n"}},
			code:  reason.SchemaViolation, msg: "field not allowed", at: `jobs.cue:"0755"`,
			path: "images.i.layers.0.mode",
		},
		{
			name:  "an nlx layer with a setting it does not have",
			edits: []edit{{"jobs.cue", "", "images: i: {platforms: [\"linux/amd64\"], base: \"scratch\", layers: [{nlx: {version: \"v1\"}, dest: \"/x\"}]}\n"}},
			code:  reason.SchemaViolation, msg: "field not allowed", at: `jobs.cue:"v1"`,
		},
		{
			name:  "unknown top-level field",
			edits: []edit{{"jobs.cue", "", "widgets: x: 1\n"}},
			code:  reason.SchemaViolation, msg: "field not allowed", at: `jobs.cue:x: 1`,
		},
		{
			name:  "dangling connection",
			edits: []edit{{"jobs.cue", `connection: "core-codex"`, `connection: "nope"`}},
			code:  reason.DanglingReference, msg: `no connection "nope"`, at: `jobs.cue:"nope"`,
			path: "jobs.digest.connection",
		},
		{
			name:  "dangling workspace",
			edits: []edit{{"connections.cue", `workspace:      "core"`, `workspace:      "gone"`}},
			code:  reason.DanglingReference, msg: `no workspace "gone"`, at: `connections.cue:"gone"`,
		},
		{
			name: "dangling provider",
			edits: []edit{{"connections.cue", `provider:       "codex"
	billing:        "subscription"`, `provider:       "claude"
	billing:        "subscription"`}},
			code: reason.DanglingReference, msg: `no provider "claude"`, at: `connections.cue:"claude"`,
		},
		{
			name: "personal connection on team job",
			edits: []edit{{"connections.cue", "", `connections: "ben-codex": {
	owner:          "ben"
	scope:          "personal"
	workspace:      "core"
	provider:       "codex"
	billing:        "subscription"
	credentialHome: "ben/codex"
	generation:     1
}
`}, {"jobs.cue", `connection: "core-codex"`, `connection: "ben-codex"`}},
			code: reason.PersonalOnTeam, msg: `personal connection "ben-codex"`, at: `jobs.cue:"ben-codex"`,
		},
		{
			name:  "connection of another workspace",
			edits: []edit{{"jobs.cue", `connection: "core-codex"`, `connection: "ana-codex"`}},
			code:  reason.ConnectionWorkspace, msg: `belongs to workspace "ana"`, at: `jobs.cue:"ana-codex"`,
		},
		{
			name:  "raw secret value",
			edits: []edit{{"connections.cue", `secret:         "env:OPENAI_API_KEY"`, `secret:         "sk-live-0123456789abcdef"`}},
			code:  reason.RawSecretValue, msg: "never a value", at: `connections.cue:"sk-live`,
		},
		{
			name: "credential written into a provider's environment",
			edits: []edit{{"providers.cue", `command: ["codex", "app-server"]`, `command: ["codex", "app-server"]
	env: OPENAI_API_KEY: "sk-live-0123456789abcdef"`}},
			code: reason.RawSecretValue, msg: "OPENAI_API_KEY looks like a credential", at: `providers.cue:"sk-live`,
		},
		{
			name: "job pins another provider than its connection's",
			edits: []edit{{"jobs.cue", `prompt: "Check my queue."`, `prompt: "Check my queue."
	provider:   "claude"`}},
			code: reason.JobPinMismatch, msg: `pins provider "claude"`, at: `jobs.cue:"claude"`,
		},
		{
			name: "fallback connection of another workspace",
			edits: []edit{{"jobs.cue", `prompt: "Check my queue."`, `prompt: "Check my queue."
	fallbackConnection: "core-codex"`}},
			code: reason.ConnectionWorkspace, msg: `belongs to workspace "core"`, at: "jobs.cue:\"core-codex\"\n}",
		},
		{
			name:  "team skill of another team",
			edits: []edit{{"skills.cue", `owner:   "core"`, `owner:   "other"`}},
			code:  reason.SkillScopeMismatch, msg: `belongs to team "other"`, at: `jobs.cue:"team-notes"`,
		},
		{
			name:  "personal skill in a team workspace",
			edits: []edit{{"workspaces.cue", `skills: ["team-notes"]`, `skills: ["team-notes", "my-notes"]`}},
			code:  reason.SkillScopeMismatch, msg: "cannot be used in team workspace", at: `workspaces.cue:"my-notes"`,
		},
		{
			name:  "personal workspace without owner",
			edits: []edit{{"workspaces.cue", "\towner:     \"ana\"\n", ""}},
			code:  reason.PersonalOwner, msg: "needs an owner", at: `workspaces.cue:"personal"`,
		},
		{
			name: "job policy wider than workspace",
			edits: []edit{{"jobs.cue", `prompt: "Check my queue."`, `prompt: "Check my queue."
	policy:     "danger_full_access"`}},
			code: reason.JobPolicyWider, msg: "wider than workspace", at: `jobs.cue:"danger_full_access"`,
		},
		{
			name:  "bad cron line",
			edits: []edit{{"jobs.cue", `"0 7 * * 1-5"`, `"0 7 * *"`}},
			code:  reason.InvalidValue, msg: `cron "0 7 * *"`, at: `jobs.cue:"0 7 * *"`,
		},
		{
			// robfig's parser panics on a zone prefix without a space.
			name:  "zone prefix in the cron line",
			edits: []edit{{"jobs.cue", `"0 7 * * 1-5"`, `"CRON_TZ=UTC"`}},
			code:  reason.InvalidValue, msg: "give the zone in timezone", at: `jobs.cue:"CRON_TZ=UTC"`,
		},
		{
			name:  "@every in the cron line",
			edits: []edit{{"jobs.cue", `"0 7 * * 1-5"`, `"@every 1h"`}},
			code:  reason.InvalidValue, msg: "an interval is written as every", at: `jobs.cue:"@every 1h"`,
		},
		{
			name:  "unknown time zone",
			edits: []edit{{"jobs.cue", `"Europe/Berlin"`, `"Mars/Olympus"`}},
			code:  reason.InvalidValue, msg: "unknown time zone", at: `jobs.cue:"Mars/Olympus"`,
		},
		{
			name:  "two schedules",
			edits: []edit{{"jobs.cue", `schedule: every: "1h"`, `schedule: {every: "1h", at: "2026-12-01T09:00:00Z"}`}},
			code:  reason.SchemaViolation, msg: "a schedule is exactly one of cron, every or at; this one has every and at", at: `jobs.cue:{every`,
			path: "jobs.ana-hourly.schedule", alone: true,
		},
		{
			name:  "no schedule kind",
			edits: []edit{{"jobs.cue", `schedule: every: "1h"`, `schedule: {}`}},
			code:  reason.SchemaViolation, msg: "a schedule is exactly one of cron, every or at; this one has none", at: `jobs.cue:{}`,
			path: "jobs.ana-hourly.schedule", alone: true,
		},
		{
			name:  "a schedule with a field it does not have",
			edits: []edit{{"jobs.cue", `schedule: every: "1h"`, `schedule: {every: "1h", jitter: "5m"}`}},
			code:  reason.SchemaViolation, msg: "field not allowed", at: `jobs.cue:"5m"`,
			path: "jobs.ana-hourly.schedule.jitter",
		},
		{
			name:  "memory that overflows 63 bits",
			edits: []edit{{"workspaces.cue", `memory: "512Mi"`, `memory: "17179869185Gi"`}},
			code:  reason.InvalidValue, msg: `memory limit: "17179869185Gi" is too large`, at: `workspaces.cue:"17179869185Gi"`,
			path: "workspaces.core.limits.memory",
		},
		{
			name:  "memory one byte count past the largest",
			edits: []edit{{"workspaces.cue", `memory: "512Mi"`, `memory: "9223372036854775808"`}},
			code:  reason.InvalidValue, msg: "too large", at: `workspaces.cue:"9223372036854775808"`,
			path: "workspaces.core.limits.memory",
		},
		{
			name:  "memory of 0 bytes",
			edits: []edit{{"workspaces.cue", `memory: "512Mi"`, `memory: "0Mi"`}},
			code:  reason.InvalidValue, msg: "is no limit", at: `workspaces.cue:"0Mi"`,
			path: "workspaces.core.limits.memory",
		},
		{
			name:  "cpu too small for a float64",
			edits: []edit{{"workspaces.cue", `cpu: 1,`, `cpu: 1e-400,`}},
			code:  reason.InvalidValue, msg: "rounds to 0 cores", at: `workspaces.cue:1e-400`,
			path: "workspaces.core.limits.cpu",
		},
		{
			name:  "bad version constraint",
			edits: []edit{{"providers.cue", `">= 0.161"`, `"newest please"`}},
			code:  reason.InvalidValue, msg: "version constraint", at: `providers.cue:"newest please"`,
		},
		{
			name:  "syntax error",
			edits: []edit{{"jobs.cue", `prompt: "Summarise yesterday."`, `prompt: "Summarise yesterday.`}},
			code:  reason.CUESyntax, at: `jobs.cue:"Summarise`,
		},
		{
			name:  "package mismatch",
			edits: []edit{{"jobs.cue", "package base", "package other"}},
			code:  reason.CUESyntax, msg: "package other differs", at: `jobs.cue:other`,
		},
		{
			name:  "skill name does not match its directory",
			edits: []edit{{"skills/team-notes/SKILL.md", "name: team-notes", "name: notes"}},
			code:  reason.SkillPackage, msg: "does not match its directory", at: `skills.cue:"skills/team-notes"`,
		},
		{
			name:  "skill without frontmatter",
			edits: []edit{{"skills/my-notes/SKILL.md", "---\nname: my-notes\ndescription: Personal notes.\n---\n", ""}},
			code:  reason.SkillPackage, msg: "frontmatter", at: `skills.cue:"skills/my-notes"`,
		},
		{
			name:  "skill path outside the config",
			edits: []edit{{"skills.cue", `"skills/my-notes"`, `"../my-notes"`}},
			code:  reason.SkillPackage, msg: "leaves the config directory", at: `skills.cue:"../my-notes"`,
		},
		{
			name:  "non-concrete value",
			edits: []edit{{"workspaces.cue", `policy:    "read_only"`, `policy:    string`}},
			code:  reason.SchemaViolation, msg: "incomplete", at: `workspaces.cue:string`,
		},
		// tools and a workspace's tools
		{
			name:  "dangling tool",
			edits: []edit{{"workspaces.cue", `tools: ["team-search", "core-files"]`, `tools: ["team-search", "nope"]`}},
			code:  reason.DanglingReference, msg: `no tool "nope"`, at: `workspaces.cue:"nope"`,
			path: "workspaces.core.tools[1]",
		},
		{
			name:  "a tool granted twice",
			edits: []edit{{"workspaces.cue", `tools: ["team-search", "core-files"]`, `tools: ["core-files", "team-search", "team-search"]`}},
			code:  reason.InvalidValue, msg: `tool "team-search" is granted twice`, at: `workspaces.cue:"team-search"]`,
			path: "workspaces.core.tools[2]",
		},
		{
			name:  "team tool of another team",
			edits: []edit{{"tools.cue", "scope:  \"team\"\n\towner:  \"core\"", "scope:  \"team\"\n\towner:  \"other\""}},
			code:  reason.ToolScopeMismatch, msg: `team tool "team-search" belongs to team "other", not to this workspace's team "core"`, at: `workspaces.cue:"team-search"`,
			path: "workspaces.core.tools[0]",
		},
		{
			name:  "personal tool granted to a team workspace",
			edits: []edit{{"workspaces.cue", `tools: ["team-search", "core-files"]`, `tools: ["team-search", "ana-calendar"]`}},
			code:  reason.ToolScopeMismatch, msg: `personal tool "ana-calendar" cannot be granted to team workspace`, at: `workspaces.cue:"ana-calendar"`,
			path: "workspaces.core.tools[1]",
		},
		{
			name:  "personal tool of another actor",
			edits: []edit{{"tools.cue", "scope: \"personal\"\n\towner: \"ana\"", "scope: \"personal\"\n\towner: \"ben\""}},
			code:  reason.ToolScopeMismatch, msg: `personal tool "ana-calendar" belongs to "ben", not to this workspace's owner "ana"`, at: `workspaces.cue:"ana-calendar"`,
			path: "workspaces.ana.tools[0]",
		},
		{
			name:  "a command without a program",
			edits: []edit{{"tools.cue", `command: ["mcp-search", "--stdio"]`, `command: ["", "--stdio"]`}},
			code:  reason.InvalidValue, msg: "first element is the program to run", at: `tools.cue:"", "--stdio"`,
			path: "tools.team-search.command[0]",
		},
		{
			name:  "a credential written into a tool's environment",
			edits: []edit{{"tools.cue", `env: SEARCH_INDEX:       "/srv/index"`, `env: SEARCH_TOKEN:       "sk-live-0123456789abcdef"`}},
			code:  reason.RawSecretValue, msg: "SEARCH_TOKEN looks like a credential; give it in secrets", at: `tools.cue:"sk-live`,
			path: "tools.team-search.env.SEARCH_TOKEN",
		},
		{
			name:  "a secret value in a tool's secrets",
			edits: []edit{{"tools.cue", `"env:SEARCH_API_KEY"`, `"sk-live-0123456789abcdef"`}},
			code:  reason.RawSecretValue, msg: "never a value; the value is not shown", at: `tools.cue:"sk-live`,
			path: "tools.team-search.secrets.SEARCH_API_KEY",
		},
		{
			name:  "a tool's secrets that are one value",
			edits: []edit{{"tools.cue", `secrets: SEARCH_API_KEY: "env:SEARCH_API_KEY"`, `secrets: "sk-live-0123456789abcdef"`}},
			code:  reason.RawSecretValue, msg: "the value is not shown", at: `tools.cue:"sk-live`,
			path: "tools.team-search.secrets",
		},
		{
			name:  "a variable both in env and in secrets",
			edits: []edit{{"tools.cue", `env: SEARCH_INDEX:       "/srv/index"`, `env: SEARCH_API_KEY:     "env:OTHER"`}},
			code:  reason.InvalidValue, msg: "SEARCH_API_KEY is set in env too", at: `tools.cue:"env:SEARCH_API_KEY"`,
			path: "tools.team-search.secrets.SEARCH_API_KEY",
		},
		{
			name:  "a secret name that is no variable name",
			edits: []edit{{"tools.cue", `secrets: SEARCH_API_KEY:`, `secrets: "search-key":`}},
			code:  reason.SchemaViolation, msg: "field not allowed", at: `tools.cue:"env:SEARCH_API_KEY"`,
			path: "tools.team-search.secrets.search-key",
		},
		{
			name: "a tool with a command and a url",
			edits: []edit{{"tools.cue", `command: ["mcp-search", "--stdio"]`, `command: ["mcp-search", "--stdio"]
	url: "http://127.0.0.1:9000/mcp"`}},
			code: reason.SchemaViolation, msg: "a tool is a command or a url, not both", at: "tools.cue:{\n\tcommand",
			path: "tools.team-search",
		},
		{
			name:  "a tool with neither a command nor a url",
			edits: []edit{{"tools.cue", `url:   "http://127.0.0.1:8931/mcp"`, ``}},
			code:  reason.SchemaViolation, msg: "required but not present", at: "tools.cue:{\n\t\n",
			path: "tools.ana-calendar.command",
		},
		{
			name:  "a url over https",
			edits: []edit{{"tools.cue", `"http://127.0.0.1:8931/mcp"`, `"https://127.0.0.1:8931/mcp"`}},
			code:  reason.SchemaViolation, msg: `invalid value "https://127.0.0.1:8931/mcp"`, at: `tools.cue:"https`,
			path: "tools.ana-calendar.url",
		},
		{
			name:  "a url off the loopback",
			edits: []edit{{"tools.cue", `"http://127.0.0.1:8931/mcp"`, `"http://10.0.0.7:8931/mcp"`}},
			code:  reason.SchemaViolation, msg: `invalid value "http://10.0.0.7:8931/mcp"`, at: `tools.cue:"http://10`,
			path: "tools.ana-calendar.url",
		},
		{
			name:  "a relative unix socket",
			edits: []edit{{"tools.cue", `"unix:///run/nlx-tools/files.sock"`, `"unix://files.sock"`}},
			code:  reason.SchemaViolation, msg: `invalid value "unix://files.sock"`, at: `tools.cue:"unix:`,
			path: "tools.core-files.url",
		},
		{
			name: "env with a url",
			edits: []edit{{"tools.cue", `url:   "http://127.0.0.1:8931/mcp"`, `url:   "http://127.0.0.1:8931/mcp"
	env: {LANG: "C"}`}},
			code: reason.SchemaViolation, msg: "env goes with command only", at: `tools.cue:{LANG`,
			path: "tools.ana-calendar.env",
		},
		{
			name: "secrets with a url",
			edits: []edit{{"tools.cue", `url:   "http://127.0.0.1:8931/mcp"`, `url:   "http://127.0.0.1:8931/mcp"
	secrets: {CAL_TOKEN: "env:CAL_TOKEN"}`}},
			code: reason.SchemaViolation, msg: "secrets go with command only", at: `tools.cue:{CAL_TOKEN`,
			path: "tools.ana-calendar.secrets",
		},
		{
			name: "egress full with a url",
			edits: []edit{{"tools.cue", `url:   "http://127.0.0.1:8931/mcp"`, `url:   "http://127.0.0.1:8931/mcp"
	egress: "full"`}},
			code: reason.SchemaViolation, msg: `egress "full" goes with command only`, at: `tools.cue:"full"
	scope: "personal"`,
			path: "tools.ana-calendar.egress",
		},
		{
			name: "an endpoint with an http url",
			edits: []edit{{"tools.cue", `url:   "http://127.0.0.1:8931/mcp"`, `url:   "http://127.0.0.1:8931/mcp"
	endpoint: "/mcp"`}},
			code: reason.SchemaViolation, msg: "endpoint goes with a unix: url only", at: "tools.cue:\"/mcp\"\n\tscope: \"personal\"",
			path: "tools.ana-calendar.endpoint",
		},
		{
			name: "an endpoint with a command",
			edits: []edit{{"tools.cue", `command: ["mcp-search", "--stdio"]`, `command: ["mcp-search", "--stdio"]
	endpoint: "/mcp"`}},
			code: reason.SchemaViolation, msg: "endpoint goes with a unix: url only", at: `tools.cue:"/mcp"`,
			path: "tools.team-search.endpoint",
		},
		{
			name:  "an egress nlx does not know",
			edits: []edit{{"tools.cue", `egress: "full"`, `egress: "inference"`}},
			code:  reason.SchemaViolation, msg: `"inference"`, at: `tools.cue:"inference"`,
			path: "tools.team-search.egress",
		},
		{
			name: "an unknown field in a tool",
			edits: []edit{{"tools.cue", `owner: "ana"`, `owner: "ana"
	colour: "red"`}},
			code: reason.SchemaViolation, msg: "field not allowed", at: `tools.cue:"red"`,
			path: "tools.ana-calendar.colour",
		},
		{
			name:  "a tool without a scope",
			edits: []edit{{"tools.cue", "\tscope: \"personal\"\n", ""}},
			code:  reason.SchemaViolation, msg: "required but not present", at: "tools.cue:{\n\turl:   \"http",
			path: "tools.ana-calendar.scope",
		},
		{
			name:  "a bad tool name",
			edits: []edit{{"tools.cue", `tools: "core-files": {`, `tools: Core_Files: {`}},
			code:  reason.InvalidName, msg: `invalid tool name "Core_Files"`, at: `tools.cue:Core_Files`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := copyTree(t, "testdata/base")
			applyEdits(t, dir, tt.edits)
			_, err := loadBoth(t, dir)
			var errs Errors
			if !errors.As(err, &errs) {
				t.Fatalf("got %v, want Errors", err)
			}
			file, marker, _ := strings.Cut(tt.at, ":")
			want := markerPos(t, filepath.Join(dir, file), marker)
			for _, e := range errs {
				if e.Code != tt.code || !strings.Contains(e.Msg, tt.msg) {
					continue
				}
				got := fmt.Sprintf("%s:%d:%d", e.Pos.Filename, e.Pos.Line, e.Pos.Column)
				if got != want {
					t.Errorf("position: got %s, want %s (%v)", got, want, e)
				}
				if tt.path != "" && e.Path != tt.path {
					t.Errorf("path: got %s, want %s", e.Path, tt.path)
				}
				if tt.alone && len(errs) != 1 {
					t.Errorf("got %d errors, want this one alone:\n%v", len(errs), err)
				}
				if tt.code == reason.RawSecretValue && strings.Contains(err.Error(), "sk-live") {
					t.Errorf("the error shows the secret value: %v", err)
				}
				return
			}
			t.Errorf("got\n%v\nwant an error with code %s and message containing %q", err, tt.code, tt.msg)
		})
	}
}

func applyEdits(t *testing.T, dir string, edits []edit) {
	t.Helper()
	for _, e := range edits {
		path := filepath.Join(dir, e.file)
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		s := string(data)
		if e.old == "" {
			s += e.new
		} else {
			if !strings.Contains(s, e.old) {
				t.Fatalf("%s does not contain %q", e.file, e.old)
			}
			s = strings.Replace(s, e.old, e.new, 1)
		}
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// markerPos returns "file:line:col" of the first occurrence of marker.
func markerPos(t *testing.T, file, marker string) string {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	i := strings.Index(string(data), marker)
	if i < 0 {
		t.Fatalf("marker %q not in %s", marker, file)
	}
	line := 1 + strings.Count(string(data[:i]), "\n")
	col := i - strings.LastIndex(string(data[:i]), "\n")
	return fmt.Sprintf("%s:%d:%d", file, line, col)
}

func TestSeveralErrorsAllReported(t *testing.T) {
	dir := copyTree(t, "testdata/base")
	applyEdits(t, dir, []edit{
		{"connections.cue", `billing:        "api"`, `billing:        "monthly"`},
		{"jobs.cue", `connection: "core-codex"`, `connection: "nope"`},
		{"workspaces.cue", `policy:    "read_only"`, `policy:    "everything"`},
	})
	_, err := Load(context.Background(), dir)
	var errs Errors
	if !errors.As(err, &errs) {
		t.Fatalf("got %v, want Errors", err)
	}
	// CUE stops at structural errors before cross-references are checked,
	// so the two schema errors must both be there.
	text := err.Error()
	for _, want := range []string{`"monthly"`, `"everything"`} {
		if !strings.Contains(text, want) {
			t.Errorf("error list lacks %s:\n%s", want, text)
		}
	}
	dir = copyTree(t, "testdata/base")
	applyEdits(t, dir, []edit{
		{"jobs.cue", `connection: "core-codex"`, `connection: "nope"`},
		{"connections.cue", `workspace:      "core"`, `workspace:      "gone"`},
		{"jobs.cue", `"Europe/Berlin"`, `"Mars/Olympus"`},
	})
	_, err = Load(context.Background(), dir)
	if !errors.As(err, &errs) || len(errs) < 3 {
		t.Fatalf("got %d errors, want at least 3:\n%v", len(errs), err)
	}
}

// TestFastPathAgreesWithCUE covers configs the fast path must take, and
// configs it must leave to CUE, which then accepts them.
func TestFastPathAgreesWithCUE(t *testing.T) {
	tests := []struct {
		name  string
		edits []edit
		fast  bool
	}{
		{"base", nil, true},
		{"every optional field", []edit{{"jobs.cue", "", `jobs: full: {
	workspace:           "core"
	connection:          "core-codex"
	schedule: at:        "2026-12-01T09:00:00Z"
	conversation:        "core/full"
	prompt:              "Everything set."
	skill:               "team-notes"
	policy:              "read_only"
	enabled:             false
	backgroundAuthority: true
	concurrency:         "queue"
	catchUp:             "latest"
}
images: img: {
	platforms: ["linux/amd64"]
	base:      "scratch"
	layers: [{files: "skills", dest: "/srv"}, {go: "example.com/cmd/x", dest: "/bin/x"}, {skills: ["team-notes"], dest: "/opt/skills"}, {nlx: {}, dest: "/bin/nlx"}]
	entrypoint: ["/bin/x"]
	cmd: ["run"]
	env: {A: "1"}
	workdir: "/srv"
	user:    "1000"
	labels: {"a.b": "c"}
	output: "out"
}
preservations: legacy: {
	source: {kind: "openclaw", path: "/var/lib/openclaw", lockDir: "/tmp/openclaw-1000"}
	workspace:  "core"
	connection: "core-codex"
	agents: ops: {workspace: "core", connection: "core-codex"}
	timezone: "Europe/Berlin"
	export:   "/var/backups/openclaw"
	expected: {counts: {jobs: 4}, hashes: {jobs: "sha256:0000000000000000000000000000000000000000000000000000000000000000"}}
	chatReset: core: "preserve"
}
`}}, true},
		{"user default marker", []edit{{"connections.cue", `billing:        "api"`, `billing:        *"api" | "subscription"`}}, false},
		{"value completed by a schema default", []edit{{"jobs.cue", `prompt: "Check my queue."`, `prompt: "Check my queue."
	enabled:    bool`}}, false},
		{"hidden helper fields and definitions", []edit{{"jobs.cue", "", `_team: "core"
#Daily: {workspace: _team, connection: "core-codex", schedule: {cron: "0 9 * * *", timezone: "UTC"}, ...}
jobs: daily: #Daily & {prompt: "Daily."}
`}}, true},
		{"integer written as float", []edit{{"workspaces.cue", "pids: 128", "pids: 128.0"}}, false},
		{"tools of every form", []edit{{"jobs.cue", "", `tools: "ben-git": {
	command: ["mcp-git"]
	env: {}
	secrets: {}
	egress: "none"
	scope:  "personal"
	owner:  "ben"
}
tools: loopback: {url: "http://[::1]:7000", egress: "none", scope: "team", owner: "core"}
tools: "by-name": {url: "http://localhost/mcp", scope: "team", owner: "core"}
tools: socket: {url: "unix:///run/s.sock", scope: "team", owner: "core"}
`}, {"workspaces.cue", `tools: ["team-search", "core-files"]`, `tools: ["team-search", "core-files", "loopback", "by-name", "socket"]`}}, true},
		{"a workspace granted no tools", []edit{{"workspaces.cue", `tools: ["team-search", "core-files"]`, `tools: []`}}, true},
		{"a tool's egress marked as a default", []edit{{"tools.cue", `egress: "full"`, `egress: *"none" | "full"`}}, false},
		{"a tool's egress completed by the schema default", []edit{{"tools.cue", `egress: "full"`, `egress: string`}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := copyTree(t, "testdata/base")
			applyEdits(t, dir, tt.edits)
			cfg, err := loadBoth(t, dir)
			if tt.name == "integer written as float" {
				if err == nil {
					t.Fatal("pids: 128.0 accepted; int & 128.0 must conflict")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.FastPath != tt.fast {
				t.Errorf("fast path: got %v, want %v", cfg.FastPath, tt.fast)
			}
		})
	}
}

func TestRehashMatchesLoad(t *testing.T) {
	dir := copyTree(t, "testdata/base")
	cfg, err := Load(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	again, err := Rehash(dir, cfg.Inputs.Dirs)
	if err != nil {
		t.Fatal(err)
	}
	if again.Hash != cfg.Inputs.Hash {
		t.Fatalf("Rehash: got %s, want %s", again.Hash, cfg.Inputs.Hash)
	}
	for _, e := range []edit{
		{"skills/team-notes/SKILL.md", "", "more\n"},
		{"jobs.cue", "", "// a comment is a change too\n"},
	} {
		applyEdits(t, dir, []edit{e})
		now, err := Rehash(dir, cfg.Inputs.Dirs)
		if err != nil {
			t.Fatal(err)
		}
		if now.Hash == cfg.Inputs.Hash {
			t.Errorf("editing %s did not change the config hash", e.file)
		}
		if got := Changed(cfg.Inputs, now); !reflect.DeepEqual(got, []string{e.file}) {
			t.Errorf("Changed: got %v, want [%s]", got, e.file)
		}
		cfg.Inputs = now
	}
	if err := os.WriteFile(filepath.Join(dir, "new.cue"), []byte("package base\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	now, _ := Rehash(dir, cfg.Inputs.Dirs)
	if got := Changed(cfg.Inputs, now); !reflect.DeepEqual(got, []string{"new.cue"}) {
		t.Errorf("a new file: Changed got %v", got)
	}
}

func TestSchemaCompiles(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "c.cue"), []byte("package c\nwidgets: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := LoadWith(context.Background(), dir, Options{ForceCUE: true})
	if err == nil || strings.Contains(err.Error(), "embedded schema") {
		t.Fatalf("got %v, want a schema violation from a compiled schema", err)
	}
	if !strings.HasPrefix(string(Export()), "// Code generated by nlx schema export") || !strings.Contains(string(Export()), "#Config:") {
		t.Error("Export does not carry the schema")
	}
}

func TestSymlinkInSkillRefused(t *testing.T) {
	dir := copyTree(t, "testdata/base")
	if err := os.Symlink("/etc/hostname", filepath.Join(dir, "skills/team-notes/leak")); err != nil {
		t.Fatal(err)
	}
	_, err := Load(context.Background(), dir)
	if err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("got %v, want a refusal of the symbolic link", err)
	}
}

// TestRawSecretNeverShown: a connection secret written as a value of any
// kind is raw_secret_value at the value, and no error shows it.
func TestRawSecretNeverShown(t *testing.T) {
	tests := []struct {
		name, value, shown string
	}{
		{"a string", `"sk-live-0123456789abcdef"`, "sk-live"},
		{"a number", `987654321`, "987654321"},
		{"a boolean", `true`, "true"},
		{"null", `null`, "null"},
		{"a struct", `{key: "sk-live-in-a-struct"}`, "sk-live"},
		{"a list", `["sk-live-in-a-list"]`, "sk-live"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := copyTree(t, "testdata/base")
			applyEdits(t, dir, []edit{{"connections.cue", `secret:         "env:OPENAI_API_KEY"`, `secret:         ` + tt.value}})
			_, err := loadBoth(t, dir)
			var errs Errors
			if !errors.As(err, &errs) || len(errs) != 1 {
				t.Fatalf("got %v, want one error", err)
			}
			want := markerPos(t, filepath.Join(dir, "connections.cue"), tt.value)
			e := errs[0]
			if got := fmt.Sprintf("%s:%d:%d", e.Pos.Filename, e.Pos.Line, e.Pos.Column); e.Code != reason.RawSecretValue || got != want || e.Path != "connections.ana-codex.secret" {
				t.Errorf("got %v, want %s at %s, connections.ana-codex.secret", e, reason.RawSecretValue, want)
			}
			if strings.Contains(strings.ReplaceAll(err.Error(), dir, "DIR"), tt.shown) {
				t.Errorf("the error shows the value: %v", err)
			}
		})
	}
}

// TestToolsLoad: team and personal tools, a command and both forms of
// url, decode as written with the schema's defaults, and the workspaces
// keep the tools they are granted in their order.
func TestToolsLoad(t *testing.T) {
	cfg, err := loadBoth(t, "testdata/base")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]*Tool{
		"team-search": {
			Command: []string{"mcp-search", "--stdio"},
			Env:     map[string]string{"SEARCH_INDEX": "/srv/index"},
			Secrets: map[string]string{"SEARCH_API_KEY": "env:SEARCH_API_KEY"},
			Egress:  "full", Scope: "team", Owner: "core",
		},
		"core-files":   {URL: "unix:///run/nlx-tools/files.sock", Endpoint: "/mcp", Egress: "none", Scope: "team", Owner: "core"},
		"ana-calendar": {URL: "http://127.0.0.1:8931/mcp", Egress: "none", Scope: "personal", Owner: "ana"},
	}
	if !reflect.DeepEqual(cfg.Tools, want) {
		t.Errorf("tools:\ngot  %s\nwant %s", show(cfg.Tools), show(want))
	}
	if got := cfg.Workspaces["core"].Tools; !reflect.DeepEqual(got, []string{"team-search", "core-files"}) {
		t.Errorf("workspace core's tools: %q", got)
	}
	if got := cfg.Workspaces["ana"].Tools; !reflect.DeepEqual(got, []string{"ana-calendar", "team-search"}) {
		t.Errorf("workspace ana's tools: %q", got)
	}
	if ts := cfg.Tools; ts["team-search"].IsURL() || !ts["core-files"].IsURL() || ts["core-files"].SocketPath() != "/run/nlx-tools/files.sock" || ts["ana-calendar"].IsUnix() {
		t.Error("IsURL, IsUnix or SocketPath is wrong")
	}
}

func show(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestToolSecretNeverShown: a tool's secret written as a value of any
// kind, or secrets that are not a map, are raw_secret_value at the value,
// and no error shows it; neither does one of two values written for one
// secret, of a tool or of a connection.
func TestToolSecretNeverShown(t *testing.T) {
	const entry = `secrets: SEARCH_API_KEY: "env:SEARCH_API_KEY"`
	tests := []struct {
		name, file, old, new, at, path, shown string
		code                                  reason.Code
	}{
		{"a string", "tools.cue", entry, `secrets: SEARCH_API_KEY: "sk-live-0123456789abcdef"`, `"sk-live`, "tools.team-search.secrets.SEARCH_API_KEY", "sk-live", reason.RawSecretValue},
		{"a number", "tools.cue", entry, `secrets: SEARCH_API_KEY: 987654321`, `987654321`, "tools.team-search.secrets.SEARCH_API_KEY", "987654321", reason.RawSecretValue},
		{"a boolean", "tools.cue", entry, `secrets: SEARCH_API_KEY: true`, `true`, "tools.team-search.secrets.SEARCH_API_KEY", "true", reason.RawSecretValue},
		{"null", "tools.cue", entry, `secrets: SEARCH_API_KEY: null`, `null`, "tools.team-search.secrets.SEARCH_API_KEY", "null", reason.RawSecretValue},
		{"a struct", "tools.cue", entry, `secrets: SEARCH_API_KEY: {key: "sk-live-in-a-struct"}`, `{key`, "tools.team-search.secrets.SEARCH_API_KEY", "sk-live", reason.RawSecretValue},
		{"a list", "tools.cue", entry, `secrets: SEARCH_API_KEY: ["sk-live-in-a-list"]`, `["sk-live`, "tools.team-search.secrets.SEARCH_API_KEY", "sk-live", reason.RawSecretValue},
		{"a reference that almost is one", "tools.cue", entry, `secrets: SEARCH_API_KEY: "env:"`, `"env:"`, "tools.team-search.secrets.SEARCH_API_KEY", `"env:"`, reason.RawSecretValue},
		{"secrets that are a string", "tools.cue", entry, `secrets: "sk-live-0123456789abcdef"`, `"sk-live`, "tools.team-search.secrets", "sk-live", reason.RawSecretValue},
		{"secrets that are a list", "tools.cue", entry, `secrets: ["sk-live-in-a-list"]`, `["sk-live`, "tools.team-search.secrets", "sk-live", reason.RawSecretValue},
		{"two values of a tool's secret", "tools.cue", entry, entry + "\n\tsecrets: SEARCH_API_KEY: \"sk-live-0123456789abcdef\"", `"sk-live`, "tools.team-search.secrets.SEARCH_API_KEY", "sk-live", reason.SchemaViolation},
		{"two values of a connection's secret", "connections.cue", `secret:         "env:OPENAI_API_KEY"`, `secret:         "env:OPENAI_API_KEY"
	secret:         "sk-live-0123456789abcdef"`, `"sk-live`, "connections.ana-codex.secret", "sk-live", reason.SchemaViolation},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := copyTree(t, "testdata/base")
			applyEdits(t, dir, []edit{{tt.file, tt.old, tt.new}})
			_, err := loadBoth(t, dir)
			var errs Errors
			if !errors.As(err, &errs) || len(errs) != 1 {
				t.Fatalf("got %v, want one error", err)
			}
			want := markerPos(t, filepath.Join(dir, tt.file), tt.at)
			e := errs[0]
			if got := fmt.Sprintf("%s:%d:%d", e.Pos.Filename, e.Pos.Line, e.Pos.Column); e.Code != tt.code || got != want || e.Path != tt.path {
				t.Errorf("got %v, want %s at %s, %s", e, tt.code, want, tt.path)
			}
			if !strings.Contains(e.Msg, "the value is not shown") {
				t.Errorf("the error does not say the value is not shown: %v", e)
			}
			if strings.Contains(strings.ReplaceAll(err.Error(), dir, "DIR"), tt.shown) {
				t.Errorf("the error shows the value: %v", err)
			}
		})
	}
}

// TestLayerPositions: every image layer knows where its source field was
// written, in process and through the budgeted child, for errors found when
// the layer is built (images positions a Go package that does not build at
// it).
func TestLayerPositions(t *testing.T) {
	dir := copyTree(t, "testdata/base")
	if err := os.WriteFile(filepath.Join(dir, "images.cue"), []byte(`package base

images: img: {
	platforms: ["linux/amd64"]
	base:      "scratch"
	layers: [
		{files: "skills", dest: "/srv"},
		{go: "example.com/cmd/x", dest: "/bin/x"},
		{skills: ["team-notes"], dest: "/opt/skills"},
		{nlx: {}, dest: "/bin/nlx"},
	]
}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	want := []struct {
		source    string
		line, col int
	}{{"files", 7, 11}, {"go", 8, 8}, {"skills", 9, 12}, {"nlx", 10, 9}}
	for _, load := range []struct {
		name string
		load func() (*Config, error)
	}{
		{"in process", func() (*Config, error) { return Load(context.Background(), dir) }},
		{"budgeted", func() (*Config, error) { return LoadBudgeted(context.Background(), dir, DefaultBudget()) }},
	} {
		t.Run(load.name, func(t *testing.T) {
			cfg, err := load.load()
			if err != nil {
				t.Fatal(err)
			}
			layers := cfg.Images["img"].Layers
			if len(layers) != len(want) {
				t.Fatalf("%d layers", len(layers))
			}
			for i, w := range want {
				l := layers[i]
				if l.Source() != w.source || l.Pos.Filename != filepath.Join(dir, "images.cue") || l.Pos.Line != w.line || l.Pos.Column != w.col {
					t.Errorf("layer %d: %s at %s, want %s at images.cue:%d:%d", i, l.Source(), l.Pos, w.source, w.line, w.col)
				}
			}
			if layers[3].Nlx == nil {
				t.Error("the nlx layer lost its nlx")
			}
		})
	}
}
