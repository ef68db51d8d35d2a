package fakemodel

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nlx-dev/nlx/internal/testtool"
)

// The helpers of this file are prefixed msgs: the package's other test
// files are another API's.

func msgsStart(t *testing.T) *Server {
	t.Helper()
	s, err := Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// msgsBody is a Messages request as Claude Code 2.1.328 makes one
// (abridged): a <system-reminder> block before the prompt, its
// environment as a message of role system, a tool call and its result
// (blocks), a deferred tool among the tools.
const msgsBody = `{"model":"claude-fake","max_tokens":128000,"stream":true,
 "system":[{"type":"text","text":"You are a Claude agent."}],
 "messages":[
  {"role":"user","content":[{"type":"text","text":"<system-reminder>\nAttribution...\n</system-reminder>\n"},{"type":"text","text":"list the files"}]},
  {"role":"system","content":"# Environment\nPrimary working directory: /w"},
  {"role":"assistant","content":[{"type":"thinking","thinking":"not a text","signature":"s"},{"type":"text","text":"Listing."},{"type":"tool_use","id":"toolu_1","name":"Bash","input":{"command":"ls"}}]},
  {"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"a.txt"}]},
  {"role":"assistant","content":"plain string content"},
  {"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_2","content":[{"type":"text","text":"block result"}],"is_error":true}]}],
 "tools":[{"name":"Bash","input_schema":{}},{"name":"Read","input_schema":{}},{"name":"DeferredToolPlaceholder","input_schema":{},"defer_loading":true}]}`

// msgsWantTexts are msgsBody's texts.
var msgsWantTexts = []string{"list the files", "Listing.", "a.txt", "plain string content", "block result"}

func msgsPost(t *testing.T, s *Server, path, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.URL()+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// msgsEvent is one server-sent event.
type msgsEvent struct {
	name string
	data map[string]any
}

// msgsStreamed is what a Messages stream said.
type msgsStreamed struct {
	names     []string
	text      string
	thinking  string
	signed    bool
	tools     []map[string]any // tool_use blocks, input read from the deltas
	stop      any              // message_delta's stop_reason
	startUse  map[string]any   // message_start's usage
	deltaUse  map[string]any   // message_delta's usage
	end       error            // how the stream ended (nil: cleanly)
	completed bool             // message_stop came
}

func msgsRead(t *testing.T, r io.Reader) msgsStreamed {
	t.Helper()
	var out msgsStreamed
	var tool map[string]any
	var partial strings.Builder
	br := bufio.NewReader(r)
	var name string
	for {
		line, err := br.ReadString('\n')
		line = strings.TrimRight(line, "\r\n")
		switch {
		case strings.HasPrefix(line, "event: "):
			name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			var data map[string]any
			if jerr := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &data); jerr != nil {
				t.Fatalf("data of %s: %v", name, jerr)
			}
			if data["type"] != name {
				t.Errorf("event %s has type %v", name, data["type"])
			}
			out.names = append(out.names, name)
			switch name {
			case "message_start":
				out.startUse, _ = data["message"].(map[string]any)["usage"].(map[string]any)
			case "content_block_start":
				if b := data["content_block"].(map[string]any); b["type"] == "tool_use" {
					tool = b
					partial.Reset()
				}
			case "content_block_delta":
				d := data["delta"].(map[string]any)
				switch d["type"] {
				case "text_delta":
					out.text += d["text"].(string)
				case "thinking_delta":
					out.thinking += d["thinking"].(string)
				case "signature_delta":
					out.signed = true
				case "input_json_delta":
					partial.WriteString(d["partial_json"].(string))
				}
			case "content_block_stop":
				if tool != nil {
					var input map[string]any
					if err := json.Unmarshal([]byte(partial.String()), &input); err != nil {
						t.Errorf("tool input %q: %v", partial.String(), err)
					}
					tool["input"] = input
					out.tools = append(out.tools, tool)
					tool = nil
				}
			case "message_delta":
				out.stop = data["delta"].(map[string]any)["stop_reason"]
				out.deltaUse, _ = data["usage"].(map[string]any)
			case "message_stop":
				out.completed = true
			}
		}
		if err == io.EOF {
			return out
		}
		if err != nil {
			out.end = err
			return out
		}
	}
}

func TestMessagesStream(t *testing.T) {
	tests := []struct {
		name      string
		reply     Reply
		names     []string
		text      string
		thinking  string
		command   string
		stop      string
		afterStop bool // a step after the command (never streamed)
	}{
		{
			name:  "text",
			reply: Reply{Steps: []Step{{Text: "Hello there, a streamed answer."}}},
			names: []string{"message_start", "content_block_start", "content_block_delta", "content_block_delta", "content_block_delta",
				"content_block_delta", "content_block_stop", "message_delta", "message_stop"},
			text: "Hello there, a streamed answer.", stop: "end_turn",
		},
		{
			name:  "thinking, text, command",
			reply: Reply{Steps: []Step{{Reasoning: "think"}, {Text: "I run it."}, {Command: "touch M"}, {Text: "never"}}},
			names: []string{"message_start",
				"content_block_start", "content_block_delta", "content_block_delta", "content_block_stop",
				"content_block_start", "content_block_delta", "content_block_delta", "content_block_stop",
				"content_block_start", "content_block_delta", "content_block_stop",
				"message_delta", "message_stop"},
			thinking: "think", text: "I run it.", command: "touch M", stop: "tool_use",
		},
		{
			name:  "a short stall",
			reply: Reply{Steps: []Step{{Text: "a"}, {Stall: 10 * time.Millisecond}, {Text: "b"}}},
			names: []string{"message_start", "content_block_start", "content_block_delta", "content_block_stop",
				"content_block_start", "content_block_delta", "content_block_stop", "message_delta", "message_stop"},
			text: "ab", stop: "end_turn",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := msgsStart(t)
			s.Push(tt.reply)
			resp := msgsPost(t, s, "/v1/messages?beta=true", msgsBody)
			if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
				t.Fatalf("status %d, content type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
			}
			got := msgsRead(t, resp.Body)
			if got.end != nil || !got.completed {
				t.Fatalf("stream ended %v, message_stop %v", got.end, got.completed)
			}
			if !slices.Equal(got.names, tt.names) {
				t.Errorf("events\n  %q\nwant\n  %q", got.names, tt.names)
			}
			if got.text != tt.text || got.thinking != tt.thinking || got.stop != tt.stop {
				t.Errorf("text %q thinking %q stop %v; want %q %q %q", got.text, got.thinking, got.stop, tt.text, tt.thinking, tt.stop)
			}
			if got.signed != (tt.thinking != "") {
				t.Errorf("signature delta %v", got.signed)
			}
			if tt.command != "" {
				if len(got.tools) != 1 || got.tools[0]["name"] != BashTool || got.tools[0]["input"].(map[string]any)["command"] != tt.command ||
					!strings.HasPrefix(got.tools[0]["id"].(string), "toolu_") {
					t.Errorf("tool calls %v: want one Bash {command: %q}", got.tools, tt.command)
				}
			} else if len(got.tools) != 0 {
				t.Errorf("tool calls %v", got.tools)
			}
			if got.startUse["input_tokens"] == nil || got.deltaUse["output_tokens"] == nil {
				t.Errorf("usage: start %v, delta %v", got.startUse, got.deltaUse)
			}
			reqs := s.Requests()
			if len(reqs) != 1 {
				t.Fatalf("%d requests", len(reqs))
			}
			r := reqs[0]
			if r.API != Messages || !r.Agent || r.Method != http.MethodPost || r.Path != "/v1/messages" {
				t.Errorf("request %s %s %s agent %v", r.API, r.Method, r.Path, r.Agent)
			}
			if !slices.Equal(r.Tools, []string{"Bash", "Read"}) {
				t.Errorf("tools %q: want Bash, Read (not the deferred placeholder)", r.Tools)
			}
			if !slices.Equal(r.Texts, msgsWantTexts) {
				t.Errorf("texts\n  %q\nwant\n  %q", r.Texts, msgsWantTexts)
			}
		})
	}
}

// msgsRequest builds a Messages request body.
func msgsRequest(maxTokens int, tools bool, last string) string {
	b := map[string]any{"model": "m", "max_tokens": maxTokens, "stream": true,
		"messages": []map[string]any{{"role": "user", "content": last}}}
	if tools {
		b["tools"] = []map[string]any{{"name": "Bash", "input_schema": map[string]any{}}}
	}
	out, _ := json.Marshal(b)
	return string(out)
}

// TestMessagesAgentRule: only agent requests take the script's replies.
func TestMessagesAgentRule(t *testing.T) {
	tests := []struct {
		name  string
		body  string
		agent bool
	}{
		{"a turn", msgsRequest(128000, true, "hello"), true},
		{"no tools (a title)", msgsRequest(512, false, "Generate a title"), false},
		{"max_tokens 1 (a quota check)", msgsRequest(1, true, "quota"), false},
		{"compaction", msgsRequest(128000, true, CompactionPrompt+"\n\n- Do NOT use Read"), false},
		{"compaction in a block", `{"model":"m","max_tokens":64000,"stream":true,"tools":[{"name":"Read"}],"messages":[{"role":"user","content":[{"type":"text","text":"` + CompactionPrompt + `"}]}]}`, false},
		{"compaction prompt earlier", `{"model":"m","max_tokens":64000,"stream":true,"tools":[{"name":"Read"}],"messages":[{"role":"user","content":"` + CompactionPrompt + `"},{"role":"assistant","content":"s"},{"role":"user","content":"go on"}]}`, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := msgsStart(t)
			s.Push(Reply{Steps: []Step{{Text: "scripted"}}})
			got := msgsRead(t, msgsPost(t, s, "/v1/messages?beta=true", tt.body).Body)
			want := AuxiliaryMessagesText
			if tt.agent {
				want = "scripted"
			}
			if got.text != want || !got.completed {
				t.Errorf("answered %q (complete %v), want %q", got.text, got.completed, want)
			}
			if r := s.Requests(); len(r) != 1 || r[0].Agent != tt.agent {
				t.Fatalf("requests %+v: want one, agent %v", r, tt.agent)
			}
			if !tt.agent {
				// The script is untouched: the next agent request takes it.
				if got := msgsRead(t, msgsPost(t, s, "/v1/messages", msgsRequest(1000, true, "x")).Body); got.text != "scripted" {
					t.Errorf("the next agent request got %q: the auxiliary one took the script", got.text)
				}
			}
		})
	}
}

// TestMessagesCountTokens calls the handler directly: Start's mux sends
// /v1/messages/count_tokens to its 404 handler (see the report).
func TestMessagesCountTokens(t *testing.T) {
	s := msgsStart(t)
	s.Push(Reply{Steps: []Step{{Text: "scripted"}}})
	w := httptest.NewRecorder()
	s.serveMessages(w, httptest.NewRequest(http.MethodPost, "/v1/messages/count_tokens?beta=true", strings.NewReader(msgsBody)))
	var got struct {
		InputTokens int64 `json:"input_tokens"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &got); w.Code != http.StatusOK || err != nil || got.InputTokens <= 0 {
		t.Fatalf("count: %d %s (%v)", w.Code, w.Body, err)
	}
	if r := s.Requests(); len(r) != 1 || r[0].Agent || len(r[0].Texts) == 0 {
		t.Fatalf("requests %+v: want one auxiliary with its texts", r)
	}
	if got := msgsRead(t, msgsPost(t, s, "/v1/messages", msgsBody).Body); got.text != "scripted" {
		t.Errorf("the agent request got %q", got.text)
	}
}

func TestMessagesNonStreaming(t *testing.T) {
	s := msgsStart(t)
	s.Push(Reply{Steps: []Step{{Reasoning: "hm"}, {Text: "Running."}, {Command: "ls"}}})
	body := strings.Replace(msgsBody, `"stream":true`, `"stream":false`, 1)
	resp := msgsPost(t, s, "/v1/messages?beta=true", body)
	var m struct {
		Type       string           `json:"type"`
		Role       string           `json:"role"`
		Content    []map[string]any `json:"content"`
		StopReason string           `json:"stop_reason"`
		Usage      map[string]any   `json:"usage"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %v", resp.StatusCode, err)
	}
	var types []string
	for _, c := range m.Content {
		types = append(types, c["type"].(string))
	}
	if m.Type != "message" || m.Role != "assistant" || m.StopReason != "tool_use" || m.Usage["output_tokens"] == nil ||
		!slices.Equal(types, []string{"thinking", "text", "tool_use"}) || m.Content[1]["text"] != "Running." ||
		!reflect.DeepEqual(m.Content[2]["input"], map[string]any{"command": "ls"}) || m.Content[2]["name"] != BashTool {
		t.Errorf("message %+v", m)
	}
	if r := s.AgentRequests(); len(r) != 1 {
		t.Errorf("%d agent requests", len(r))
	}
}

func TestMessagesFailures(t *testing.T) {
	t.Run("error", func(t *testing.T) {
		s := msgsStart(t)
		s.Push(Reply{Steps: []Step{{Error: &APIError{Status: http.StatusTooManyRequests, Type: "rate_limit_error", Message: "slow down"}}}})
		resp := msgsPost(t, s, "/v1/messages", msgsBody)
		var e struct {
			Type  string `json:"type"`
			Error struct {
				Type    string `json:"type"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusTooManyRequests || e.Type != "error" || e.Error.Type != "rate_limit_error" || e.Error.Message != "slow down" {
			t.Errorf("%d %+v", resp.StatusCode, e)
		}
	})
	t.Run("disconnect", func(t *testing.T) {
		s := msgsStart(t)
		s.Push(Reply{Steps: []Step{{Text: "partial"}, {Disconnect: true}}})
		got := msgsRead(t, msgsPost(t, s, "/v1/messages", msgsBody).Body)
		if got.completed || got.text != "partial" {
			t.Errorf("text %q, message_stop %v: want the partial text and no end", got.text, got.completed)
		}
		if got.end == nil {
			t.Errorf("the stream ended cleanly, want a broken connection")
		}
	})
	t.Run("stall released", func(t *testing.T) {
		s := msgsStart(t)
		release := make(chan struct{})
		s.Push(Reply{Steps: []Step{{Text: "a"}, {Stall: time.Minute, Release: release}, {Text: "b"}}})
		resp := msgsPost(t, s, "/v1/messages", msgsBody)
		time.AfterFunc(50*time.Millisecond, func() { close(release) })
		start := time.Now()
		got := msgsRead(t, resp.Body)
		if got.text != "ab" || !got.completed || time.Since(start) > 10*time.Second {
			t.Errorf("text %q complete %v after %v", got.text, got.completed, time.Since(start))
		}
	})
	t.Run("stall left by the client", func(t *testing.T) {
		s := msgsStart(t)
		s.Push(Reply{Steps: []Step{{Text: "a"}, {Stall: time.Minute}, {Text: "b"}}})
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.URL()+"/v1/messages", strings.NewReader(msgsBody))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		got := msgsRead(t, resp.Body)
		if got.completed || got.text != "a" || !errors.Is(got.end, context.DeadlineExceeded) {
			t.Errorf("text %q complete %v end %v", got.text, got.completed, got.end)
		}
		// The server's handler returns: Close does not wait for it.
		done := make(chan struct{})
		go func() { s.Close(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Error("the stalled handler did not end when its client left")
		}
	})
	t.Run("not JSON", func(t *testing.T) {
		s := msgsStart(t)
		resp := msgsPost(t, s, "/v1/messages", "{not json")
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("status %d", resp.StatusCode)
		}
		if r := s.Requests(); len(r) != 1 || r[0].Agent {
			t.Errorf("requests %+v: want one, not an agent request", r)
		}
	})
}

// msgsClaudeEnv is the environment TestMessagesWithRealClaude runs claude
// in: the fake model, any key, nothing but the model on the network, no
// retry or non-streaming fallback.
func msgsClaudeEnv(s *Server, home string) []string {
	return []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "CLAUDE_CONFIG_DIR=" + filepath.Join(home, "config"),
		"ANTHROPIC_API_KEY=test", "ANTHROPIC_BASE_URL=" + s.URL(),
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", "DISABLE_AUTOUPDATER=1", "DISABLE_TELEMETRY=1", "DISABLE_ERROR_REPORTING=1",
		"CLAUDE_CODE_MAX_RETRIES=0", "CLAUDE_CODE_DISABLE_NONSTREAMING_FALLBACK=1"}
}

// msgsClaudeRun is what msgsDriveClaude saw.
type msgsClaudeRun struct {
	results []map[string]any
	asked   []string // the tools asked for
	text    string   // the text deltas
	cwd     string
}

// msgsDriveClaude sends each prompt to the pinned claude in stream-json
// mode against s, allowing every tool use it asks for, until it has
// answered them all.
func msgsDriveClaude(t *testing.T, s *Server, prompts ...string) msgsClaudeRun {
	t.Helper()
	bin := testtool.NeedProvider(t, "claude")
	home, cwd := t.TempDir(), t.TempDir()
	cmd := exec.Command(bin, "-p", "--output-format", "stream-json", "--input-format", "stream-json", "--verbose",
		"--include-partial-messages", "--permission-prompt-tool", "stdio", "--tools=Bash,Read", "--setting-sources=user")
	cmd.Dir = cwd
	cmd.Env = msgsClaudeEnv(s, home)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		stdin.Close()
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("claude: %v\n%s", err, stderr.String())
			}
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			t.Errorf("claude did not exit after its stdin closed\n%s", stderr.String())
		}
	}()
	send := func(v any) {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := stdin.Write(append(b, '\n')); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range prompts {
		send(map[string]any{"type": "user", "message": map[string]any{"role": "user", "content": p}, "parent_tool_use_id": nil, "session_id": ""})
	}
	lines := make(chan map[string]any)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 64<<20)
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				lines <- m
			}
		}
	}()
	out := msgsClaudeRun{cwd: cwd}
	timeout := time.After(60 * time.Second)
	for len(out.results) < len(prompts) {
		var m map[string]any
		var ok bool
		select {
		case m, ok = <-lines:
			if !ok {
				t.Fatalf("claude's output ended after %d results\n%s", len(out.results), stderr.String())
			}
		case <-timeout:
			t.Fatalf("no result within 60s\n%s", stderr.String())
		}
		switch m["type"] {
		case "control_request":
			req := m["request"].(map[string]any)
			if req["subtype"] != "can_use_tool" {
				t.Fatalf("control request %v", req)
			}
			out.asked = append(out.asked, req["tool_name"].(string))
			send(map[string]any{"type": "control_response", "response": map[string]any{"subtype": "success", "request_id": m["request_id"],
				"response": map[string]any{"behavior": "allow", "updatedInput": req["input"]}}})
		case "stream_event":
			ev := m["event"].(map[string]any)
			if d, ok := ev["delta"].(map[string]any); ok && d["type"] == "text_delta" {
				out.text += d["text"].(string)
			}
		case "result":
			out.results = append(out.results, m)
		}
	}
	return out
}

// TestMessagesWithRealClaude drives the pinned claude against the fake: a
// shell command it asks for and is allowed, then a text. It checks the
// fake's reading of what Claude Code sends (agent requests, tools, texts)
// and that Claude Code reads what the fake streams.
func TestMessagesWithRealClaude(t *testing.T) {
	s := msgsStart(t)
	s.Push(Reply{Steps: []Step{{Reasoning: "a shell will do"}, {Text: "Making it."}, {Command: "echo made > F"}}},
		Reply{Steps: []Step{{Text: "The file is made."}}})
	got := msgsDriveClaude(t, s, "make F")
	res := got.results[0]
	if res["subtype"] != "success" || res["is_error"] != false || res["result"] != "The file is made." {
		t.Errorf("result %v", res)
	}
	if got.text != "Making it.The file is made." || !slices.Equal(got.asked, []string{"Bash"}) {
		t.Errorf("text %q, asked %q", got.text, got.asked)
	}
	if b, err := os.ReadFile(filepath.Join(got.cwd, "F")); err != nil || string(b) != "made\n" {
		t.Errorf("F: %q, %v", b, err)
	}
	agent, all := s.AgentRequests(), s.Requests()
	if len(agent) != 2 || len(all) != 2 {
		t.Fatalf("%d agent requests of %d: want 2 and no auxiliary one", len(agent), len(all))
	}
	for _, r := range agent {
		if r.Path != "/v1/messages" || !slices.Equal(r.Tools, []string{"Bash", "Read"}) || !strings.HasPrefix(r.Header.Get("User-Agent"), "claude-cli/") {
			t.Errorf("request %s tools %q agent %q", r.Path, r.Tools, r.Header.Get("User-Agent"))
		}
		if !slices.Contains(r.Texts, "make F") {
			t.Errorf("texts %q lack the prompt", r.Texts)
		}
		for _, text := range r.Texts {
			if strings.Contains(text, "system-reminder") || strings.Contains(text, "# Environment") {
				t.Errorf("texts carry an instruction: %q", text)
			}
		}
	}
	if want := []string{"make F", "Making it.", "(Bash completed with no output)"}; !slices.Equal(agent[1].Texts, want) {
		t.Errorf("second request texts %q, want %q", agent[1].Texts, want)
	}
}

// TestMessagesCompactionIsAuxiliary: /compact makes Claude Code send the
// conversation with the turn's tools and its summary instruction. It
// takes no reply of the script, and Claude Code carries on with the
// fake's summary.
func TestMessagesCompactionIsAuxiliary(t *testing.T) {
	s := msgsStart(t)
	s.Push(Reply{Steps: []Step{{Text: "first answer"}}}, Reply{Steps: []Step{{Text: "after the compaction"}}})
	got := msgsDriveClaude(t, s, "first question", "/compact", "go on")
	for i, res := range got.results {
		if res["is_error"] != false {
			t.Errorf("result %d: %v", i, res)
		}
	}
	if got.results[2]["result"] != "after the compaction" {
		t.Errorf("the turn after the compaction answered %v", got.results[2]["result"])
	}
	var aux []Request
	for _, r := range s.Requests() {
		if !r.Agent {
			aux = append(aux, r)
		}
	}
	if len(aux) == 0 || len(s.AgentRequests()) != 2 {
		t.Fatalf("%d auxiliary and %d agent requests: want the compaction auxiliary", len(aux), len(s.AgentRequests()))
	}
	for _, r := range aux {
		if len(r.Tools) == 0 || len(r.Texts) == 0 || !strings.HasPrefix(r.Texts[len(r.Texts)-1], CompactionPrompt) {
			t.Errorf("auxiliary request tools %q, last text %.60q", r.Tools, fmt.Sprint(r.Texts))
		}
	}
	last := s.AgentRequests()[1].Texts
	if !strings.Contains(strings.Join(last, "\n"), AuxiliaryMessagesText) || !slices.Contains(last, "go on") {
		t.Errorf("the turn after the compaction sent %q: want the fake's summary and the prompt", last)
	}
}
