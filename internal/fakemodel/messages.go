package fakemodel

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
)

// The Messages API as Claude Code streams it (POST /v1/messages?beta=true,
// stream: true): the request carries the conversation in messages (each a
// role and content, a string or a list of blocks: text, thinking,
// tool_use, tool_result), the tools it offers and the system prompt; the
// answer is a stream of server-sent events: message_start (with the input
// usage), per content block content_block_start, content_block_delta
// (text_delta, thinking_delta and signature_delta, input_json_delta),
// content_block_stop, then message_delta (stop_reason, output usage) and
// message_stop. A request with stream false (Claude Code's non-streaming
// fallback after a failed stream) is answered with the whole message as
// one JSON object.
//
// Which requests are agent ones. Claude Code 2.1.328 in print mode sends
// only the turn's requests when its non-essential traffic is off, and a
// HEAD /api/hello reachability probe besides when it is not (served by the
// server's 404 handler). The side requests its code can make are told
// apart by marks an agent request never has: the start-up model and quota
// checks ("." / "quota" / "test") allow max_tokens 1; session titles,
// summaries and other side questions offer no tools; token counts go to
// POST /v1/messages/count_tokens; a context compaction (/compact, or
// automatic) is a fork of the conversation with the turn's very tools
// whose last user message is Claude Code's summary instruction, starting
// with CompactionPrompt. So: a Messages request is an agent request when
// it offers at least one tool, allows more than one output token and does
// not end with that instruction; any other, and every count_tokens
// request, is auxiliary. An auxiliary request is answered with
// AuxiliaryMessagesText (a count with an input_tokens estimate) and takes
// nothing of the script. A turn started with no tools at all (claude
// --tools "") would be auxiliary by this rule: the provider adapters
// always offer tools. (Start's mux sends count_tokens to its 404 handler;
// Claude Code then estimates.) Claude Code's own second tries are agent
// requests and take replies: each retry of an API error or a lost
// connection (a Disconnect: CLAUDE_CODE_MAX_RETRIES, 10 by default), the
// non-streaming fallback after a stream that broke off (unless
// CLAUDE_CODE_DISABLE_NONSTREAMING_FALLBACK is set), and up to three
// continuations ("Your response above was cut off mid-stream...") of a
// stream whose body ended cleanly without its terminal events.
//
// Tools are the names of the tools offered, less those deferred to a tool
// search (defer_loading: Claude Code sends a DeferredToolPlaceholder so).
//
// Texts are the text blocks of the user and assistant messages and the
// text of each tool_result, in order. Left out, as instructions rather
// than conversation: the system prompt, messages of role "system" (Claude
// Code 2.1.328 sends its environment section as one), and the
// <system-reminder> blocks Claude Code adds to user messages.

// AuxiliaryMessagesText is the text an auxiliary Messages request is
// answered with.
const AuxiliaryMessagesText = "ok"

// CompactionPrompt starts the last user message of Claude Code's
// compaction request.
const CompactionPrompt = "CRITICAL: Respond with TEXT ONLY. Do NOT call any tools."

// BashTool is the tool a Step.Command calls in a Messages reply: Claude
// Code's Bash, input {"command": ...}.
const BashTool = "Bash"

// messagesCountTokens is the path suffix of a token count request.
const messagesCountTokens = "/count_tokens"

// The stop reasons a reply ends with.
const (
	messagesEndTurn = "end_turn"
	messagesToolUse = "tool_use"
)

// The roles whose texts a request's Texts keep.
const (
	messagesRoleUser      = "user"
	messagesRoleAssistant = "assistant"
)

// The content block types read and written.
const (
	messagesBlockText       = "text"
	messagesBlockThinking   = "thinking"
	messagesBlockToolUse    = "tool_use"
	messagesBlockToolResult = "tool_result"
	// A reference to a deferred tool, which loads it.
	messagesBlockToolReference = "tool_reference"
)

// messagesRequest is the part of a Messages API request the fake reads.
type messagesRequest struct {
	Model     string            `json:"model"`
	MaxTokens int64             `json:"max_tokens"`
	Stream    bool              `json:"stream"`
	Tools     []messagesTool    `json:"tools"`
	Messages  []messagesMessage `json:"messages"`
}

type messagesTool struct {
	Name string `json:"name"`
	// DeferLoading marks a tool the model is not offered until a tool
	// search loads it (Claude Code sends a DeferredToolPlaceholder so).
	DeferLoading bool `json:"defer_loading"`
}

type messagesMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// messagesBlock is one content block of a request's message.
type messagesBlock struct {
	Type    string          `json:"type"`
	Text    string          `json:"text"`
	Content json.RawMessage `json:"content"` // a tool_result's: a string or blocks
}

// messagesSeq numbers the fake's messages and tool calls.
var messagesSeq atomic.Int64

// serveMessages serves the Messages API: see the rule above.
func (s *Server) serveMessages(w http.ResponseWriter, r *http.Request) {
	body, err := readBody(r)
	if err != nil {
		s.record(Request{API: Messages, Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Body: jsonOrNull(body)})
		writeError(w, Messages, &APIError{Status: http.StatusBadRequest, Type: "invalid_request_error", Message: err.Error()})
		return
	}
	req := Request{API: Messages, Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Body: jsonOrNull(body)}
	var mr messagesRequest
	if err := json.Unmarshal(body, &mr); err != nil {
		s.record(req)
		writeError(w, Messages, &APIError{Status: http.StatusBadRequest, Type: "invalid_request_error",
			Message: fmt.Sprintf("%v: %v", errNotJSON, err)})
		return
	}
	req.Tools = messagesToolNames(mr.Tools, toolReferences(mr.Messages))
	req.Texts = messagesTexts(mr.Messages)
	if strings.HasSuffix(r.URL.Path, messagesCountTokens) {
		s.record(req)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"input_tokens": messagesTokens(len(body))})
		return
	}
	req.Agent = isAgentMessages(mr)
	reply := s.record(req)
	if !req.Agent {
		reply = Reply{Steps: []Step{{Text: AuxiliaryMessagesText}}}
	}
	for _, st := range reply.Steps {
		if st.Error != nil {
			writeError(w, Messages, st.Error)
			return
		}
	}
	if mr.Model == "" {
		mr.Model = "fake"
	}
	if mr.Stream {
		streamMessages(w, r, mr.Model, len(body), reply)
	} else {
		answerMessages(w, r, mr.Model, len(body), reply)
	}
}

// isAgentMessages applies the rule above.
func isAgentMessages(mr messagesRequest) bool {
	return len(mr.Tools) > 0 && mr.MaxTokens > 1 && !isCompaction(mr.Messages)
}

// isCompaction reports whether the last message is Claude Code's
// compaction instruction.
func isCompaction(msgs []messagesMessage) bool {
	if len(msgs) == 0 || msgs[len(msgs)-1].Role != messagesRoleUser {
		return false
	}
	texts := messagesContentTexts(msgs[len(msgs)-1].Content, false)
	return len(texts) > 0 && strings.HasPrefix(strings.TrimSpace(texts[0]), CompactionPrompt)
}

// messagesToolNames are the names of the tools a request offers the
// model: every tool but those deferred to a tool search, unless a
// tool_reference of the conversation loaded it (loaded).
func messagesToolNames(tools []messagesTool, loaded map[string]bool) []string {
	var out []string
	for _, t := range tools {
		if (!t.DeferLoading || loaded[t.Name]) && t.Name != "" {
			out = append(out, t.Name)
		}
	}
	return out
}

// toolReferences are the tools the messages load: the names of every
// tool_reference block in them (Claude Code announces a tool an MCP server
// added while the session ran so, in a tool_addition block, and sends the
// tool itself deferred).
func toolReferences(msgs []messagesMessage) map[string]bool {
	out := map[string]bool{}
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			if x["type"] == messagesBlockToolReference {
				if name, ok := x["name"].(string); ok {
					out[name] = true
				}
			}
			for _, e := range x {
				walk(e)
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		}
	}
	for _, m := range msgs {
		var content any
		if json.Unmarshal(m.Content, &content) == nil {
			walk(content)
		}
	}
	return out
}

// messagesTexts are the texts of the user and assistant messages, in
// order (see the rule above).
func messagesTexts(msgs []messagesMessage) []string {
	var out []string
	for _, m := range msgs {
		if m.Role != messagesRoleUser && m.Role != messagesRoleAssistant {
			continue
		}
		out = append(out, messagesContentTexts(m.Content, true)...)
	}
	return out
}

// messagesContentTexts reads content that is a string or a list of
// blocks: their texts, and with results the texts of tool results.
func messagesContentTexts(raw json.RawMessage, results bool) []string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if isSystemReminder(s) {
			return nil
		}
		return []string{s}
	}
	var blocks []messagesBlock
	if json.Unmarshal(raw, &blocks) != nil {
		return nil
	}
	var out []string
	for _, b := range blocks {
		switch b.Type {
		case messagesBlockText:
			if !isSystemReminder(b.Text) {
				out = append(out, b.Text)
			}
		case messagesBlockToolResult:
			if results {
				out = append(out, messagesContentTexts(b.Content, false)...)
			}
		}
	}
	return out
}

// isSystemReminder reports whether a text is one of Claude Code's
// <system-reminder> blocks and nothing else.
func isSystemReminder(s string) bool {
	s = strings.TrimSpace(s)
	return strings.HasPrefix(s, "<system-reminder>") && strings.HasSuffix(s, "</system-reminder>")
}

// messagesUsage is a Messages API usage object.
func messagesUsage(input, output int64) map[string]any {
	return map[string]any{"input_tokens": input, "output_tokens": output,
		"cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
}

// streamMessages streams reply as a Messages API event stream. A Command
// ends the reply (stop_reason tool_use); a Stall that the client leaves
// and a Disconnect end the stream without its terminal events.
func streamMessages(w http.ResponseWriter, r *http.Request, model string, bodyLen int, reply Reply) {
	e := newSSE(w)
	id := fmt.Sprintf("msg_fake_%d", messagesSeq.Add(1))
	in := messagesTokens(bodyLen)
	if e.event("message_start", map[string]any{"type": "message_start", "message": map[string]any{
		"id": id, "type": "message", "role": "assistant", "model": model, "content": []any{},
		"stop_reason": nil, "stop_sequence": nil, "usage": messagesUsage(in, 1)}}) != nil {
		return
	}
	index, outChars, stop := 0, 0, messagesEndTurn
steps:
	for _, st := range reply.Steps {
		var err error
		switch {
		case st.Disconnect:
			disconnect(w)
			return
		case st.Stall > 0:
			if !stall(r.Context(), st.Stall, st.Release) {
				return
			}
		case st.Text != "":
			err = streamMessagesBlock(e, index, messagesBlockText, st.Text)
			index, outChars = index+1, outChars+len(st.Text)
		case st.Reasoning != "":
			err = streamMessagesBlock(e, index, messagesBlockThinking, st.Reasoning)
			index, outChars = index+1, outChars+len(st.Reasoning)
		case st.Command != "" || st.Call != nil:
			name, input := messagesCall(st)
			err = streamMessagesToolUse(e, index, name, input)
			outChars += len(input)
			stop = messagesToolUse
			break steps
		}
		if err != nil {
			return
		}
	}
	if e.event("message_delta", map[string]any{"type": "message_delta",
		"delta": map[string]any{"stop_reason": stop, "stop_sequence": nil},
		"usage": map[string]any{"output_tokens": messagesTokens(outChars)}}) != nil {
		return
	}
	_ = e.event("message_stop", map[string]any{"type": "message_stop"})
}

// streamMessagesBlock streams a text or thinking block in deltas.
func streamMessagesBlock(e *sse, index int, typ, text string) error {
	start := map[string]any{"type": typ, typ: ""}
	if typ == messagesBlockThinking {
		start["signature"] = ""
	}
	if err := e.event("content_block_start", map[string]any{"type": "content_block_start", "index": index, "content_block": start}); err != nil {
		return err
	}
	for _, c := range chunks(text) {
		delta := map[string]any{"type": "text_delta", "text": c}
		if typ == messagesBlockThinking {
			delta = map[string]any{"type": "thinking_delta", "thinking": c}
		}
		if err := e.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": index, "delta": delta}); err != nil {
			return err
		}
	}
	if typ == messagesBlockThinking {
		if err := e.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": index,
			"delta": map[string]any{"type": "signature_delta", "signature": "fake-signature"}}); err != nil {
			return err
		}
	}
	return e.event("content_block_stop", map[string]any{"type": "content_block_stop", "index": index})
}

// messagesCall is the tool a Command or Call step uses and its input:
// Bash {"command": ...}, or the call's tool with its arguments.
func messagesCall(st Step) (name string, input json.RawMessage) {
	if st.Call != nil {
		return st.Call.Name, st.Call.arguments()
	}
	b, _ := json.Marshal(map[string]string{"command": st.Command})
	return BashTool, b
}

// streamMessagesToolUse streams a tool_use block, its input in one
// input_json_delta.
func streamMessagesToolUse(e *sse, index int, name string, input json.RawMessage) error {
	if err := e.event("content_block_start", map[string]any{"type": "content_block_start", "index": index,
		"content_block": map[string]any{"type": messagesBlockToolUse, "id": messagesToolUseID(), "name": name, "input": map[string]any{}}}); err != nil {
		return err
	}
	if err := e.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": index,
		"delta": map[string]any{"type": "input_json_delta", "partial_json": string(input)}}); err != nil {
		return err
	}
	return e.event("content_block_stop", map[string]any{"type": "content_block_stop", "index": index})
}

// messagesTokens is a token estimate for n bytes.
func messagesTokens(n int) int64 { return int64(n/4 + 1) }

func messagesToolUseID() string { return fmt.Sprintf("toolu_fake_%d", messagesSeq.Add(1)) }

// answerMessages answers a request without stream with the whole message.
func answerMessages(w http.ResponseWriter, r *http.Request, model string, bodyLen int, reply Reply) {
	var content []map[string]any
	outChars, stop := 0, messagesEndTurn
steps:
	for _, st := range reply.Steps {
		switch {
		case st.Disconnect:
			disconnect(w)
			return
		case st.Stall > 0:
			if !stall(r.Context(), st.Stall, st.Release) {
				return
			}
		case st.Text != "":
			content = append(content, map[string]any{"type": messagesBlockText, "text": st.Text})
			outChars += len(st.Text)
		case st.Reasoning != "":
			content = append(content, map[string]any{"type": messagesBlockThinking, "thinking": st.Reasoning, "signature": "fake-signature"})
			outChars += len(st.Reasoning)
		case st.Command != "" || st.Call != nil:
			name, input := messagesCall(st)
			content = append(content, map[string]any{"type": messagesBlockToolUse, "id": messagesToolUseID(), "name": name,
				"input": input})
			outChars += len(input)
			stop = messagesToolUse
			break steps
		}
	}
	if content == nil {
		content = []map[string]any{}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"id": fmt.Sprintf("msg_fake_%d", messagesSeq.Add(1)), "type": "message", "role": "assistant", "model": model,
		"content": content, "stop_reason": stop, "stop_sequence": nil, "usage": messagesUsage(messagesTokens(bodyLen), messagesTokens(outChars))})
}
