// Package provider drives the real provider programs (Codex's app-server,
// Claude Code's stream-json session) through one small interface: an
// Adapter turns a Turn into a stream of normalized Events over the
// provider's stdio, routing every permission request the provider makes to
// a Handler and answering it only with the Handler's decision.
//
// The adapters live in provider/codex and provider/claude; what launches
// the program (the sandbox, the applied state, the records) is the turn
// package's. An adapter never sees a config directory, the state or a
// secret's value: it sees the pipes, the Turn and the Handler.
package provider

import (
	"context"
	"io"
	"time"

	"github.com/nlx-dev/nlx/internal/reason"
)

// Kind is a provider program's kind, as a provider registration names it.
type Kind string

// The kinds with an adapter.
const (
	KindCodex  Kind = "codex-app-server"
	KindClaude Kind = "claude-code"
)

// EventType is the type of a normalized event.
type EventType string

// The event types. Every turn ends with exactly one EventResult.
const (
	EventSession    EventType = "session"    // the native session handle is known (Event.Session)
	EventText       EventType = "text"       // an assistant text delta (Event.Text)
	EventReasoning  EventType = "reasoning"  // a reasoning delta, when the provider streams one
	EventToolStart  EventType = "tool_start" // Event.Tool
	EventToolUpdate EventType = "tool_update"
	EventToolEnd    EventType = "tool_end"
	EventPermission EventType = "permission" // a request and, once decided, its decision (Event.Permission)
	EventUsage      EventType = "usage"      // token usage so far (Event.Usage)
	EventStale      EventType = "stale"      // what the provider finished after the turn was interrupted: recorded, never the result
	EventNote       EventType = "note"       // something nlx did that the operator should know (Event.Text)
	EventResult     EventType = "result"     // the one terminal event (Event.Result)
)

// Event is one normalized event of a turn. Only the field of its type is
// set. Events never carry a provider's raw payload.
type Event struct {
	Type       EventType   `json:"type"`
	Text       string      `json:"text,omitempty"`
	Session    string      `json:"session,omitempty"`
	Tool       *Tool       `json:"tool,omitempty"`
	Permission *Permission `json:"permission,omitempty"`
	Usage      *Usage      `json:"usage,omitempty"`
	Result     *Result     `json:"result,omitempty"`
}

// ToolStatus is where a tool call is.
type ToolStatus string

// The tool statuses.
const (
	ToolRunning   ToolStatus = "running"
	ToolCompleted ToolStatus = "completed"
	ToolFailed    ToolStatus = "failed"
	ToolDeclined  ToolStatus = "declined"
)

// Tool is a tool call of the provider (a shell command, a file change, a
// read).
type Tool struct {
	ID     string     `json:"id"`
	Name   string     `json:"name"`            // the provider's tool name: commandExecution, Bash, Read, ...
	Input  string     `json:"input,omitempty"` // the command, or a short form of the input
	Output string     `json:"output,omitempty"`
	Status ToolStatus `json:"status,omitempty"`
}

// PermissionKind is what a permission request asks for.
type PermissionKind string

// The permission kinds.
const (
	PermissionCommand    PermissionKind = "command"     // run a shell command
	PermissionFileChange PermissionKind = "file_change" // write files
	PermissionTool       PermissionKind = "tool"        // any other tool
)

// Permission is a provider's request to act, and the decision once made.
type Permission struct {
	// ID is nlx's id of the request (Handler.Permission sets it).
	ID      string         `json:"id,omitempty"`
	Kind    PermissionKind `json:"kind"`
	Tool    string         `json:"tool,omitempty"`    // the provider's tool name
	Command string         `json:"command,omitempty"` // the command, for PermissionCommand
	Paths   []string       `json:"paths,omitempty"`   // the files, for PermissionFileChange
	Cwd     string         `json:"cwd,omitempty"`
	Reason  string         `json:"reason,omitempty"` // the provider's reason for asking
	// Decision is empty while the request waits.
	Decision *Decision `json:"decision,omitempty"`
}

// Decision answers a permission request.
type Decision struct {
	Allow bool   `json:"allow"`
	By    string `json:"by,omitempty"` // who decided: an actor, or "nlx" (timeout, cancel, policy)
	// Reason is shown to the provider when it is denied.
	Reason string `json:"reason,omitempty"`
	// Code is set when nlx decided by itself (permission_required,
	// permission_timeout, ...).
	Code reason.Code `json:"code,omitempty"`
}

// Usage is a turn's token usage.
type Usage struct {
	InputTokens       int64 `json:"input_tokens"`
	CachedInputTokens int64 `json:"cached_input_tokens,omitempty"`
	OutputTokens      int64 `json:"output_tokens"`
	ReasoningTokens   int64 `json:"reasoning_tokens,omitempty"`
}

// Status is how a turn ended.
type Status string

// The turn statuses.
const (
	StatusCompleted   Status = "completed"
	StatusInterrupted Status = "interrupted" // cancelled, timed out or revoked: Error says why
	StatusFailed      Status = "failed"      // the provider or the model failed: Error says how
	StatusBlocked     Status = "blocked"     // a permission nobody granted: Error is permission_required
)

// Result is how a turn ended: the one terminal event.
type Result struct {
	Status Status `json:"status"`
	// Text is the assistant's text: the streamed deltas, or the final
	// message when none was streamed.
	Text    string `json:"text"`
	Session string `json:"session,omitempty"` // the native session handle
	Usage   Usage  `json:"usage"`
	Error   *Error `json:"error,omitempty"`
	// Note says what nlx did on the way (a resume that fell back to nlx's
	// summary, ...).
	Note string `json:"note,omitempty"`
}

// Error is a structured turn error.
type Error struct {
	Code    reason.Code `json:"code"`
	Message string      `json:"message"`
}

// Policy is the filesystem policy a turn runs under (a workspace's, or a
// job's narrower one). It decides which tools a provider offers and when
// it asks.
type Policy string

// The policies, as schema and isolate spell them.
const (
	ReadOnly         Policy = "read_only"
	WorkspaceWrite   Policy = "workspace_write"
	TrustedLocal     Policy = "trusted_local"
	DangerFullAccess Policy = "danger_full_access"
)

// Asks reports whether a provider under p asks before it acts: only
// trusted_local and danger_full_access run their tools without asking.
func (p Policy) Asks() bool { return p != TrustedLocal && p != DangerFullAccess }

// Turn is one turn as an adapter runs it.
type Turn struct {
	Prompt string
	// Cwd is the workspace as the provider sees it (inside the sandbox).
	Cwd    string
	Policy Policy
	// Resume is the native session handle to continue ("" starts a new
	// session).
	Resume string
	// Tools is nlx's MCP server for the launch (nil: none). An adapter
	// whose program takes it on its command line (Claude Code) adds it
	// there; Codex finds it in its private home (PrivateHome).
	Tools *MCPServer
}

// Pipes are the provider program's stdio, as the adapter drives it.
type Pipes struct {
	Stdin  io.WriteCloser // the provider's fd 0
	Stdout io.Reader      // the provider's fd 1
}

// Handler receives a turn's events and decides its permission requests.
type Handler interface {
	// Event is called for each event but the result, in order, from one
	// goroutine.
	Event(Event)
	// Permission records the request and blocks until it is decided or ctx
	// ends (then it returns a denial). The adapter answers the provider
	// with exactly what it returns; an error is a denial too (fail
	// closed).
	Permission(ctx context.Context, p Permission) (Decision, error)
}

// Adapter drives one kind of provider program.
type Adapter interface {
	Kind() Kind
	// Args returns the arguments nlx adds to the provider's command for a
	// turn (after the registration's own), and the variables it sets.
	Args(t Turn) (args []string, env map[string]string)
	// SecretEnv is the variable the connection's secret is handed to the
	// provider in (OPENAI_API_KEY, ANTHROPIC_API_KEY).
	SecretEnv() string
	// VersionArgs are the arguments that make the program print its
	// version; ParseVersion reads it from the output.
	VersionArgs() []string
	ParseVersion(out string) (string, error)
	// Run drives one turn over p until the provider's terminal message,
	// and returns the result (never with StatusBlocked: the caller knows
	// which denials were nlx's). When ctx ends, Run interrupts the turn the
	// provider's way, waits up to Grace for it to end, and returns
	// StatusInterrupted with Cause's code; anything the provider completes
	// after that is an EventStale. A provider whose resume handle is
	// rejected makes Run return ErrResumeRejected (nothing else was sent).
	Run(ctx context.Context, p Pipes, t Turn, h Handler) (Result, error)
}

// CommandChecker is an Adapter that refuses a registration's command
// carrying what nlx sets for each turn (a flag that would widen the
// turn's policy when repeated): the turn is refused before it launches.
type CommandChecker interface {
	CheckCommand(command []string) error
}

// Session is one provider program driven for several turns of one
// conversation: a warm worker. The first turn opens or resumes the native
// session (Turn.Resume); the next ones continue it, and their Resume is
// ignored. A session whose turn did not complete is closed, never reused.
type Session interface {
	Turn(ctx context.Context, t Turn, h Handler) (Result, error)
	// Close closes the program's stdin: it exits.
	Close()
}

// SessionAdapter is an adapter that can keep its program between turns.
// Run is Open, one Turn and Close.
type SessionAdapter interface {
	Adapter
	Open(p Pipes) Session
}

// Grace is how long an interrupted turn may take to end before the adapter
// gives up on it (the caller then stops the process).
const Grace = 5 * time.Second

// ErrResumeRejected is Run's error when the provider refuses the turn's
// resume handle.
var ErrResumeRejected = reason.New(reason.ResumeRejected, "the provider rejected the stored session handle")

// Cause is the code of a turn interrupted by the end of ctx: ctx's cause
// when it carries a reason code, else turn_cancelled.
func Cause(ctx context.Context) *Error {
	err := context.Cause(ctx)
	if e := reason.Of(err); e != nil {
		return &Error{Code: e.Code, Message: e.Msg}
	}
	return &Error{Code: reason.TurnCancelled, Message: "the turn was cancelled"}
}

// MCPServer is the one MCP server a provider launch is given: nlx's tool
// proxy, reached through nlx's bridge inside the sandbox. A provider's
// configuration never names another.
type MCPServer struct {
	// Name is the server's name as the provider knows it ("nlx"): its
	// tools are mcp__NAME__TOOL to Claude Code, the mcp__NAME namespace
	// to Codex.
	Name    string
	Command string
	Args    []string
	Env     map[string]string
}

// ToolsServerName is the name of nlx's MCP server in every provider's
// configuration.
const ToolsServerName = "nlx"

// PrivateHome is an adapter whose program keeps its configuration in a
// home of its own (Codex's CODEX_HOME): nlx gives each worker a private
// one, made before the launch from the owner's configuration, which is
// never edited; the owner's sign-in stays the owner's.
type PrivateHome interface {
	// HomeEnv is the variable naming the program's home.
	HomeEnv() string
	// HomeFiles are a worker's private home: each file's content, made
	// from the owner's configuration (nil when the owner has none) with
	// server as its only MCP server, and the links (name -> target) to
	// the owner's sign-in in credentialHome, the owner's home as the
	// sandbox sees it.
	HomeFiles(ownerConfig []byte, server MCPServer, credentialHome string) (files map[string][]byte, links map[string]string, err error)
	// OwnerConfig is the file of the owner's home HomeFiles reads.
	OwnerConfig() string
}

// ConfigVersion is a program's writable configuration layer as it reports
// it: its version and its file.
type ConfigVersion struct {
	Version string
	File    string
}

// ConfigWriter is a Session whose program takes a changed MCP server
// entry through its own connection, between turns, without a turn (Codex's
// app-server: config/read, config/batchWrite, config/mcpServer/reload,
// mcpServerStatus/list). Its methods must not run during a turn, nor
// concurrently.
type ConfigWriter interface {
	// ReadConfig returns the program's writable (user) layer.
	ReadConfig(ctx context.Context) (ConfigVersion, error)
	// WriteMCPServer sends server's entry in one edit, expecting the
	// layer at version; its Answer is the layer's new version. A layer
	// changed since is ErrConfigConflict (nothing was written); an answer
	// that does not come before the Answer's ctx ends (or the program
	// exits) is ErrNoAnswer: nobody knows whether it was written.
	WriteMCPServer(server MCPServer, version string) (Answer, error)
	// ReloadMCPServers asks the program to read its MCP configuration
	// again; ErrNoAnswer as WriteMCPServer.
	ReloadMCPServers() (Answer, error)
	// MCPServerTools lists the tools the program finds at its MCP server
	// name now, from its configuration (a fresh discovery), sorted.
	MCPServerTools(ctx context.Context, name string) ([]string, error)
}

// Answer waits for the answer to a request already sent: nlx records
// that it was sent before it waits. A ctx that has ended when Answer is
// called is ErrNoAnswer at once, whatever came meanwhile.
type Answer func(ctx context.Context) (string, error)

// ErrConfigConflict is a configuration write refused because the layer
// changed since it was read.
var ErrConfigConflict = reason.New(reason.ConfigVersionConflict, "the configuration changed since nlx read it")

// ErrNoAnswer is a request to the program whose answer never came: what
// it asked for may or may not have happened.
var ErrNoAnswer = reason.New(reason.RefreshOutcomeUnknown, "the program did not answer")
