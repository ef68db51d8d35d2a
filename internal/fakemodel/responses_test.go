package fakemodel

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nlx-dev/nlx/internal/testtool"
)

func start(t *testing.T) *Server {
	t.Helper()
	s, err := Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// sseEvent is one server-sent event.
type sseEvent struct {
	name string
	data map[string]any
}

// readSSE reads events until the stream ends; err is how it ended (nil
// at a clean end).
func readSSE(r io.Reader, each func(sseEvent)) error {
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
				return fmt.Errorf("data of %s: %w", name, jerr)
			}
			each(sseEvent{name: name, data: data})
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// requestBody is a Responses request as Codex makes one.
const requestBody = `{"model":"gpt-fake","stream":true,"input":[
 {"type":"message","role":"developer","content":[{"type":"input_text","text":"You are a coding agent."}]},
 {"type":"message","role":"user","content":[{"type":"input_text","text":"hello"}]},
 {"type":"message","role":"assistant","content":[{"type":"output_text","text":"hi back"}]},
 {"type":"reasoning","id":"rs_1","summary":[{"type":"summary_text","text":"not a text of the conversation"}]},
 {"type":"function_call","id":"fc_1","call_id":"call_1","name":"exec_command","arguments":"{\"cmd\":\"ls\"}"},
 {"type":"function_call_output","call_id":"call_1","output":"a.txt"},
 {"role":"user","content":"plain string content"}],
 "tools":[{"type":"function","name":"exec_command"},{"type":"web_search"}]}`

func post(t *testing.T, s *Server, body string, header http.Header) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.URL()+"/v1/responses", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// streamed is what a response stream said.
type streamed struct {
	names     []string
	text      string
	reasoning string
	calls     []map[string]any // function_call items done
	usage     map[string]any
	end       error
}

func readStream(t *testing.T, resp *http.Response) streamed {
	t.Helper()
	var s streamed
	s.end = readSSE(resp.Body, func(e sseEvent) {
		s.names = append(s.names, e.name)
		if e.data["type"] != e.name {
			t.Errorf("event %s has type %v", e.name, e.data["type"])
		}
		switch e.name {
		case "response.output_text.delta":
			s.text += e.data["delta"].(string)
		case "response.reasoning_summary_text.delta":
			s.reasoning += e.data["delta"].(string)
		case "response.output_item.done":
			if item := e.data["item"].(map[string]any); item["type"] == "function_call" {
				s.calls = append(s.calls, item)
			}
		case "response.completed":
			s.usage, _ = e.data["response"].(map[string]any)["usage"].(map[string]any)
		}
	})
	return s
}

func TestResponsesStream(t *testing.T) {
	tests := []struct {
		name      string
		steps     []Step
		text      string
		reasoning string
		command   string
	}{
		{name: "text", steps: []Step{{Text: "Hello there, my friend."}}, text: "Hello there, my friend."},
		{name: "reasoning then text", steps: []Step{{Reasoning: "let me think"}, {Text: "42"}}, text: "42", reasoning: "let me think"},
		{name: "command ends the reply", steps: []Step{{Text: "running it"}, {Command: "touch M"}, {Text: "never"}}, text: "running it", command: "touch M"},
		{name: "empty script answers ok", text: "ok"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := start(t)
			if tt.steps != nil {
				s.Push(Reply{Steps: tt.steps})
			}
			resp := post(t, s, requestBody, nil)
			if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
				t.Fatalf("status %d, content type %s", resp.StatusCode, resp.Header.Get("Content-Type"))
			}
			got := readStream(t, resp)
			if got.end != nil {
				t.Fatalf("stream ended with %v", got.end)
			}
			if got.names[0] != "response.created" || got.names[len(got.names)-1] != "response.completed" {
				t.Errorf("events %v: want response.created first, response.completed last", got.names)
			}
			if got.text != tt.text || got.reasoning != tt.reasoning {
				t.Errorf("text %q reasoning %q, want %q %q", got.text, got.reasoning, tt.text, tt.reasoning)
			}
			if n := strings.Count(strings.Join(got.names, " "), "response.output_text.delta"); len(tt.text) > 8 && n < 2 {
				t.Errorf("%d text deltas for %q, want several", n, tt.text)
			}
			switch {
			case tt.command == "" && len(got.calls) != 0:
				t.Errorf("calls %v, want none", got.calls)
			case tt.command != "":
				if len(got.calls) != 1 || got.calls[0]["name"] != ExecCommand {
					t.Fatalf("calls %v, want one %s", got.calls, ExecCommand)
				}
				var args map[string]string
				if err := json.Unmarshal([]byte(got.calls[0]["arguments"].(string)), &args); err != nil || args["cmd"] != tt.command {
					t.Errorf("arguments %v (%v), want cmd %q", got.calls[0]["arguments"], err, tt.command)
				}
				if got.calls[0]["call_id"] == "" {
					t.Errorf("no call_id in %v", got.calls[0])
				}
			}
			if got.usage["input_tokens"].(float64) <= 0 || got.usage["output_tokens"].(float64) <= 0 {
				t.Errorf("usage %v", got.usage)
			}
			reqs := s.Requests()
			if len(reqs) != 1 {
				t.Fatalf("%d requests recorded", len(reqs))
			}
			r := reqs[0]
			if r.API != Responses || !r.Agent || r.Method != http.MethodPost || r.Path != "/v1/responses" {
				t.Errorf("request %+v", r)
			}
			if want := []string{"hello", "hi back", "a.txt", "plain string content"}; !slices.Equal(r.Texts, want) {
				t.Errorf("texts %q, want %q", r.Texts, want)
			}
			if want := []string{"exec_command", "web_search"}; !slices.Equal(r.Tools, want) {
				t.Errorf("tools %q, want %q", r.Tools, want)
			}
		})
	}
}

func TestResponsesAgentRule(t *testing.T) {
	tests := []struct {
		meta  string // the x-codex-turn-metadata header, "" for none
		agent bool
	}{
		{"", true},
		{`{"request_kind":"turn","thread_id":"t"}`, true},
		{`{"thread_id":"t"}`, true},
		{`not json`, true},
		{`{"request_kind":"compaction"}`, false},
		{`{"request_kind":"title"}`, false},
	}
	for _, tt := range tests {
		t.Run(tt.meta, func(t *testing.T) {
			s := start(t)
			s.Push(Reply{Steps: []Step{{Text: "scripted"}}})
			h := http.Header{}
			if tt.meta != "" {
				h.Set("X-Codex-Turn-Metadata", tt.meta)
			}
			got := readStream(t, post(t, s, requestBody, h))
			if r := s.Requests(); len(r) != 1 || r[0].Agent != tt.agent {
				t.Fatalf("requests %+v, want one with Agent %v", r, tt.agent)
			}
			if tt.agent != (got.text == "scripted") {
				t.Errorf("text %q: an agent request takes the script's reply, an auxiliary one does not", got.text)
			}
			if !tt.agent {
				// The reply is still there for the next agent request.
				if next := readStream(t, post(t, s, requestBody, nil)); next.text != "scripted" {
					t.Errorf("next agent request got %q", next.text)
				}
			}
			if n := len(s.AgentRequests()); tt.agent && n != 1 {
				t.Errorf("%d agent requests", n)
			}
		})
	}
}

func TestResponsesFailures(t *testing.T) {
	t.Run("API error", func(t *testing.T) {
		s := start(t)
		s.Push(Reply{Steps: []Step{{Error: &APIError{Status: http.StatusTooManyRequests, Type: "rate_limit_exceeded", Message: "slow down"}}}})
		resp := post(t, s, requestBody, nil)
		var body struct {
			Error struct{ Type, Message, Code string }
		}
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusTooManyRequests || body.Error.Message != "slow down" || body.Error.Type != "rate_limit_exceeded" {
			t.Errorf("status %d body %+v", resp.StatusCode, body)
		}
	})
	t.Run("disconnect", func(t *testing.T) {
		s := start(t)
		s.Push(Reply{Steps: []Step{{Text: "part"}, {Disconnect: true}}})
		got := readStream(t, post(t, s, requestBody, nil))
		if got.text != "part" || slices.Contains(got.names, "response.completed") {
			t.Errorf("text %q events %v: want the part, no completion", got.text, got.names)
		}
		if got.end == nil {
			t.Errorf("the stream ended cleanly, want a cut connection")
		}
	})
	t.Run("stall released", func(t *testing.T) {
		s := start(t)
		release := make(chan struct{})
		s.Push(Reply{Steps: []Step{{Text: "before"}, {Stall: time.Hour, Release: release}, {Text: " after"}}})
		resp := post(t, s, requestBody, nil)
		time.AfterFunc(200*time.Millisecond, func() { close(release) })
		start := time.Now()
		got := readStream(t, resp)
		if got.text != "before after" || got.end != nil || time.Since(start) < 150*time.Millisecond {
			t.Errorf("text %q end %v after %v", got.text, got.end, time.Since(start))
		}
	})
	t.Run("stall ends with the client", func(t *testing.T) {
		s := start(t)
		s.Push(Reply{Steps: []Step{{Text: "before"}, {Stall: time.Hour}}})
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.URL()+"/v1/responses", strings.NewReader(requestBody))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		got := readStream(t, resp)
		if got.text != "before" || got.end == nil {
			t.Errorf("text %q end %v", got.text, got.end)
		}
		// The stall ended with the client: nothing keeps Close waiting.
		time.Sleep(50 * time.Millisecond)
		closing := time.Now()
		s.Close()
		if d := time.Since(closing); d > 500*time.Millisecond {
			t.Errorf("Close took %v: the stalled handler outlived its client", d)
		}
	})
	t.Run("not JSON", func(t *testing.T) {
		s := start(t)
		resp := post(t, s, "{not json", nil)
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("status %d", resp.StatusCode)
		}
		if r := s.Requests(); len(r) != 1 || r[0].Agent {
			t.Errorf("requests %+v: want one, not an agent request", r)
		}
	})
}

// codexTurn is what driveCodex saw of a turn.
type codexTurn struct {
	status    string // turn/completed's
	text      string // the agent message deltas
	approvals int
	cwd       string
}

// driveCodex runs one turn of the pinned codex app-server against s,
// configured through $CODEX_HOME/config.toml (extra prepended to the fake
// provider's settings), accepting every command approval.
func driveCodex(t *testing.T, s *Server, extra, prompt string) codexTurn {
	t.Helper()
	bin := testtool.NeedProvider(t, "codex")
	home, cwd := t.TempDir(), t.TempDir()
	config := extra + fmt.Sprintf(`model = "gpt-fake"
model_provider = "fake"
[model_providers.fake]
name = "fake"
base_url = "%s/v1"
wire_api = "responses"
env_key = "OPENAI_API_KEY"
supports_websockets = false
stream_max_retries = 0
request_max_retries = 0
`, s.URL())
	if err := os.WriteFile(filepath.Join(home, "config.toml"), []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "app-server")
	cmd.Dir = cwd
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "CODEX_HOME=" + home, "OPENAI_API_KEY=test"}
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
		if err := cmd.Wait(); err != nil {
			t.Errorf("codex: %v\n%s", err, stderr.String())
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
	type msg struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params json.RawMessage `json:"params"`
		Result json.RawMessage `json:"result"`
		Error  json.RawMessage `json:"error"`
	}
	lines := make(chan msg)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 64<<20)
		for sc.Scan() {
			var m msg
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				lines <- m
			}
		}
	}()
	send(map[string]any{"method": "initialize", "id": 1, "params": map[string]any{"clientInfo": map[string]string{"name": "nlx-test", "version": "0"}}})
	out := codexTurn{cwd: cwd}
	timeout := time.After(60 * time.Second)
	for {
		var m msg
		var ok bool
		select {
		case m, ok = <-lines:
			if !ok {
				t.Fatalf("codex's output ended before turn/completed\n%s", stderr.String())
			}
		case <-timeout:
			t.Fatalf("no turn/completed within 60s\n%s", stderr.String())
		}
		switch {
		case string(m.ID) == "1" && m.Method == "":
			send(map[string]any{"method": "initialized"})
			send(map[string]any{"method": "thread/start", "id": 2, "params": map[string]any{"cwd": cwd, "approvalPolicy": "untrusted", "sandbox": "danger-full-access"}})
		case string(m.ID) == "2" && m.Method == "":
			var r struct{ Thread struct{ ID string } }
			if err := json.Unmarshal(m.Result, &r); err != nil || r.Thread.ID == "" {
				t.Fatalf("thread/start: %s %s", m.Result, m.Error)
			}
			send(map[string]any{"method": "turn/start", "id": 3, "params": map[string]any{"threadId": r.Thread.ID,
				"input": []map[string]string{{"type": "text", "text": prompt}}}})
		case m.Method == "item/commandExecution/requestApproval":
			out.approvals++
			send(map[string]any{"id": m.ID, "result": map[string]string{"decision": "accept"}})
		case m.Method == "item/agentMessage/delta":
			var d struct{ Delta string }
			if err := json.Unmarshal(m.Params, &d); err != nil {
				t.Fatal(err)
			}
			out.text += d.Delta
		case m.Method == "turn/completed":
			var c struct{ Turn struct{ Status string } }
			if err := json.Unmarshal(m.Params, &c); err != nil {
				t.Fatal(err)
			}
			out.status = c.Turn.Status
			return out
		}
	}
}

// TestResponsesWithRealCodex drives the pinned codex app-server against
// the fake: a shell command the client accepts, then a text. It checks
// the fake's reading of what Codex sends (agent requests, tools, texts)
// and that Codex reads what the fake streams.
func TestResponsesWithRealCodex(t *testing.T) {
	s := start(t)
	s.Push(Reply{Steps: []Step{{Reasoning: "a shell will do"}, {Command: "echo made > F"}}}, Reply{Steps: []Step{{Text: "The file is made."}}})
	got := driveCodex(t, s, "", "make F")
	if got.status != "completed" || got.text != "The file is made." || got.approvals != 1 {
		t.Errorf("turn %+v", got)
	}
	if b, err := os.ReadFile(filepath.Join(got.cwd, "F")); err != nil || string(b) != "made\n" {
		t.Errorf("F: %q, %v", b, err)
	}
	agent := s.AgentRequests()
	if len(agent) != 2 || len(s.Requests()) != 2 {
		t.Fatalf("%d agent requests of %d: want 2 and no auxiliary one", len(agent), len(s.Requests()))
	}
	for _, r := range agent {
		if !strings.Contains(r.Header.Get("X-Codex-Turn-Metadata"), `"request_kind":"turn"`) || !slices.Contains(r.Tools, ExecCommand) {
			t.Errorf("request metadata %s tools %q", r.Header.Get("X-Codex-Turn-Metadata"), r.Tools)
		}
	}
	if !slices.Contains(agent[0].Texts, "make F") {
		t.Errorf("first request texts %q lack the prompt", agent[0].Texts)
	}
	second := agent[1].Texts
	if !slices.Contains(second, "make F") || !strings.Contains(strings.Join(second, "\n"), "Process exited with code 0") {
		t.Errorf("second request texts %q: want the prompt and the command's output", second)
	}
}

// TestResponsesCompactionIsAuxiliary: Codex's context compaction (forced
// by a limit of one token: Codex compacts before the follow-up request)
// is a POST /v1/responses of request_kind "compaction". It takes no reply
// of the script, and Codex goes on with the summary the fake gave.
func TestResponsesCompactionIsAuxiliary(t *testing.T) {
	s := start(t)
	s.Push(Reply{Steps: []Step{{Command: "echo made > F"}}}, Reply{Steps: []Step{{Text: "The file is made."}}})
	got := driveCodex(t, s, "model_auto_compact_token_limit = 1\n", "make F")
	if got.status != "completed" || got.text != "The file is made." {
		t.Errorf("turn %+v", got)
	}
	agent, all := s.AgentRequests(), s.Requests()
	if len(agent) != 2 || len(all) != 3 || all[1].Agent {
		t.Fatalf("%d agent requests of %d: want the call's, a compaction, its outcome's", len(agent), len(all))
	}
	aux := all[1]
	if aux.Path != "/v1/responses" || !strings.Contains(aux.Header.Get("X-Codex-Turn-Metadata"), `"request_kind":"compaction"`) || len(aux.Tools) != 0 {
		t.Errorf("auxiliary request %s metadata %s tools %q, want a compaction without tools", aux.Path, aux.Header.Get("X-Codex-Turn-Metadata"), aux.Tools)
	}
	if after := strings.Join(agent[1].Texts, "\n"); !strings.Contains(after, AuxiliaryText) {
		t.Errorf("the request after the compaction lacks its summary %q: %q", AuxiliaryText, agent[1].Texts)
	}
}
