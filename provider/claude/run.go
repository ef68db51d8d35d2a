package claude

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/nlx-dev/nlx/internal/reason"
	"github.com/nlx-dev/nlx/provider"
)

// maxToolOutput bounds the output a tool event carries; maxToolInput the
// short form of a tool's input.
const (
	maxToolOutput = 64 << 10
	maxToolInput  = 1 << 10
)

// denyMessage is what Claude Code is told of a denial without a reason.
const denyMessage = "nlx denied this tool use"

// resumeRejections are the errors of Claude Code 2.1.328's result (its
// only line) when --resume names no stored session: an unknown UUID, and
// anything else that is not a UUID nor a session's title.
var resumeRejections = []string{
	"No conversation found with session ID",
	"--resume requires a valid session ID",
}

// Run drives one turn: see provider.Adapter.
func (a *Adapter) Run(ctx context.Context, p provider.Pipes, t provider.Turn, h provider.Handler) (provider.Result, error) {
	s := a.Open(p)
	defer s.Close()
	return s.Turn(ctx, t, h)
}

// Open starts driving Claude Code for several turns of one session: see
// provider.SessionAdapter. Each turn is one user message on its stdin;
// the session is the one the first turn started (or resumed with
// --resume, which Args put on the command line).
func (a *Adapter) Open(p provider.Pipes) provider.Session {
	r := &run{out: &provider.LineWriter{Name: "claude", W: p.Stdin}, in: make(chan provider.Line, 64), stop: make(chan struct{})}
	go provider.ReadLines(p.Stdout, r.in, r.stop)
	return r
}

// Turn runs one turn of the session.
func (r *run) Turn(ctx context.Context, t provider.Turn, h provider.Handler) (provider.Result, error) {
	r.begin(ctx, t, h)
	defer r.endTurn()
	return r.loop()
}

// run is a session's state: the program's and its session's, and the
// current turn's (reset by begin). Only its loop's goroutine touches it, but for
// out (the writer), and mu's members (shared with the permission
// requests in flight, wg).
type run struct {
	ctx  context.Context
	turn provider.Turn
	h    provider.Handler
	out  *provider.LineWriter
	in   chan provider.Line
	stop chan struct{} // closed when Run returns: the reader gives up

	perms      context.Context // the permission requests'
	cancelPerm context.CancelFunc
	wg         sync.WaitGroup

	mu       sync.Mutex
	asking   map[string]*asking // by control request id
	declined map[string]bool    // tool use ids nlx denied

	nextID   int
	session  string
	started  bool // init came
	canceled bool // ctx ended: the interrupt is sent
	grace    *time.Timer

	text     strings.Builder
	snapshot string          // the text when the turn was interrupted
	message  string          // the API message being streamed
	streamed map[string]bool // API messages whose text came in deltas
	tools    map[string]*toolCall
	usage    provider.Usage
	msgUsage provider.Usage // the streamed message's input
}

// asking is a permission request the handler decides.
type asking struct {
	cancel    context.CancelFunc
	withdrawn bool // Claude Code cancelled it: no answer
}

type toolCall struct {
	name  string
	input string
}

// begin resets the turn's state for a turn of the session.
func (r *run) begin(ctx context.Context, t provider.Turn, h provider.Handler) {
	r.ctx, r.turn, r.h = ctx, t, h
	r.perms, r.cancelPerm = context.WithCancel(ctx)
	r.mu.Lock()
	r.asking, r.declined = map[string]*asking{}, map[string]bool{}
	r.mu.Unlock()
	r.canceled, r.grace = false, nil
	r.text.Reset()
	r.snapshot, r.message, r.streamed, r.tools = "", "", map[string]bool{}, map[string]*toolCall{}
	r.usage, r.msgUsage = provider.Usage{}, provider.Usage{}
}

// endTurn ends what the turn started: the permission requests in flight
// are cancelled (and answered).
func (r *run) endTurn() {
	r.cancelPerm()
	r.wg.Wait()
	if r.grace != nil {
		r.grace.Stop()
	}
}

// Close ends the session: stdin is closed so that the program exits.
func (r *run) Close() {
	close(r.stop)
	r.out.Close()
}

// outcome ends the loop: a result, or Run's error.
type outcome struct {
	res provider.Result
	err error
}

func (r *run) result(status provider.Status, err *provider.Error) provider.Result {
	text := r.text.String()
	if r.canceled {
		text = r.snapshot
	}
	return provider.Result{Status: status, Text: text, Session: r.session, Usage: r.usage, Error: err}
}

func (r *run) failed(code reason.Code, format string, args ...any) *outcome {
	return &outcome{res: r.result(provider.StatusFailed, &provider.Error{Code: code, Message: fmt.Sprintf(format, args...)})}
}

// interrupted is the result of a turn ended by ctx.
func (r *run) interrupted() *outcome {
	return &outcome{res: r.result(provider.StatusInterrupted, provider.Cause(r.ctx))}
}

// emit passes an event to the handler, but text and reasoning once the
// turn is interrupted: what comes after is stale.
func (r *run) emit(e provider.Event) {
	if r.canceled && (e.Type == provider.EventText || e.Type == provider.EventReasoning) {
		return
	}
	r.h.Event(e)
}

// loop runs the turn to its end.
func (r *run) loop() (provider.Result, error) {
	if r.ctx.Err() != nil {
		r.canceled = true
		return r.interrupted().res, nil // nothing sent
	}
	// A failed write means the program is gone: its stdout ends next.
	_ = r.out.Send(userLine{Type: lineUser, Message: userMessage{Role: "user", Content: r.turn.Prompt}})
	done := r.ctx.Done()
	var grace <-chan time.Time
	for {
		var o *outcome
		select {
		case in := <-r.in:
			if in.Err != nil {
				o = r.ended(in.Err)
			} else {
				o = r.handle(in.Bytes)
			}
		case <-done:
			done = nil
			r.cancel()
			grace = r.grace.C
		case <-grace:
			// The program did not end the turn in time: the caller stops it.
			o = r.interrupted()
		}
		if o != nil {
			return o.res, o.err
		}
	}
}

// cancel interrupts the turn Claude Code's way: the interrupt control
// request, then up to Grace for the result. Sent before init too: Claude
// Code reads its stdin in order and ends the turn it has not begun.
func (r *run) cancel() {
	r.canceled = true
	r.snapshot = r.text.String()
	r.nextID++
	_ = r.out.Send(controlRequestLine{Type: lineControlRequest, RequestID: fmt.Sprintf("nlx-%d", r.nextID),
		Request: controlRequestOut{Subtype: controlInterrupt}})
	r.grace = time.NewTimer(provider.Grace)
}

// ended is the outcome of the program's output ending before the result.
func (r *run) ended(err error) *outcome {
	if r.canceled {
		return r.interrupted()
	}
	if errors.Is(err, provider.ErrLineTooLong) {
		return r.failed(reason.ProviderProtocol, "claude sent %v", err)
	}
	what := "exited before it ended the turn"
	if !r.started {
		what = "exited before it started the session"
	}
	if err != io.EOF {
		return r.failed(reason.ProviderExited, "claude %s: reading its output: %v", what, err)
	}
	return r.failed(reason.ProviderExited, "claude %s", what)
}

// handle processes one line of the program's output.
func (r *run) handle(raw []byte) *outcome {
	var l line
	if err := json.Unmarshal(raw, &l); err != nil {
		return r.failed(reason.ProviderProtocol, "claude sent a line that is not a JSON object (%d bytes): %v", len(raw), err)
	}
	switch l.Type {
	case lineSystem:
		if l.Subtype == subtypeInit {
			r.started = true
			r.sessionIs(l.SessionID)
		}
	case lineStreamEvent:
		if l.main() {
			r.streamEvent(l.Event)
		}
	case lineAssistant:
		if l.main() {
			r.assistant(l.Message)
		}
	case lineUser:
		if l.main() {
			r.toolResults(l.Message)
		}
	case lineControlRequest:
		r.serve(l.RequestID, l.Request)
	case lineControlCancel:
		r.withdraw(l.RequestID)
	case lineControlResponse:
		// The answer to the interrupt: the result ends the wait.
	case lineResult:
		return r.finished(&l)
	}
	return nil
}

// sessionIs notes the native session handle.
func (r *run) sessionIs(id string) {
	if id == "" || id == r.session {
		return
	}
	r.session = id
	r.emit(provider.Event{Type: provider.EventSession, Session: id})
}

func (r *run) streamEvent(raw json.RawMessage) {
	var e streamEvent
	if json.Unmarshal(raw, &e) != nil {
		return
	}
	switch e.Type {
	case eventMessageStart:
		r.message = e.Message.ID
		r.msgUsage = usageOf(e.Message.Usage)
	case eventBlockDelta:
		switch e.Delta.Type {
		case deltaText:
			if e.Delta.Text == "" {
				return
			}
			r.streamed[r.message] = true
			r.text.WriteString(e.Delta.Text)
			r.emit(provider.Event{Type: provider.EventText, Text: e.Delta.Text})
		case deltaThinking:
			if e.Delta.Thinking != "" {
				r.emit(provider.Event{Type: provider.EventReasoning, Text: e.Delta.Thinking})
			}
		}
	case eventMessageDelta:
		if e.Usage == nil {
			return
		}
		r.usage.InputTokens += r.msgUsage.InputTokens
		r.usage.CachedInputTokens += r.msgUsage.CachedInputTokens
		r.usage.OutputTokens += e.Usage.OutputTokens
		r.msgUsage = provider.Usage{}
		u := r.usage
		r.emit(provider.Event{Type: provider.EventUsage, Usage: &u})
	}
}

// usageOf is a Messages API usage as nlx counts it: the input tokens are
// all of them, the cached ones included.
func usageOf(u *wireUsage) provider.Usage {
	if u == nil {
		return provider.Usage{}
	}
	return provider.Usage{
		InputTokens:       u.InputTokens + u.CacheCreationInputTokens + u.CacheReadInputTokens,
		CachedInputTokens: u.CacheReadInputTokens,
		OutputTokens:      u.OutputTokens,
		ReasoningTokens:   u.OutputTokensDetails.ThinkingTokens,
	}
}

// assistant handles a content block of the assistant's: a tool call
// starts; a text that was not streamed is the text.
func (r *run) assistant(raw json.RawMessage) {
	var m apiMessage
	if json.Unmarshal(raw, &m) != nil || m.Model == syntheticModel {
		return
	}
	for _, b := range blocks(m.Content) {
		switch b.Type {
		case blockText:
			if !r.streamed[m.ID] && b.Text != "" {
				r.text.WriteString(b.Text)
				r.emit(provider.Event{Type: provider.EventText, Text: b.Text})
			}
		case blockToolUse:
			if b.ID == "" || r.tools[b.ID] != nil {
				continue
			}
			tc := &toolCall{name: b.Name, input: shortInput(Tool(b.Name), b.Input)}
			r.tools[b.ID] = tc
			r.emit(provider.Event{Type: provider.EventToolStart, Tool: &provider.Tool{ID: b.ID, Name: tc.name, Input: tc.input,
				Status: provider.ToolRunning}})
		}
	}
}

// toolResults handles a user message of Claude Code's: the results of the
// tool calls.
func (r *run) toolResults(raw json.RawMessage) {
	var m apiMessage
	if json.Unmarshal(raw, &m) != nil {
		return
	}
	for _, b := range blocks(m.Content) {
		if b.Type != blockToolResult || b.ToolUseID == "" {
			continue
		}
		tc := r.tools[b.ToolUseID]
		if tc == nil {
			tc = &toolCall{}
		}
		status := provider.ToolCompleted
		if b.IsError {
			status = provider.ToolFailed
			r.mu.Lock()
			if r.declined[b.ToolUseID] {
				status = provider.ToolDeclined
			}
			r.mu.Unlock()
		}
		r.emit(provider.Event{Type: provider.EventToolEnd, Tool: &provider.Tool{ID: b.ToolUseID, Name: tc.name, Input: tc.input,
			Output: bound(contentText(b.Content), maxToolOutput), Status: status}})
	}
}

// shortInput is the short form of a tool's input: the command, the file,
// the pattern, or its JSON.
func shortInput(t Tool, raw json.RawMessage) string {
	var in toolInput
	_ = json.Unmarshal(raw, &in)
	switch {
	case t == ToolBash && in.Command != "":
		return in.Command
	case in.FilePath != "":
		return in.FilePath
	case in.NotebookPath != "":
		return in.NotebookPath
	case in.Pattern != "" && in.Path != "":
		return in.Pattern + " in " + in.Path
	case in.Pattern != "":
		return in.Pattern
	}
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return ""
	}
	return bound(b.String(), maxToolInput)
}

func bound(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "\n[... cut by nlx]"
}

// finished ends the turn at its result line.
func (r *run) finished(l *line) *outcome {
	if r.started {
		// Before init the result's session is a made-up one (a rejected
		// resume names the handle, or a new id).
		r.sessionIs(l.SessionID)
	}
	// The result's usage is the turn's, but for an interrupted turn's
	// (all zero): then what the stream counted stands.
	if u := usageOf(l.Usage); u != (provider.Usage{}) {
		r.usage = u
	}
	final := ""
	if l.Result != nil {
		final = *l.Result
	}
	ok := l.Subtype == subtypeSuccess && !l.IsError
	if r.canceled {
		if ok {
			// Finished after all: recorded, never the result.
			stale := r.text.String()
			if stale == "" {
				stale = final
			}
			r.h.Event(provider.Event{Type: provider.EventStale, Text: stale})
		}
		return r.interrupted()
	}
	if ok {
		if r.text.Len() == 0 {
			r.text.WriteString(final)
		}
		return &outcome{res: r.result(provider.StatusCompleted, nil)}
	}
	msg := r.errorMessage(l, final)
	if r.turn.Resume != "" && !r.started && rejectsResume(msg) {
		return &outcome{err: fmt.Errorf("claude: --resume=%s: %s: %w", r.turn.Resume, msg, provider.ErrResumeRejected)}
	}
	return r.failed(reason.ProviderError, "%s", msg)
}

// errorMessage is a failed result's message: its text (Claude Code's
// "API Error: ..."), else its errors, else its subtype.
func (r *run) errorMessage(l *line, final string) string {
	if final != "" {
		return final
	}
	if errs := l.errorTexts(); len(errs) > 0 {
		return strings.Join(errs, "; ")
	}
	what := "claude ended the turn with " + l.Subtype
	if l.TerminalReason != "" {
		what += " (" + l.TerminalReason + ")"
	}
	return what
}

func rejectsResume(msg string) bool {
	for _, s := range resumeRejections {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// serve answers a control request of Claude Code's: a tool permission goes
// to the handler (in a goroutine: the loop goes on reading); anything else
// is refused at once with an error, which Claude Code takes as a refusal.
func (r *run) serve(id string, raw json.RawMessage) {
	var req controlRequest
	if err := json.Unmarshal(raw, &req); err != nil {
		r.refuse(id, "nlx could not read the request: "+err.Error())
		return
	}
	if req.Subtype != controlCanUseTool {
		r.refuse(id, fmt.Sprintf("nlx does not serve %q requests", req.Subtype))
		return
	}
	r.ask(id, req)
}

// refuse answers a control request with an error.
func (r *run) refuse(id, msg string) {
	_ = r.out.Send(controlResponseLine{Type: lineControlResponse, Response: controlResponse{Subtype: "error", RequestID: id, Error: msg}})
}

// permissionOf is the request as nlx asks it.
func permissionOf(req controlRequest, cwd string) provider.Permission {
	var in toolInput
	_ = json.Unmarshal(req.Input, &in)
	p := provider.Permission{Tool: req.ToolName, Cwd: cwd, Reason: rawString(req.DecisionReason)}
	switch Tool(req.ToolName) {
	case ToolBash:
		p.Kind = provider.PermissionCommand
		p.Command = in.Command
	case ToolEdit, ToolWrite, toolMultiEdit, toolNotebookEdit:
		p.Kind = provider.PermissionFileChange
	default:
		p.Kind = provider.PermissionTool
	}
	if p.Kind != provider.PermissionCommand {
		for _, path := range []string{in.FilePath, in.NotebookPath, in.Path, req.BlockedPath} {
			if path != "" {
				p.Paths = append(p.Paths, path)
				break
			}
		}
	}
	return p
}

// rawString is raw's text when it is a JSON string, else raw.
func rawString(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return string(raw)
}

// ask routes a permission request to the handler and answers it with the
// decision: allow (the input unchanged) only on an allow, deny on
// anything else.
func (r *run) ask(id string, req controlRequest) {
	perm := permissionOf(req, r.turn.Cwd)
	ctx, cancel := context.WithCancel(r.perms)
	a := &asking{cancel: cancel}
	r.mu.Lock()
	r.asking[id] = a
	r.mu.Unlock()
	input := req.Input
	if len(input) == 0 || string(input) == "null" {
		input = json.RawMessage("{}")
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer cancel()
		d, err := r.h.Permission(ctx, perm)
		allow := err == nil && d.Allow
		r.mu.Lock()
		delete(r.asking, id)
		withdrawn := a.withdrawn
		if !allow && req.ToolUseID != "" {
			r.declined[req.ToolUseID] = true
		}
		r.mu.Unlock()
		if withdrawn {
			return
		}
		var answer any = permissionAllow{Behavior: behaviorAllow, UpdatedInput: input}
		if !allow {
			msg := d.Reason
			if msg == "" && err != nil {
				msg = "nlx could not decide: " + err.Error()
			}
			if msg == "" {
				msg = denyMessage
			}
			answer = permissionDeny{Behavior: behaviorDeny, Message: msg}
		}
		_ = r.out.Send(controlResponseLine{Type: lineControlResponse, Response: controlResponse{Subtype: controlOK, RequestID: id, Response: answer}})
	}()
}

// withdraw ends a permission request Claude Code no longer waits for (it
// was interrupted): the handler's wait ends, and nothing is answered.
func (r *run) withdraw(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if a := r.asking[id]; a != nil {
		a.withdrawn = true
		a.cancel()
	}
}
