// Package claude drives Claude Code (npm @anthropic-ai/claude-code, pinned
// 2.1.328) in its print mode with stream-json on both sides: one JSON
// object a line. nlx writes the turn's prompt as a user message on the
// program's stdin and reads its stdout to the turn's result line:
//
//	-> {"type":"user","message":{"role":"user","content":PROMPT},...}
//	<- {"type":"system","subtype":"init","session_id":...,"tools":[...]}
//	<- {"type":"stream_event","event":{...}}         the model's raw stream (deltas)
//	<- {"type":"assistant"|"user","message":{...}}   each content block, tool results
//	<- {"type":"control_request","request_id":...,"request":{"subtype":"can_use_tool",...}}
//	-> {"type":"control_response","response":{"subtype":"success","request_id":...,"response":{"behavior":"allow"|"deny",...}}}
//	<- {"type":"result","subtype":"success"|"error_...","is_error":...,"result":...,"usage":...}
//
// Claude Code asks before a tool use through the stdio permission prompt
// (--permission-prompt-tool stdio): each can_use_tool request goes to the
// Handler and is answered with its decision; any other request Claude
// Code makes of nlx (hook callbacks, MCP messages of an SDK server, what a
// later version adds) is answered with an error, which Claude Code takes
// as a refusal. A turn is interrupted with the interrupt control request;
// Claude Code answers it and ends the turn with an error result.
//
// Args turn off what would make Claude Code act without asking or on its
// own: the workspace's settings files (.claude/settings*.json hooks and
// permission rules, .mcp.json servers, which print mode starts without a
// trust prompt) are not read (--setting-sources=user), the permission
// mode is the default one whatever the settings say, and under an asking
// policy the Bash, Edit and Write tools always ask (an ask rule: Claude
// Code would otherwise run the commands it deems read-only, and file
// edits in acceptEdits mode, by itself).
//
// The commands the model runs inherit Claude Code's environment, the
// secret's variable (ANTHROPIC_API_KEY) included: Claude Code's own
// scrubbing (CLAUDE_CODE_SUBPROCESS_ENV_SCRUB) wraps each command in
// bubblewrap with socat, which nlx's sandbox does not offer, and nothing
// else of 2.1.328 removes it.
package claude

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/nlx-dev/nlx/internal/reason"
	"github.com/nlx-dev/nlx/provider"
)

// Adapter drives Claude Code. The zero value is ready to use.
type Adapter struct {
	// MaxRetries is how often Claude Code retries a failed API request
	// (CLAUDE_CODE_MAX_RETRIES; its own default is 10, with backoff over
	// minutes). The zero value retries nothing: a failed request or a cut
	// stream fails the turn at once, and the caller decides.
	MaxRetries int
}

var _ provider.Adapter = (*Adapter)(nil)

// Kind is provider.KindClaude.
func (*Adapter) Kind() provider.Kind { return provider.KindClaude }

// SecretEnv is the variable Claude Code reads an API key from.
func (*Adapter) SecretEnv() string { return "ANTHROPIC_API_KEY" }

// VersionArgs make claude print "VERSION (Claude Code)".
func (*Adapter) VersionArgs() []string { return []string{"--version"} }

// versionLine matches the line `claude --version` prints.
var versionLine = regexp.MustCompile(`(?m)^\s*v?(\d+\.\d+\.\d+(?:[-+][0-9A-Za-z.+-]+)?)\s+\(Claude Code\)\s*$`)

// ParseVersion reads the version from the output of `claude --version`
// ("2.1.328 (Claude Code)"); other lines (warnings) are skipped.
func (*Adapter) ParseVersion(out string) (string, error) {
	m := versionLine.FindStringSubmatch(out)
	if m == nil {
		return "", fmt.Errorf("claude: no \"VERSION (Claude Code)\" line in the output of --version (%d bytes)", len(out))
	}
	return m[1], nil
}

// Tool is a Claude Code built-in tool's name.
type Tool string

// The tools nlx offers. Claude Code 2.1.328 has no LS tool (--tools drops
// an unknown name silently): listing is Glob's, or Bash's.
const (
	ToolRead  Tool = "Read"
	ToolGlob  Tool = "Glob"
	ToolGrep  Tool = "Grep"
	ToolEdit  Tool = "Edit"
	ToolWrite Tool = "Write"
	ToolBash  Tool = "Bash"
)

// Other tools whose requests name files (see permissionOf).
const (
	toolMultiEdit    Tool = "MultiEdit"
	toolNotebookEdit Tool = "NotebookEdit"
)

// readTools are every policy's tools; writeTools are added where the
// policy allows writes.
var (
	readTools  = []Tool{ToolRead, ToolGlob, ToolGrep}
	writeTools = []Tool{ToolEdit, ToolWrite, ToolBash}
)

// Tools are the tools a turn under p is offered: the read tools, and
// under workspace_write, trusted_local and danger_full_access the write
// tools. Never anything else (no web tools, no agents, no MCP tools of
// the workspace): Claude Code's --tools sets exactly this list (what the
// model is offered and what init lists). An unknown policy is read_only.
func Tools(p provider.Policy) []Tool {
	switch p {
	case provider.WorkspaceWrite, provider.TrustedLocal, provider.DangerFullAccess:
		return append(append([]Tool(nil), readTools...), writeTools...)
	}
	return append([]Tool(nil), readTools...)
}

func joinTools(ts []Tool) string {
	s := make([]string, len(ts))
	for i, t := range ts {
		s[i] = string(t)
	}
	return strings.Join(s, ",")
}

// permissionMode is the mode every turn runs in: Claude Code's "default"
// (listed as "manual" by --help; both are accepted and init reports
// "default"), whatever the settings' defaultMode says.
const permissionMode = "default"

// askSettings is the --settings value of an asking policy: the write tools
// always ask (an ask rule wins over every allow rule and over Claude
// Code's own read-only command and acceptEdits shortcuts).
func askSettings() string {
	var s struct {
		Permissions struct {
			Ask []Tool `json:"ask"`
		} `json:"permissions"`
	}
	s.Permissions.Ask = writeTools
	b, _ := json.Marshal(s)
	return string(b)
}

// Env are the variables every turn sets: no traffic but the model's (no
// update check, telemetry, error reports or reachability probe: with
// these Claude Code connects to ANTHROPIC_BASE_URL only), and no silent
// retry (see Adapter.MaxRetries): no non-streaming fallback after a cut
// stream either.
func (a *Adapter) Env() map[string]string {
	return map[string]string{
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC":  "1",
		"DISABLE_AUTOUPDATER":                       "1",
		"DISABLE_TELEMETRY":                         "1",
		"DISABLE_ERROR_REPORTING":                   "1",
		"CLAUDE_CODE_MAX_RETRIES":                   strconv.Itoa(max(a.MaxRetries, 0)),
		"CLAUDE_CODE_DISABLE_NONSTREAMING_FALLBACK": "1",
	}
}

// Args are the arguments a turn adds to the registration's command (which
// may name some of them already: Claude Code takes a repeated flag's last
// value), and its variables (Env). Lists are given in the --flag=value
// form: --tools and --allowedTools take every following word otherwise.
func (a *Adapter) Args(t provider.Turn) ([]string, map[string]string) {
	tools := joinTools(Tools(t.Policy))
	args := []string{
		"-p", "--output-format", "stream-json", "--input-format", "stream-json", "--verbose",
		"--include-partial-messages", "--permission-prompt-tool", "stdio",
		"--setting-sources=user", "--permission-mode=" + permissionMode,
		"--tools=" + tools,
	}
	if t.Policy.Asks() {
		args = append(args, "--settings="+askSettings())
	} else {
		args = append(args, "--allowedTools="+tools)
	}
	if t.Tools != nil {
		// nlx's tool proxy, and nothing else: --strict-mcp-config keeps
		// every other MCP configuration (the user's, a project's) out.
		// Its tools run without asking: the workspace was granted them
		// by an approved plan, and the proxy refuses what it no longer
		// has.
		args = append(args, "--mcp-config="+mcpConfig(*t.Tools), "--strict-mcp-config",
			"--allowedTools="+mcpPrefix+t.Tools.Name)
	}
	if t.Resume != "" {
		args = append(args, "--resume="+t.Resume)
	}
	return args, a.Env()
}

// mcpPrefix starts the names Claude Code gives an MCP server's tools
// (mcp__SERVER__TOOL); an allow rule of mcp__SERVER allows them all.
const mcpPrefix = "mcp__"

// mcpConfig is --mcp-config's JSON naming server alone.
func mcpConfig(s provider.MCPServer) string {
	type stdio struct {
		Type    string            `json:"type"`
		Command string            `json:"command"`
		Args    []string          `json:"args"`
		Env     map[string]string `json:"env,omitempty"`
	}
	b, _ := json.Marshal(map[string]map[string]stdio{"mcpServers": {s.Name: {Type: "stdio", Command: s.Command, Args: s.Args, Env: s.Env}}})
	return string(b)
}

// reservedFlags are the flags a registration's command must not carry:
// Args sets them for every turn, and Claude Code does not simply take the
// last one. --tools and --allowedTools accumulate (a registration's
// --tools=WebFetch would be offered beside nlx's list; its
// --allowedTools=Bash would run Bash unasked where the policy asks only
// through nlx's ask rule), a later --settings replaces an earlier one
// whole, and the others decide what Args decides: the permission mode and
// prompts, the settings read, the session, the protocol. -p,
// --output-format stream-json and --verbose are harmless repeated.
var reservedFlags = []string{
	"--tools", "--allowedTools", "--allowed-tools", "--disallowedTools", "--disallowed-tools",
	"--settings", "--setting-sources", "--permission-mode", "--permission-prompt-tool", "--permission-prompts",
	"--dangerously-skip-permissions", "--allow-dangerously-skip-permissions",
	"--resume", "-r", "--continue", "-c", "--session-id", "--fork-session", "--no-session-persistence",
	"--input-format", "--replay-user-messages", "--bg", "--background",
	"--mcp-config", "--strict-mcp-config",
}

// CheckCommand is the package's CheckCommand, as a
// provider.CommandChecker.
func (*Adapter) CheckCommand(command []string) error { return CheckCommand(command) }

// CheckCommand reports a registration's command (the program and its
// arguments) that carries a flag Args sets (reservedFlags): such a
// command would widen or override what a turn's policy allows.
func CheckCommand(command []string) error {
	for _, arg := range command[min(1, len(command)):] {
		name, _, _ := strings.Cut(arg, "=")
		for _, f := range reservedFlags {
			if name == f {
				return reason.New(reason.InvalidValue, "claude: the provider's command must not carry %s: nlx sets it for each turn", f)
			}
		}
	}
	return nil
}
