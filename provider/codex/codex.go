// Package codex drives Codex's app-server (`codex app-server`, npm
// @openai/codex, pinned 0.169.0): JSON-RPC 2.0 over the program's stdio,
// one JSON object a line, without the "jsonrpc" member.
//
// A turn is: initialize, the initialized notification, thread/start (or
// thread/resume of the turn's stored thread), turn/start, then the
// server's notifications until turn/completed. Codex's approval requests
// (item/commandExecution/requestApproval, item/fileChange/requestApproval)
// go to the Handler; every other request the server makes is refused
// (fail closed). Codex is told that nlx is the sandbox: the thread runs
// with sandbox "danger-full-access" (Codex wraps nothing itself) and each
// turn with sandboxPolicy {"type":"externalSandbox"}.
//
// The protocol's JSON schema for the pinned version is kept in
// testdata/schema (`codex app-server generate-json-schema`); the tests
// validate what the adapter sends against it.
package codex

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/nlx-dev/nlx/provider"
)

// Adapter drives Codex's app-server. The zero value is ready to use.
type Adapter struct {
	// ClientVersion is the version nlx names in initialize's clientInfo
	// (Codex puts it in its user agent); "" is "dev".
	ClientVersion string
}

var _ provider.Adapter = (*Adapter)(nil)

// Kind is provider.KindCodex.
func (*Adapter) Kind() provider.Kind { return provider.KindCodex }

// SecretEnv is the variable Codex reads an API key from (a provider's
// env_key; OPENAI_API_KEY for OpenAI's).
func (*Adapter) SecretEnv() string { return "OPENAI_API_KEY" }

// VersionArgs make codex print "codex-cli VERSION".
func (*Adapter) VersionArgs() []string { return []string{"--version"} }

// versionLine matches the line `codex --version` prints.
var versionLine = regexp.MustCompile(`(?m)^\s*codex(?:-cli)?\s+v?(\d+\.\d+\.\d+(?:[-+][0-9A-Za-z.+-]+)?)\s*$`)

// ParseVersion reads the version from the output of `codex --version`
// ("codex-cli 0.169.0"); other lines (warnings) are skipped.
func (*Adapter) ParseVersion(out string) (string, error) {
	m := versionLine.FindStringSubmatch(out)
	if m == nil {
		return "", fmt.Errorf("codex: no \"codex-cli VERSION\" line in the output of --version (%d bytes)", len(out))
	}
	return m[1], nil
}

// Args are the arguments every turn adds to the registration's command.
// The commands Codex runs for the model inherit its environment, the
// secret's variable included, unless Codex's default excludes (variables
// whose names contain KEY, SECRET or TOKEN) are applied: this turns them
// on, so that the model's commands never see the secret. A turn needs no
// variable: everything else is sent over the protocol.
func (*Adapter) Args(provider.Turn) ([]string, map[string]string) {
	return []string{"-c", "shell_environment_policy.ignore_default_excludes=false"}, nil
}

// FakeModelName is the model and provider name FakeModelArgs configure.
const FakeModelName = "fake"

// FakeModelArgs are the `codex app-server` arguments that make Codex use
// the fake model served at baseURL (internal/fakemodel's URL(), without
// /v1): a Responses API provider reading its key from OPENAI_API_KEY
// (which must be set, to any value), over HTTP (no websocket), with no
// retry, so that a failed or cut stream fails the turn at once.
func FakeModelArgs(baseURL string) []string {
	base := strings.TrimSuffix(baseURL, "/") + "/v1"
	p := "model_providers." + FakeModelName + "."
	kv := []string{
		"model=" + tomlString("gpt-"+FakeModelName),
		"model_provider=" + tomlString(FakeModelName),
		p + "name=" + tomlString(FakeModelName),
		p + "base_url=" + tomlString(base),
		p + "wire_api=" + tomlString("responses"),
		p + "env_key=" + tomlString("OPENAI_API_KEY"),
		p + "supports_websockets=false",
		p + "stream_max_retries=0",
		p + "request_max_retries=0",
	}
	args := make([]string, 0, 2*len(kv))
	for _, s := range kv {
		args = append(args, "-c", s)
	}
	return args
}

// tomlString is s as a TOML basic string (-c values are parsed as TOML).
func tomlString(s string) string { return strconv.Quote(s) }
