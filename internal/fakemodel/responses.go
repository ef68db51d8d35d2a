package fakemodel

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"time"
)

// The Responses API as Codex streams it (POST /v1/responses, stream:
// true): the request's input is a list of items (messages with a role and
// content parts, function calls, their outputs, reasoning); the answer is a
// stream of server-sent events, response.created first and
// response.completed (with the usage) last. The responses and items
// carry no status member: Codex does not read one.
//
// Which requests are agent ones: Codex names what each request is for in
// its x-codex-turn-metadata header, a JSON object whose request_kind is
// "turn" for a turn of the conversation (the first request of a turn and
// each one after a tool call) and another value for the requests it makes
// on the side: a context compaction is a POST /v1/responses of
// request_kind "compaction", without tools, whose last user message asks
// for a handoff summary. A request whose header is absent (a plain
// client) or names no kind is an agent request too. Codex 0.169.0 with a
// custom provider made no other request in the tests: no title, model
// list, quota or websocket request. An auxiliary request is answered with
// AuxiliaryText (the compaction's summary), and takes nothing of the
// script.

// AuxiliaryText is the text an auxiliary request is answered with.
const AuxiliaryText = "(the fake model's summary)"

// turnMetadataHeader is the header Codex describes a request in.
const turnMetadataHeader = "X-Codex-Turn-Metadata"

// requestKindTurn is request_kind of a turn's request.
const requestKindTurn = "turn"

// responsesRequest is the part of a Responses API request the fake reads.
type responsesRequest struct {
	Model string          `json:"model"`
	Input json.RawMessage `json:"input"`
	Tools []responsesTool `json:"tools"`
}

type responsesTool struct {
	Type string `json:"type"`
	Name string `json:"name"`
	// Tools are a namespace's functions (Codex offers each MCP server's
	// tools so).
	Tools []responsesTool `json:"tools"`
}

// responsesItem is one input item: a message (role, content), a function
// call's output, or anything else (skipped).
type responsesItem struct {
	Type    string          `json:"type"`
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
	Output  json.RawMessage `json:"output"`
}

type responsesPart struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// isAgentResponses reports whether a Responses request is a turn of the
// conversation (see the rule above).
func isAgentResponses(h http.Header) bool {
	raw := h.Get(turnMetadataHeader)
	if raw == "" {
		return true
	}
	var meta struct {
		RequestKind string `json:"request_kind"`
	}
	if json.Unmarshal([]byte(raw), &meta) != nil || meta.RequestKind == "" {
		return true
	}
	return meta.RequestKind == requestKindTurn
}

// responsesTexts are the texts of a request's input in order: user and
// assistant message texts, function call outputs. Developer and system
// messages (the instructions) are left out.
func responsesTexts(input json.RawMessage) ([]string, error) {
	if len(input) == 0 || string(input) == "null" {
		return nil, nil
	}
	var s string
	if json.Unmarshal(input, &s) == nil {
		return []string{s}, nil
	}
	var items []responsesItem
	if err := json.Unmarshal(input, &items); err != nil {
		return nil, fmt.Errorf("fake model: responses input: %w", err)
	}
	var out []string
	for _, it := range items {
		switch {
		case it.Type == "function_call_output" || it.Type == "custom_tool_call_output":
			out = append(out, contentTexts(it.Output)...)
		case (it.Type == "message" || it.Type == "") && (it.Role == "user" || it.Role == "assistant"):
			out = append(out, contentTexts(it.Content)...)
		}
	}
	return out, nil
}

// contentTexts reads content that is a string or a list of parts with a
// text.
func contentTexts(raw json.RawMessage) []string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []string{s}
	}
	var parts []responsesPart
	if json.Unmarshal(raw, &parts) != nil {
		return nil
	}
	var out []string
	for _, p := range parts {
		if p.Text != "" {
			out = append(out, p.Text)
		}
	}
	return out
}

// responsesSeq numbers the ids of streamed responses and items across the
// server's life, so that no two are alike.
var responsesSeq atomic.Int64

// serveResponses serves the Responses API: it records the request, takes
// the script's next reply for an agent request, and streams it.
func (s *Server) serveResponses(w http.ResponseWriter, r *http.Request) {
	body, err := readBody(r)
	if err != nil {
		writeError(w, Responses, &APIError{Status: http.StatusBadRequest, Type: "invalid_request_error", Message: err.Error()})
		return
	}
	req := Request{API: Responses, Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Body: jsonOrNull(body)}
	var rr responsesRequest
	if err := json.Unmarshal(body, &rr); err != nil {
		s.record(req)
		writeError(w, Responses, &APIError{Status: http.StatusBadRequest, Type: "invalid_request_error", Message: fmt.Sprintf("%v: %v", errNotJSON, err)})
		return
	}
	texts, err := responsesTexts(rr.Input)
	if err != nil {
		s.record(req)
		writeError(w, Responses, &APIError{Status: http.StatusBadRequest, Type: "invalid_request_error", Message: err.Error()})
		return
	}
	req.Texts = texts
	req.Tools = responsesToolNames(rr.Tools)
	req.Agent = isAgentResponses(r.Header)
	reply := s.record(req)
	if !req.Agent {
		reply = Reply{Steps: []Step{{Text: AuxiliaryText}}}
	}
	if len(reply.Steps) > 0 && reply.Steps[0].Error != nil {
		writeError(w, Responses, reply.Steps[0].Error)
		return
	}
	streamResponses(w, r, rr.Model, len(body), reply)
}

// responsesToolNames are the names of the tools a request offers: a
// tool's name (its type when it has none), and for a namespace of MCP
// tools (mcp__SERVER) each of its functions as mcp__SERVER__TOOL.
func responsesToolNames(tools []responsesTool) []string {
	var out []string
	for _, t := range tools {
		name := t.Name
		if name == "" {
			name = t.Type
		}
		if t.Type == "namespace" && strings.HasPrefix(name, mcpPrefix) {
			for _, f := range t.Tools {
				out = append(out, name+mcpDelimiter+f.Name)
			}
			continue
		}
		out = append(out, name)
	}
	return out
}

// tokens is a stand-in token count of a text: a token per four bytes,
// at least one.
func tokens(n int) int64 { return int64(n/4 + 1) }

// streamResponses streams reply as a Responses API event stream. The usage
// counts a token per four bytes: of the request body (input) and of what
// was streamed (output).
func streamResponses(w http.ResponseWriter, r *http.Request, model string, bodyLen int, reply Reply) {
	n := responsesSeq.Add(1)
	respID := fmt.Sprintf("resp_%d", n)
	e := newSSE(w)
	created := map[string]any{"id": respID, "object": "response", "created_at": time.Now().Unix(),
		"model": model, "output": []any{}}
	if e.event("response.created", map[string]any{"type": "response.created", "response": created}) != nil {
		return
	}
	var out, reasoning int
	index := 0
	itemID := func(prefix string) string { return fmt.Sprintf("%s_%d_%d", prefix, n, index) }
steps:
	for _, st := range reply.Steps {
		var err error
		switch {
		case st.Disconnect:
			disconnect(w)
			return
		case st.Stall > 0 || st.Release != nil:
			d := st.Stall
			if d <= 0 {
				d = time.Hour
			}
			if !stall(r.Context(), d, st.Release) {
				return
			}
		case st.Text != "":
			out += len(st.Text)
			err = streamMessage(e, index, itemID("msg"), st.Text)
			index++
		case st.Reasoning != "":
			reasoning += len(st.Reasoning)
			err = streamReasoning(e, index, itemID("rs"), st.Reasoning)
			index++
		case st.Command != "" || st.Call != nil:
			namespace, name, args := responsesCall(st)
			out += len(args)
			err = streamFunctionCall(e, index, itemID("fc"), itemID("call"), namespace, name, args)
			index++
			if err == nil {
				break steps // the provider runs it, or not, and asks again
			}
		case st.Error != nil:
			// An error after the stream began (not its first step): the
			// API's failure event ends it.
			_ = e.event("response.failed", map[string]any{"type": "response.failed", "response": map[string]any{
				"id": respID, "object": "response",
				"error": map[string]any{"code": st.Error.Type, "message": st.Error.Message}}})
			return
		}
		if err != nil {
			return
		}
	}
	in, outTokens := tokens(bodyLen), tokens(out+reasoning)
	usage := map[string]any{
		"input_tokens":          in,
		"input_tokens_details":  map[string]int64{"cached_tokens": 0},
		"output_tokens":         outTokens,
		"output_tokens_details": map[string]int64{"reasoning_tokens": int64(reasoning / 4)},
		"total_tokens":          in + outTokens,
	}
	_ = e.event("response.completed", map[string]any{"type": "response.completed", "response": map[string]any{
		"id": respID, "object": "response", "created_at": time.Now().Unix(),
		"model": model, "usage": usage}})
}

// streamMessage streams an assistant message item with text deltas.
func streamMessage(e *sse, index int, id, text string) error {
	item := map[string]any{"type": "message", "id": id, "role": "assistant", "content": []any{}}
	if err := e.event("response.output_item.added", map[string]any{"type": "response.output_item.added", "output_index": index, "item": item}); err != nil {
		return err
	}
	part := map[string]any{"type": "output_text", "text": "", "annotations": []any{}}
	if err := e.event("response.content_part.added", map[string]any{"type": "response.content_part.added", "item_id": id,
		"output_index": index, "content_index": 0, "part": part}); err != nil {
		return err
	}
	for _, d := range chunks(text) {
		if err := e.event("response.output_text.delta", map[string]any{"type": "response.output_text.delta", "item_id": id,
			"output_index": index, "content_index": 0, "delta": d}); err != nil {
			return err
		}
	}
	if err := e.event("response.output_text.done", map[string]any{"type": "response.output_text.done", "item_id": id,
		"output_index": index, "content_index": 0, "text": text}); err != nil {
		return err
	}
	done := map[string]any{"type": "message", "id": id, "role": "assistant",
		"content": []any{map[string]any{"type": "output_text", "text": text, "annotations": []any{}}}}
	return e.event("response.output_item.done", map[string]any{"type": "response.output_item.done", "output_index": index, "item": done})
}

// streamReasoning streams a reasoning item with summary text deltas.
func streamReasoning(e *sse, index int, id, text string) error {
	item := map[string]any{"type": "reasoning", "id": id, "summary": []any{}}
	if err := e.event("response.output_item.added", map[string]any{"type": "response.output_item.added", "output_index": index, "item": item}); err != nil {
		return err
	}
	if err := e.event("response.reasoning_summary_part.added", map[string]any{"type": "response.reasoning_summary_part.added",
		"item_id": id, "output_index": index, "summary_index": 0, "part": map[string]any{"type": "summary_text", "text": ""}}); err != nil {
		return err
	}
	for _, d := range chunks(text) {
		if err := e.event("response.reasoning_summary_text.delta", map[string]any{"type": "response.reasoning_summary_text.delta",
			"item_id": id, "output_index": index, "summary_index": 0, "delta": d}); err != nil {
			return err
		}
	}
	if err := e.event("response.reasoning_summary_text.done", map[string]any{"type": "response.reasoning_summary_text.done",
		"item_id": id, "output_index": index, "summary_index": 0, "text": text}); err != nil {
		return err
	}
	done := map[string]any{"type": "reasoning", "id": id, "summary": []any{map[string]any{"type": "summary_text", "text": text}}}
	return e.event("response.output_item.done", map[string]any{"type": "response.output_item.done", "output_index": index, "item": done})
}

// responsesCall is the function a Command or Call step calls and its
// arguments: Codex's shell tool, exec_command {"cmd": command}, or the
// call's tool, split into Codex's namespace (mcp__SERVER) and the
// function's name when it is an MCP tool's.
func responsesCall(st Step) (namespace, name, args string) {
	if st.Call == nil {
		b, _ := json.Marshal(map[string]string{"cmd": st.Command})
		return "", ExecCommand, string(b)
	}
	namespace, name = splitMCPName(st.Call.Name)
	return namespace, name, string(st.Call.arguments())
}

// splitMCPName splits mcp__SERVER__TOOL into its namespace (mcp__SERVER)
// and the tool; any other name has no namespace.
func splitMCPName(full string) (namespace, name string) {
	rest, ok := strings.CutPrefix(full, mcpPrefix)
	if !ok {
		return "", full
	}
	server, tool, ok := strings.Cut(rest, mcpDelimiter)
	if !ok || server == "" || tool == "" {
		return "", full
	}
	return mcpPrefix + server, tool
}

// How MCP tools are named: mcp__SERVER__TOOL (Claude Code's names, and
// Codex's namespace and function joined).
const (
	mcpPrefix    = "mcp__"
	mcpDelimiter = "__"
)

// streamFunctionCall streams a function call, of a namespace when
// namespace is set.
func streamFunctionCall(e *sse, index int, id, callID, namespace, name, args string) error {
	item := map[string]any{"type": "function_call", "id": id, "call_id": callID, "name": name, "arguments": ""}
	if namespace != "" {
		item["namespace"] = namespace
	}
	if err := e.event("response.output_item.added", map[string]any{"type": "response.output_item.added", "output_index": index, "item": item}); err != nil {
		return err
	}
	if err := e.event("response.function_call_arguments.delta", map[string]any{"type": "response.function_call_arguments.delta",
		"item_id": id, "output_index": index, "delta": args}); err != nil {
		return err
	}
	if err := e.event("response.function_call_arguments.done", map[string]any{"type": "response.function_call_arguments.done",
		"item_id": id, "output_index": index, "arguments": args}); err != nil {
		return err
	}
	done := map[string]any{"type": "function_call", "id": id, "call_id": callID, "name": name, "arguments": args}
	if namespace != "" {
		done["namespace"] = namespace
	}
	return e.event("response.output_item.done", map[string]any{"type": "response.output_item.done", "output_index": index, "item": done})
}

// ExecCommand is the name of Codex's shell tool, which a Step.Command
// calls.
const ExecCommand = "exec_command"
