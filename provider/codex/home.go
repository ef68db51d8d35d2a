package codex

import (
	"fmt"

	"github.com/pelletier/go-toml/v2"

	"github.com/nlx-dev/nlx/provider"
)

// Each worker's app-server runs with a CODEX_HOME of its own: Codex reads
// its user layer (config.toml) there and config/batchWrite writes only
// that layer, so a worker's refresh edits its own copy and never the
// owner's configuration. The copy is the owner's config.toml (read at
// launch, never edited) with its MCP servers replaced by nlx's alone: a
// provider never sees a real tool server's command, URL or credential.
// The owner's sign-in (auth.json) stays the owner's: the private home
// links to it, and Codex writes a refreshed token through the link, in
// place (its file storage truncates and writes; checked on 0.169.0's
// source and in the tests).

var _ provider.PrivateHome = (*Adapter)(nil)

// HomeEnv is CODEX_HOME.
func (*Adapter) HomeEnv() string { return "CODEX_HOME" }

// OwnerConfig is config.toml, Codex's user layer.
func (*Adapter) OwnerConfig() string { return configFile }

// The files of a Codex home nlx makes or links.
const (
	configFile = "config.toml"
	authFile   = "auth.json"
)

// approveTools is the MCP server's default_tools_approval_mode under
// which Codex calls a tool without asking (an mcpServer/elicitation
// request of codex_approval_kind mcp_tool_call otherwise, which nlx
// declines): the workspace's tools were granted by an approved plan, and
// nlx's proxy refuses whatever the workspace no longer has.
const approveTools = "approve"

// mcpEntry is server's mcp_servers entry, as config.toml and
// config/batchWrite both take it.
func mcpEntry(s provider.MCPServer) map[string]any {
	e := map[string]any{
		"command":                     s.Command,
		"args":                        s.Args,
		"default_tools_approval_mode": approveTools,
	}
	if len(s.Env) > 0 {
		e["env"] = s.Env
	}
	return e
}

// HomeFiles is a worker's CODEX_HOME: config.toml, the owner's with
// server as its only MCP server, and auth.json linked to the owner's.
func (*Adapter) HomeFiles(ownerConfig []byte, server provider.MCPServer, credentialHome string) (map[string][]byte, map[string]string, error) {
	cfg := map[string]any{}
	if len(ownerConfig) > 0 {
		if err := toml.Unmarshal(ownerConfig, &cfg); err != nil {
			return nil, nil, fmt.Errorf("codex: the owner's %s: %w", configFile, err)
		}
	}
	cfg["mcp_servers"] = map[string]any{server.Name: mcpEntry(server)}
	data, err := toml.Marshal(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("codex: a worker's %s: %w", configFile, err)
	}
	links := map[string]string{}
	if credentialHome != "" {
		links[authFile] = credentialHome + "/" + authFile
	}
	return map[string][]byte{configFile: data}, links, nil
}
