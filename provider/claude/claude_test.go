package claude

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/nlx-dev/nlx/internal/reason"
	"github.com/nlx-dev/nlx/provider"
)

func TestParseVersion(t *testing.T) {
	tests := []struct {
		out, want string
		ok        bool
	}{
		{"2.1.328 (Claude Code)\n", "2.1.328", true},
		{"warning: something\n2.1.328 (Claude Code)\n", "2.1.328", true},
		{"2.2.0-beta.1 (Claude Code)", "2.2.0-beta.1", true},
		{"claude 2.1.328", "", false},
		{"", "", false},
	}
	for _, tt := range tests {
		got, err := (&Adapter{}).ParseVersion(tt.out)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("ParseVersion(%q) = %q, %v; want %q (ok %v)", tt.out, got, err, tt.want, tt.ok)
		}
	}
}

func TestAdapterBasics(t *testing.T) {
	a := &Adapter{}
	if a.Kind() != provider.KindClaude || a.SecretEnv() != "ANTHROPIC_API_KEY" || !slices.Equal(a.VersionArgs(), []string{"--version"}) {
		t.Errorf("kind %s secret %s version %q", a.Kind(), a.SecretEnv(), a.VersionArgs())
	}
}

// flagValue is the value of the last --name=value among args.
func flagValue(args []string, name string) (string, bool) {
	v, ok := "", false
	for _, a := range args {
		if s, found := strings.CutPrefix(a, name+"="); found {
			v, ok = s, true
		}
	}
	return v, ok
}

func TestArgs(t *testing.T) {
	const readOnly = "Read,Glob,Grep"
	const write = "Read,Glob,Grep,Edit,Write,Bash"
	tests := []struct {
		turn    provider.Turn
		tools   string
		asks    bool
		resumed string
	}{
		{provider.Turn{Policy: provider.ReadOnly}, readOnly, true, ""},
		{provider.Turn{Policy: provider.WorkspaceWrite}, write, true, ""},
		{provider.Turn{Policy: provider.TrustedLocal}, write, false, ""},
		{provider.Turn{Policy: provider.DangerFullAccess, Resume: "-s"}, write, false, "-s"},
		{provider.Turn{Policy: "bogus", Resume: "0a1b"}, readOnly, true, "0a1b"},
	}
	for _, tt := range tests {
		t.Run(string(tt.turn.Policy), func(t *testing.T) {
			args, env := (&Adapter{}).Args(tt.turn)
			for _, want := range [][]string{{"-p"}, {"--output-format", "stream-json"}, {"--input-format", "stream-json"}, {"--verbose"},
				{"--include-partial-messages"}, {"--permission-prompt-tool", "stdio"}, {"--setting-sources=user"}, {"--permission-mode=default"}} {
				if i := slices.Index(args, want[0]); i < 0 || len(want) == 2 && (i+1 >= len(args) || args[i+1] != want[1]) {
					t.Errorf("args %q lack %q", args, want)
				}
			}
			if got, _ := flagValue(args, "--tools"); got != tt.tools {
				t.Errorf("--tools=%q, want %q", got, tt.tools)
			}
			settings, hasSettings := flagValue(args, "--settings")
			allowed, hasAllowed := flagValue(args, "--allowedTools")
			if tt.asks {
				var s struct {
					Permissions struct{ Ask []string } `json:"permissions"`
				}
				if err := json.Unmarshal([]byte(settings), &s); err != nil || !slices.Equal(s.Permissions.Ask, []string{"Edit", "Write", "Bash"}) || hasAllowed {
					t.Errorf("--settings=%q (%v), --allowedTools %v: want the ask rules only", settings, err, hasAllowed)
				}
			} else if hasSettings || allowed != tt.tools {
				t.Errorf("--settings %v, --allowedTools=%q: want the tools allowed", hasSettings, allowed)
			}
			resume, hasResume := flagValue(args, "--resume")
			if hasResume != (tt.resumed != "") || resume != tt.resumed || slices.Contains(args, "--resume") {
				t.Errorf("args %q: want --resume=%q", args, tt.resumed)
			}
			for _, a := range args {
				if strings.Contains(a, "WebFetch") || strings.Contains(a, "WebSearch") {
					t.Errorf("arg %q", a)
				}
			}
			want := map[string]string{"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1", "DISABLE_TELEMETRY": "1",
				"DISABLE_ERROR_REPORTING": "1", "CLAUDE_CODE_MAX_RETRIES": "0", "CLAUDE_CODE_DISABLE_NONSTREAMING_FALLBACK": "1"}
			if len(env) != len(want) {
				t.Errorf("env %v", env)
			}
			for k, v := range want {
				if env[k] != v {
					t.Errorf("env %s=%q, want %q", k, env[k], v)
				}
			}
		})
	}
	if _, env := (&Adapter{MaxRetries: 3}).Args(provider.Turn{}); env["CLAUDE_CODE_MAX_RETRIES"] != "3" {
		t.Errorf("MaxRetries 3: %v", env)
	}
}

// TestPermissionOf reads can_use_tool requests as Claude Code 2.1.328
// sends them.
func TestPermissionOf(t *testing.T) {
	tests := []struct {
		name    string
		request string
		want    provider.Permission
	}{
		{"bash", `{"subtype":"can_use_tool","tool_name":"Bash","display_name":"Bash","input":{"command":"touch marker.txt"},"description":"touch marker.txt","permission_suggestions":[{"type":"addRules","rules":[{"toolName":"Bash","ruleContent":"touch marker.txt"}],"behavior":"allow","destination":"localSettings"}],"blocked_path":"/w/marker.txt","tool_use_id":"toolu_1"}`,
			provider.Permission{Kind: provider.PermissionCommand, Tool: "Bash", Command: "touch marker.txt", Cwd: "/w"}},
		{"write", `{"subtype":"can_use_tool","tool_name":"Write","input":{"file_path":"/w/a.txt","content":"x"},"matched_ask_rule":{"source":"flagSettings","tool_name":"Write"},"tool_use_id":"toolu_2"}`,
			provider.Permission{Kind: provider.PermissionFileChange, Tool: "Write", Paths: []string{"/w/a.txt"}, Cwd: "/w"}},
		{"notebook", `{"subtype":"can_use_tool","tool_name":"NotebookEdit","input":{"notebook_path":"/w/n.ipynb"}}`,
			provider.Permission{Kind: provider.PermissionFileChange, Tool: "NotebookEdit", Paths: []string{"/w/n.ipynb"}, Cwd: "/w"}},
		{"read outside", `{"subtype":"can_use_tool","tool_name":"Read","input":{"file_path":"/etc/hostname"},"decision_reason":"Path is outside allowed working directories","decision_reason_type":"workingDir"}`,
			provider.Permission{Kind: provider.PermissionTool, Tool: "Read", Paths: []string{"/etc/hostname"}, Cwd: "/w", Reason: "Path is outside allowed working directories"}},
		{"mcp", `{"subtype":"can_use_tool","tool_name":"mcp__x__y","input":{"q":1},"decision_reason":{"type":"other"}}`,
			provider.Permission{Kind: provider.PermissionTool, Tool: "mcp__x__y", Cwd: "/w", Reason: `{"type":"other"}`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var req controlRequest
			if err := json.Unmarshal([]byte(tt.request), &req); err != nil {
				t.Fatal(err)
			}
			got := permissionOf(req, "/w")
			if got.Kind != tt.want.Kind || got.Tool != tt.want.Tool || got.Command != tt.want.Command || got.Cwd != tt.want.Cwd ||
				got.Reason != tt.want.Reason || !slices.Equal(got.Paths, tt.want.Paths) {
				t.Errorf("got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestShortInput(t *testing.T) {
	tests := []struct {
		tool  Tool
		input string
		want  string
	}{
		{ToolBash, `{"command":"ls -la","description":"list"}`, "ls -la"},
		{ToolEdit, `{"file_path":"/w/a","old_string":"x","new_string":"y"}`, "/w/a"},
		{ToolGrep, `{"pattern":"TODO","path":"src"}`, "TODO in src"},
		{ToolGlob, `{"pattern":"**/*.go"}`, "**/*.go"},
		{"Other", `{ "a" : 1 }`, `{"a":1}`},
		{"Other", `{"a":"` + strings.Repeat("x", 2000) + `"}`, `{"a":"` + strings.Repeat("x", maxToolInput-6) + "\n[... cut by nlx]"},
	}
	for _, tt := range tests {
		if got := shortInput(tt.tool, json.RawMessage(tt.input)); got != tt.want {
			t.Errorf("shortInput(%s, %.40s) = %.60q, want %.60q", tt.tool, tt.input, got, tt.want)
		}
	}
}

func TestUsageOf(t *testing.T) {
	var u wireUsage
	if err := json.Unmarshal([]byte(`{"input_tokens":12,"cache_creation_input_tokens":3,"cache_read_input_tokens":100,"output_tokens":7,"output_tokens_details":{"thinking_tokens":2}}`), &u); err != nil {
		t.Fatal(err)
	}
	if got, want := usageOf(&u), (provider.Usage{InputTokens: 115, CachedInputTokens: 100, OutputTokens: 7, ReasoningTokens: 2}); got != want {
		t.Errorf("usage %+v, want %+v", got, want)
	}
}

func TestCheckCommand(t *testing.T) {
	tests := []struct {
		command []string
		bad     string
	}{
		{[]string{"claude"}, ""},
		{nil, ""},
		{[]string{"/opt/claude", "--print", "--output-format", "stream-json", "--verbose", "--model", "opus"}, ""},
		{[]string{"claude", "--tools", "WebFetch"}, "--tools"},
		{[]string{"claude", "--allowedTools=Bash"}, "--allowedTools"},
		{[]string{"claude", "--settings", "{}"}, "--settings"},
		{[]string{"claude", "--dangerously-skip-permissions"}, "--dangerously-skip-permissions"},
		{[]string{"claude", "-r", "x"}, "-r"},
		{[]string{"--tools"}, ""}, // the program itself
	}
	for _, tt := range tests {
		err := CheckCommand(tt.command)
		if tt.bad == "" {
			if err != nil {
				t.Errorf("CheckCommand(%q): %v", tt.command, err)
			}
			continue
		}
		if e := reason.Of(err); e == nil || e.Code != reason.InvalidValue || !strings.Contains(err.Error(), tt.bad) {
			t.Errorf("CheckCommand(%q) = %v, want invalid_value naming %s", tt.command, err, tt.bad)
		}
	}
}
