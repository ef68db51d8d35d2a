package fakemodel

import (
	"encoding/json"
	"slices"
	"testing"
)

// MCP tools as the providers offer them: Codex as functions of a
// namespace (mcp__SERVER), Claude Code as mcp__SERVER__TOOL, deferred when
// an MCP server added it while the session ran, until a tool_reference
// loads it.

func TestResponsesCall(t *testing.T) {
	tests := []struct {
		name, call    string
		wantNamespace any // nil: no namespace member
		wantName      string
	}{
		{name: "an MCP tool", call: "mcp__nlx__files__read", wantNamespace: "mcp__nlx", wantName: "files__read"},
		{name: "a plain function", call: "view_image", wantNamespace: nil, wantName: "view_image"},
		{name: "no tool after the server", call: "mcp__nlx", wantNamespace: nil, wantName: "mcp__nlx"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := start(t)
			s.Push(Reply{Steps: []Step{{Text: "calling"}, {Call: &Call{Name: tt.call, Arguments: json.RawMessage(`{"path":"a.txt"}`)}}, {Text: "never"}}})
			got := readStream(t, post(t, s, requestBody, nil))
			if got.end != nil || got.text != "calling" {
				t.Fatalf("stream ended %v with text %q: want a clean end after the call", got.end, got.text)
			}
			if len(got.calls) != 1 {
				t.Fatalf("calls %v, want one", got.calls)
			}
			c := got.calls[0]
			if c["name"] != tt.wantName || c["namespace"] != tt.wantNamespace || c["arguments"] != `{"path":"a.txt"}` {
				t.Errorf("call %v, want name %q namespace %v and the arguments", c, tt.wantName, tt.wantNamespace)
			}
		})
	}
}

func TestResponsesNamespaceTools(t *testing.T) {
	s := start(t)
	body := `{"model":"m","stream":true,"input":"hi","tools":[{"type":"function","name":"exec_command"},
	 {"type":"namespace","name":"multi_agent_v1","tools":[{"type":"function","name":"spawn"}]},
	 {"type":"namespace","name":"mcp__nlx","tools":[{"type":"function","name":"echo__echo"},{"type":"function","name":"nlx_report"}]}]}`
	readStream(t, post(t, s, body, nil))
	want := []string{"exec_command", "multi_agent_v1", "mcp__nlx__echo__echo", "mcp__nlx__nlx_report"}
	if got := s.Requests()[0].Tools; !slices.Equal(got, want) {
		t.Errorf("tools %q, want %q", got, want)
	}
}

func TestMessagesCall(t *testing.T) {
	s := msgsStart(t)
	s.Push(Reply{Steps: []Step{{Call: &Call{Name: "mcp__nlx__echo__echo", Arguments: json.RawMessage(`{"text":"hi"}`)}}, {Text: "never"}}})
	got := msgsRead(t, msgsPost(t, s, "/v1/messages", msgsBody).Body)
	if got.stop != messagesToolUse || len(got.tools) != 1 || got.text != "" {
		t.Fatalf("stop %v tools %v text %q: want one tool use and the reply's end", got.stop, got.tools, got.text)
	}
	if c := got.tools[0]; c["name"] != "mcp__nlx__echo__echo" || c["input"].(map[string]any)["text"] != "hi" {
		t.Errorf("tool use %v", c)
	}
}

func TestMessagesDeferredToolLoaded(t *testing.T) {
	s := msgsStart(t)
	body := `{"model":"m","max_tokens":100,"stream":true,"messages":[
	  {"role":"user","content":"again"},
	  {"role":"system","content":[{"type":"text","text":"The following tools just became available and are ready to use:\nmcp__nlx__second"},
	    {"type":"tool_addition","tool":{"type":"tool_reference","name":"mcp__nlx__second"}}]}],
	 "tools":[{"name":"Read","input_schema":{}},{"name":"DeferredToolPlaceholder","input_schema":{},"defer_loading":true},
	  {"name":"mcp__nlx__second","input_schema":{},"defer_loading":true},{"name":"mcp__nlx__third","input_schema":{},"defer_loading":true}]}`
	msgsRead(t, msgsPost(t, s, "/v1/messages", body).Body)
	want := []string{"Read", "mcp__nlx__second"}
	if got := s.Requests()[0].Tools; !slices.Equal(got, want) {
		t.Errorf("tools %q, want %q: a deferred tool counts once a tool_reference loads it", got, want)
	}
}
