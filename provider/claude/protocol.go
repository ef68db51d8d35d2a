package claude

import (
	"encoding/json"
	"strings"
)

// lineType is the type of a stream-json line.
type lineType string

// The line types nlx reads and writes. Others (rate_limit_event,
// keep_alive, prompt_suggestion, tool_progress, ...) are skipped.
const (
	lineSystem          lineType = "system"
	lineStreamEvent     lineType = "stream_event"
	lineAssistant       lineType = "assistant"
	lineUser            lineType = "user"
	lineResult          lineType = "result"
	lineControlRequest  lineType = "control_request"
	lineControlResponse lineType = "control_response"
	lineControlCancel   lineType = "control_cancel_request"
)

// The subtypes read.
const (
	subtypeInit    = "init"
	subtypeSuccess = "success"
)

// controlSubtype is the subtype of a control request or response.
type controlSubtype string

// The error answer's subtype, "error", is spelled where it is written
// (refuse): reason's tests take any constant of that value for a second
// definition of reason.Failure.
const (
	controlCanUseTool controlSubtype = "can_use_tool"
	controlInterrupt  controlSubtype = "interrupt"
	controlOK         controlSubtype = "success"
)

// behavior is a permission answer's.
type behavior string

const (
	behaviorAllow behavior = "allow"
	behaviorDeny  behavior = "deny"
)

// The content block and stream event types read.
const (
	blockText       = "text"
	blockToolUse    = "tool_use"
	blockToolResult = "tool_result"

	eventMessageStart = "message_start"
	eventBlockDelta   = "content_block_delta"
	eventMessageDelta = "message_delta"

	deltaText     = "text_delta"
	deltaThinking = "thinking_delta"
)

// syntheticModel is the model of the messages Claude Code makes up itself
// (an API error's text): never the assistant's text.
const syntheticModel = "<synthetic>"

// line is one line of Claude Code's output: the members of every type nlx
// reads.
type line struct {
	Type            lineType        `json:"type"`
	Subtype         string          `json:"subtype"`
	SessionID       string          `json:"session_id"`
	ParentToolUseID *string         `json:"parent_tool_use_id"`
	Event           json.RawMessage `json:"event"`   // stream_event
	Message         json.RawMessage `json:"message"` // assistant, user
	RequestID       string          `json:"request_id"`
	Request         json.RawMessage `json:"request"` // control_request

	// result
	IsError        bool            `json:"is_error"`
	Result         *string         `json:"result"`
	Errors         json.RawMessage `json:"errors"`
	Usage          *wireUsage      `json:"usage"`
	TerminalReason string          `json:"terminal_reason"`
	APIErrorStatus *int            `json:"api_error_status"`
}

// main reports whether the line is of the turn's own agent (not of a
// subagent's).
func (l *line) main() bool { return l.ParentToolUseID == nil || *l.ParentToolUseID == "" }

// errorTexts are a result's errors: strings, or anything else as JSON.
func (l *line) errorTexts() []string {
	if len(l.Errors) == 0 || string(l.Errors) == "null" {
		return nil
	}
	var ss []string
	if json.Unmarshal(l.Errors, &ss) == nil {
		return ss
	}
	var raw []json.RawMessage
	if json.Unmarshal(l.Errors, &raw) != nil {
		return []string{string(l.Errors)}
	}
	for _, r := range raw {
		var s string
		if json.Unmarshal(r, &s) == nil {
			ss = append(ss, s)
		} else {
			ss = append(ss, string(r))
		}
	}
	return ss
}

type wireUsage struct {
	InputTokens              int64 `json:"input_tokens"`
	CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
	OutputTokens             int64 `json:"output_tokens"`
	OutputTokensDetails      struct {
		ThinkingTokens int64 `json:"thinking_tokens"`
	} `json:"output_tokens_details"`
}

// streamEvent is a stream_event's event: the Messages API's.
type streamEvent struct {
	Type  string `json:"type"`
	Delta struct {
		Type     string `json:"type"`
		Text     string `json:"text"`
		Thinking string `json:"thinking"`
	} `json:"delta"`
	Message struct {
		ID    string     `json:"id"`
		Usage *wireUsage `json:"usage"`
	} `json:"message"` // message_start
	Usage *wireUsage `json:"usage"` // message_delta
}

// apiMessage is an assistant or user line's message.
type apiMessage struct {
	ID      string          `json:"id"`
	Model   string          `json:"model"`
	Content json.RawMessage `json:"content"` // a string or blocks
}

type contentBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"` // a tool_result's: a string or blocks
	IsError   bool            `json:"is_error"`
}

// blocks reads content that is a list of blocks (a string is none).
func blocks(raw json.RawMessage) []contentBlock {
	var bs []contentBlock
	if json.Unmarshal(raw, &bs) != nil {
		return nil
	}
	return bs
}

// contentText is the text of content that is a string or blocks.
func contentText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []string
	for _, b := range blocks(raw) {
		if b.Type == blockText {
			parts = append(parts, b.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// controlRequest is a control request's request: Claude Code's
// can_use_tool, or anything else (its subtype).
type controlRequest struct {
	Subtype        controlSubtype  `json:"subtype"`
	ToolName       string          `json:"tool_name"`
	Input          json.RawMessage `json:"input"`
	ToolUseID      string          `json:"tool_use_id"`
	DecisionReason json.RawMessage `json:"decision_reason"` // a string in 2.1.328
	BlockedPath    string          `json:"blocked_path"`
}

// toolInput is the members of a tool's input nlx reads.
type toolInput struct {
	Command      string `json:"command"`       // Bash
	FilePath     string `json:"file_path"`     // Read, Edit, Write, MultiEdit
	NotebookPath string `json:"notebook_path"` // NotebookEdit
	Pattern      string `json:"pattern"`       // Glob, Grep
	Path         string `json:"path"`          // Glob, Grep
}

// What nlx writes.

type userLine struct {
	Type            lineType    `json:"type"`
	Message         userMessage `json:"message"`
	ParentToolUseID *string     `json:"parent_tool_use_id"`
	SessionID       string      `json:"session_id"`
}

type userMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type controlRequestLine struct {
	Type      lineType          `json:"type"`
	RequestID string            `json:"request_id"`
	Request   controlRequestOut `json:"request"`
}

type controlRequestOut struct {
	Subtype controlSubtype `json:"subtype"`
}

type controlResponseLine struct {
	Type     lineType        `json:"type"`
	Response controlResponse `json:"response"`
}

type controlResponse struct {
	Subtype   controlSubtype `json:"subtype"`
	RequestID string         `json:"request_id"`
	Response  any            `json:"response,omitempty"`
	Error     string         `json:"error,omitempty"`
}

type permissionAllow struct {
	Behavior     behavior        `json:"behavior"`
	UpdatedInput json.RawMessage `json:"updatedInput"`
}

type permissionDeny struct {
	Behavior behavior `json:"behavior"`
	Message  string   `json:"message"`
}
