package codex

import (
	"bytes"
	"encoding/json"
	"fmt"
	"github.com/nlx-dev/nlx/provider"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/nlx-dev/nlx/internal/testtool"
)

// schemaFile is the protocol's JSON schema bundle as the pinned Codex
// generates it (codex app-server generate-json-schema --out DIR).
const schemaFile = "testdata/schema/codex_app_server_protocol.schemas.json"

// schemaURL is the bundle's name in the compiler.
const schemaURL = "codex_app_server_protocol.schemas.json"

// protocolSchema validates messages against the bundle's definitions.
type protocolSchema struct {
	mu       sync.Mutex
	c        *jsonschema.Compiler
	compiled map[string]*jsonschema.Schema
	// responses maps a request method to the definition of its result:
	// the client's (ClientRequest) and the server's (ServerRequest).
	clientResults map[string]string
	serverResults map[string]string
}

var (
	schemaOnce sync.Once
	schemaVal  *protocolSchema
	schemaErr  error
)

// loadSchema compiles the bundle once for the package's tests.
func loadSchema(t testing.TB) *protocolSchema {
	t.Helper()
	schemaOnce.Do(func() { schemaVal, schemaErr = newProtocolSchema(schemaFile) })
	if schemaErr != nil {
		t.Fatalf("schema: %v", schemaErr)
	}
	return schemaVal
}

func newProtocolSchema(path string) (*protocolSchema, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read schema: %w", err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("parse schema: %w", err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource(schemaURL, doc); err != nil {
		return nil, fmt.Errorf("add schema: %w", err)
	}
	s := &protocolSchema{c: c, compiled: map[string]*jsonschema.Schema{}}
	// The request unions name each method's params definition; the
	// result's is the same name with Response for Params.
	var bundle struct {
		Definitions map[string]json.RawMessage `json:"definitions"`
	}
	if err := json.Unmarshal(raw, &bundle); err != nil {
		return nil, fmt.Errorf("parse schema: %w", err)
	}
	if s.clientResults, err = resultDefs(bundle.Definitions, "ClientRequest"); err != nil {
		return nil, err
	}
	if s.serverResults, err = resultDefs(bundle.Definitions, "ServerRequest"); err != nil {
		return nil, err
	}
	return s, nil
}

// resultDefs maps each method of the request union name to the pointer of
// its result's definition.
func resultDefs(defs map[string]json.RawMessage, name string) (map[string]string, error) {
	var union struct {
		OneOf []struct {
			Properties struct {
				Method struct {
					Enum []string `json:"enum"`
				} `json:"method"`
				Params struct {
					Ref string `json:"$ref"`
				} `json:"params"`
			} `json:"properties"`
		} `json:"oneOf"`
	}
	if err := json.Unmarshal(defs[name], &union); err != nil {
		return nil, fmt.Errorf("schema %s: %w", name, err)
	}
	var v2 map[string]json.RawMessage
	if err := json.Unmarshal(defs["v2"], &v2); err != nil {
		return nil, fmt.Errorf("schema v2: %w", err)
	}
	out := map[string]string{}
	// Methods whose result is not named after their params: the config
	// writes share one, and reload has no params.
	for m, def := range map[string]string{"config/batchWrite": "v2/ConfigWriteResponse", "config/value/write": "v2/ConfigWriteResponse",
		"config/mcpServer/reload": "v2/McpServerRefreshResponse"} {
		if _, ok := v2[strings.TrimPrefix(def, "v2/")]; !ok && name == "ClientRequest" {
			return nil, fmt.Errorf("schema: no definition %s for %s's result", def, m)
		}
		if name == "ClientRequest" {
			out[m] = def
		}
	}
	for _, o := range union.OneOf {
		if len(o.Properties.Method.Enum) != 1 {
			return nil, fmt.Errorf("schema %s: a member without one method", name)
		}
		m := o.Properties.Method.Enum[0]
		ref := o.Properties.Params.Ref
		if ref == "" || !strings.HasSuffix(ref, "Params") {
			continue // no params: no result definition to derive
		}
		res := strings.TrimSuffix(ref, "Params") + "Response"
		def := strings.TrimPrefix(res, "#/definitions/")
		found := false
		if d, ok := strings.CutPrefix(def, "v2/"); ok {
			_, found = v2[d]
		} else {
			_, found = defs[def]
		}
		if _, named := out[m]; found && !named {
			out[m] = def
		}
	}
	return out, nil
}

// validate validates v (a decoded JSON value or raw JSON) against the
// definition def ("ClientRequest", "v2/ThreadStartResponse").
func (s *protocolSchema) validate(def string, raw []byte) error {
	s.mu.Lock()
	sch, ok := s.compiled[def]
	if !ok {
		var err error
		sch, err = s.c.Compile(schemaURL + "#/definitions/" + def)
		if err != nil {
			s.mu.Unlock()
			return fmt.Errorf("compile %s: %w", def, err)
		}
		s.compiled[def] = sch
	}
	s.mu.Unlock()
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return fmt.Errorf("not JSON: %w", err)
	}
	if err := sch.Validate(inst); err != nil {
		return fmt.Errorf("%s: %w", def, err)
	}
	return nil
}

// direction is who sent a transcript line.
type direction string

const (
	fromCodex direction = "codex"
	fromNLX   direction = "nlx"
	// cancelHere is a fixture's directive: the test ends the turn's
	// context at this point.
	cancelHere direction = "cancel"
	// eofHere closes the adapter's stdout (the program exited).
	eofHere direction = "eof"
)

// entry is one line of a transcript.
type entry struct {
	Dir direction       `json:"dir"`
	Msg json.RawMessage `json:"msg,omitempty"`
	// AfterText, on a cancel, is the text the handler must have seen
	// before the context ends (the adapter has read that far).
	AfterText string `json:"afterText,omitempty"`
	// Subset, on an nlx line, compares only the members Msg has (the
	// synthetic transcripts of the tests; fixtures compare whole lines).
	Subset bool `json:"subset,omitempty"`
	// at is when a live transcript got the line.
	at time.Time
}

// badMessage is a message of a transcript the schema does not allow.
type badMessage struct {
	line int // 1-based
	dir  direction
	err  error
}

func (b badMessage) Error() string { return fmt.Sprintf("line %d (from %s): %v", b.line, b.dir, b.err) }

// validateTranscript checks every message of a transcript against the
// schema: requests and notifications against the unions of their sender,
// responses against the result definition of the request they answer (or
// JSONRPCError).
func (s *protocolSchema) validateTranscript(entries []entry) []badMessage {
	var errs []badMessage
	asked := map[direction]map[string]string{fromCodex: {}, fromNLX: {}} // request id -> method, by sender
	for i, e := range entries {
		if e.Dir == cancelHere || e.Dir == eofHere {
			continue
		}
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Result json.RawMessage `json:"result"`
			Error  json.RawMessage `json:"error"`
		}
		if err := json.Unmarshal(e.Msg, &m); err != nil {
			errs = append(errs, badMessage{i + 1, e.Dir, err})
			continue
		}
		var err error
		switch {
		case m.Method != "" && len(m.ID) > 0:
			asked[e.Dir][string(m.ID)] = m.Method
			err = s.validate(union(e.Dir, "Request"), e.Msg)
		case m.Method != "":
			err = s.validate(union(e.Dir, "Notification"), e.Msg)
		case m.Error != nil:
			err = s.validate("JSONRPCError", e.Msg)
		default:
			other := fromCodex
			results := s.serverResults
			if e.Dir == fromCodex {
				other, results = fromNLX, s.clientResults
			}
			meth, ok := asked[other][string(m.ID)]
			switch {
			case !ok:
				err = fmt.Errorf("a response to no request (id %s)", m.ID)
			case results[meth] == "":
				err = fmt.Errorf("no result definition for %s", meth)
			default:
				if err = s.validate("JSONRPCResponse", e.Msg); err == nil {
					err = s.validate(results[meth], m.Result)
				}
			}
		}
		if err != nil {
			errs = append(errs, badMessage{i + 1, e.Dir, fmt.Errorf("%s: %w", clip(string(e.Msg), 300), err)})
		}
	}
	return errs
}

// union is the schema's union of what dir sends: ClientRequest,
// ServerNotification, ...
func union(dir direction, kind string) string {
	if dir == fromCodex {
		return "Server" + kind
	}
	return "Client" + kind
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// TestSchemaIsThePinnedVersions regenerates the schema bundle with the
// pinned Codex and compares it with the one kept: a new Codex version
// makes this fail until testdata/schema is regenerated (and the adapter
// checked against what changed).
func TestSchemaIsThePinnedVersions(t *testing.T) {
	bin := testtool.NeedProvider(t, "codex")
	dir := t.TempDir()
	cmd := exec.Command(bin, "app-server", "generate-json-schema", "--out", dir)
	cmd.Env = append(os.Environ(), "CODEX_HOME="+t.TempDir())
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("generate-json-schema: %v\n%s", err, out)
	}
	got, err := os.ReadFile(filepath.Join(dir, filepath.Base(schemaFile)))
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(schemaFile)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s differs from what %s generates (%d bytes, kept %d): regenerate it with\n"+
			"  %s app-server generate-json-schema --out DIR && cp DIR/%s %s",
			schemaFile, bin, len(got), len(want), bin, filepath.Base(schemaFile), schemaFile)
	}
}

// TestSchemaValidates checks the validator itself: the messages the
// adapter's types produce are valid, and a few wrong ones are not.
func TestSchemaValidates(t *testing.T) {
	s := loadSchema(t)
	enc := func(v any) []byte {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	tests := []struct {
		name  string
		def   string
		msg   []byte
		valid bool
	}{
		{"initialize", "ClientRequest", enc(request{Method: methodInitialize, ID: 1, Params: initializeParams{
			ClientInfo: clientInfo{Name: clientName, Title: "nlx", Version: "dev"}, Capabilities: &initializeCapabilities{OptOutNotificationMethods: quiet}}}), true},
		{"initialized", "ClientNotification", enc(notification{Method: methodInitialized}), true},
		{"thread/start", "ClientRequest", enc(request{Method: methodThreadStart, ID: 2, Params: threadStartParams{
			Cwd: "/workspace", ApprovalPolicy: approvalUntrusted, ApprovalsReviewer: reviewerUser, Sandbox: sandboxNone}}), true},
		{"thread/resume", "ClientRequest", enc(request{Method: methodThreadResume, ID: 2, Params: threadResumeParams{
			ThreadID: "t", ApprovalPolicy: approvalNever, ApprovalsReviewer: reviewerUser, Sandbox: sandboxNone, ExcludeTurns: true}}), true},
		{"turn/start", "ClientRequest", enc(request{Method: methodTurnStart, ID: 3, Params: turnStartParams{
			ThreadID: "t", Input: []userInput{{Type: inputText, Text: "hi"}}, ApprovalPolicy: approvalUntrusted, ApprovalsReviewer: reviewerUser,
			SandboxPolicy: sandboxPolicy{Type: sandboxExternal, NetworkAccess: networkEnabled}}}), true},
		{"turn/interrupt", "ClientRequest", enc(request{Method: methodTurnInterrupt, ID: 4, Params: turnInterruptParams{ThreadID: "t", TurnID: "u"}}), true},
		{"config/read", "ClientRequest", enc(request{Method: methodConfigRead, ID: 5, Params: configReadParams{IncludeLayers: true}}), true},
		{"config/batchWrite", "ClientRequest", enc(request{Method: methodConfigBatchWrite, ID: 6, Params: configBatchWriteParams{ExpectedVersion: "sha256:0",
			Edits: []configEdit{{KeyPath: "mcp_servers.nlx", MergeStrategy: mergeUpsert, Value: mcpEntry(provider.MCPServer{Name: "nlx",
				Command: "/run/nlx/nlx", Args: []string{"__mcp-bridge", "/run/nlx/tools.sock"}, Env: map[string]string{"NLX_TOOLS_GRANT": "sha256:1"}})}}}}), true},
		{"config/mcpServer/reload", "ClientRequest", enc(request{Method: methodMCPReload, ID: 7}), true},
		{"mcpServerStatus/list", "ClientRequest", enc(request{Method: methodMCPStatusList, ID: 8, Params: mcpStatusListParams{ServerName: "nlx", Detail: statusDetail}}), true},
		{"accept", "CommandExecutionRequestApprovalResponse", enc(approvalResponse{Decision: decisionAccept}), true},
		{"decline file change", "FileChangeRequestApprovalResponse", enc(approvalResponse{Decision: decisionDecline}), true},
		{"no permissions", "PermissionsRequestApprovalResponse", enc(permissionsResponse{Scope: grantTurn}), true},
		{"decline elicitation", "McpServerElicitationRequestResponse", enc(elicitationResponse{Action: elicitationDecline}), true},
		{"failed tool call", "DynamicToolCallResponse", enc(dynamicToolResponse{ContentItems: []struct{}{}}), true},
		{"legacy denied", "ExecCommandApprovalResponse", enc(legacyApprovalResponse{Decision: legacyDenied{}}), true},
		{"refusal", "JSONRPCError", enc(response{ID: json.RawMessage(`0`), Error: &rpcError{Code: errMethodNotFound, Message: "no"}}), true},

		{"unknown method", "ClientRequest", []byte(`{"method":"thread/begin","id":1,"params":{}}`), false},
		{"bad approval policy", "ClientRequest", []byte(`{"method":"thread/start","id":1,"params":{"approvalPolicy":"unlessTrusted"}}`), false},
		{"bad sandbox", "ClientRequest", []byte(`{"method":"thread/start","id":1,"params":{"sandbox":"workspaceWrite"}}`), false},
		{"bad decision", "CommandExecutionRequestApprovalResponse", []byte(`{"decision":"deny"}`), false},
		{"turn/start without input", "ClientRequest", []byte(`{"method":"turn/start","id":1,"params":{"threadId":"t"}}`), false},
		{"bad merge strategy", "ClientRequest", []byte(`{"method":"config/batchWrite","id":1,"params":{"edits":[{"keyPath":"a","value":1,"mergeStrategy":"merge"}]}}`), false},
		{"bad status detail", "ClientRequest", []byte(`{"method":"mcpServerStatus/list","id":1,"params":{"detail":"everything"}}`), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := s.validate(tt.def, tt.msg)
			if tt.valid && err != nil {
				t.Errorf("%s is invalid: %v", tt.msg, err)
			}
			if !tt.valid && err == nil {
				t.Errorf("%s is valid, want invalid", tt.msg)
			}
		})
	}
}

// enums collects every enum value written inside definition def of the
// bundle (refs not followed): a union's methods, an enum's values.
func enums(t *testing.T, def string) map[string]bool {
	t.Helper()
	raw, err := os.ReadFile(schemaFile)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	var node any = doc["definitions"]
	for _, part := range strings.Split(def, "/") {
		m, _ := node.(map[string]any)
		node = m[part]
	}
	if node == nil {
		t.Fatalf("no definition %s", def)
	}
	out := map[string]bool{}
	var walk func(any)
	walk = func(n any) {
		switch n := n.(type) {
		case map[string]any:
			for k, v := range n {
				if k == "enum" {
					for _, e := range v.([]any) {
						if s, ok := e.(string); ok {
							out[s] = true
						}
					}
				}
				walk(v)
			}
		case []any:
			for _, v := range n {
				walk(v)
			}
		}
	}
	walk(node)
	return out
}

// TestWireEnums checks every wire value the adapter writes or reads
// against the pinned schema.
func TestWireEnums(t *testing.T) {
	tests := []struct {
		def    string
		values []string
	}{
		{"ClientRequest", []string{string(methodInitialize), string(methodThreadStart), string(methodThreadResume), string(methodTurnStart), string(methodTurnInterrupt)}},
		{"ClientNotification", []string{string(methodInitialized)}},
		{"ServerNotification", []string{string(notifyTurnStarted), string(notifyTurnCompleted), string(notifyItemStarted), string(notifyItemCompleted),
			string(notifyAgentMessageDelta), string(notifyReasoningSummary), string(notifyReasoningText), string(notifyCommandOutput),
			string(notifyFileChangeOutput), string(notifyTokenUsage), string(notifyError)}},
		{"ServerNotification", func() []string {
			var out []string
			for _, m := range quiet {
				out = append(out, string(m))
			}
			return out
		}()},
		{"ServerRequest", []string{string(requestCommandApproval), string(requestFileChangeApproval), string(requestElicitation),
			string(requestPermissions), string(requestDynamicToolCall), string(requestLegacyPatch), string(requestLegacyExec)}},
		{"v2/UserInput", []string{string(inputText)}},
		{"v2/AskForApproval", []string{string(approvalUntrusted), string(approvalNever)}},
		{"v2/SandboxMode", []string{string(sandboxNone)}},
		{"v2/SandboxPolicy", []string{string(sandboxExternal)}},
		{"v2/NetworkAccess", []string{string(networkEnabled)}},
		{"v2/ApprovalsReviewer", []string{string(reviewerUser)}},
		{"CommandExecutionApprovalDecision", []string{string(decisionAccept), string(decisionDecline)}},
		{"FileChangeApprovalDecision", []string{string(decisionAccept), string(decisionDecline)}},
		{"McpServerElicitationAction", []string{string(elicitationDecline)}},
		{"PermissionGrantScope", []string{string(grantTurn)}},
		{"v2/TurnStatus", []string{string(turnCompleted), string(turnInterrupted), string(turnFailed)}},
		{"v2/CommandExecutionStatus", []string{string(itemInProgress), string(itemCompleted), string(itemFailed), string(itemDeclined)}},
		{"v2/PatchApplyStatus", []string{string(itemInProgress), string(itemCompleted), string(itemFailed), string(itemDeclined)}},
		{"v2/ThreadItem", []string{string(itemAgentMessage), string(itemReasoning), string(itemCommandExecution), string(itemFileChange),
			string(itemMcpToolCall), string(itemDynamicToolCall), string(itemWebSearch)}},
	}
	for _, tt := range tests {
		have := enums(t, tt.def)
		for _, v := range tt.values {
			if !have[v] {
				t.Errorf("%q is not a value of %s in the pinned schema", v, tt.def)
			}
		}
	}
}
