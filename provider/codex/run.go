package codex

import (
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

// maxToolOutput bounds the output a tool event carries.
const maxToolOutput = 64 << 10

// clientName is the name nlx gives itself in initialize (Codex's
// originator header and user agent carry it).
const clientName = "nlx"

// quiet are the notifications nlx opts out of: nothing of a turn is in
// them.
var quiet = []method{"account/rateLimits/updated", "remoteControl/status/changed", "thread/status/changed", "mcpServer/startupStatus/updated"}

// Run drives one turn: see provider.Adapter.
func (a *Adapter) Run(ctx context.Context, p provider.Pipes, t provider.Turn, h provider.Handler) (provider.Result, error) {
	s := a.Open(p)
	defer s.Close()
	return s.Turn(ctx, t, h)
}

// Open starts driving an app-server for several turns of one thread: see
// provider.SessionAdapter. The first turn initializes it and starts (or
// resumes) the thread; the next ones start turns on that thread.
func (a *Adapter) Open(p provider.Pipes) provider.Session {
	r := &run{adapter: a, out: &provider.LineWriter{Name: "codex", W: p.Stdin}, in: make(chan provider.Line, 64),
		stop: make(chan struct{}), pending: map[int64]method{}, finished: map[string]bool{}}
	go provider.ReadLines(p.Stdout, r.in, r.stop)
	return r
}

// Turn runs one turn on the session's thread.
func (r *run) Turn(ctx context.Context, t provider.Turn, h provider.Handler) (provider.Result, error) {
	r.begin(ctx, t, h)
	defer r.endTurn()
	return r.loop()
}

// phase is where a run is.
type phase int

const (
	phaseInitialize phase = iota // initialize sent
	phaseThread                  // thread/start or thread/resume sent
	phaseTurnStart               // turn/start sent
	phaseTurn                    // the turn runs
)

// run is a session's state: the program's and its thread's, and the
// current turn's (reset by begin). Only the loop's goroutine touches it
// but for out (the writer) and wg (permission requests in flight).
type run struct {
	ctx     context.Context
	adapter *Adapter
	turn    provider.Turn
	h       provider.Handler
	out     *provider.LineWriter
	in      chan provider.Line
	stop    chan struct{} // closed when Run returns: the reader gives up

	perms      context.Context // the permission requests'
	cancelPerm context.CancelFunc
	wg         sync.WaitGroup

	phase       phase
	initialized bool            // initialize answered
	finished    map[string]bool // the session's earlier turns: their late notifications are not this turn's
	nextID      int64
	pending     map[int64]method // our requests without a response
	thread      string
	turnID      string
	policy      approvalPolicy
	lastErr     string // the last error notification's message
	canceled    bool   // ctx ended: turn/interrupt sent (or to be sent)
	grace       <-chan time.Time

	texts    []*agentText // the turn's agent messages, in order
	textByID map[string]*agentText
	tools    map[string]*toolItem
	base     *tokenBreakdown // the thread's usage before the turn
	usage    provider.Usage
	snapshot string // the text when the turn was interrupted
}

// agentText is one agent message of the turn.
type agentText struct {
	b      strings.Builder
	deltas bool // its text came as deltas
}

// toolItem is one tool call of the turn, as its first sight named it.
type toolItem struct {
	name    string
	input   string
	command string
	paths   []string
	started bool
}

// begin resets the turn's state for a turn of the session.
func (r *run) begin(ctx context.Context, t provider.Turn, h provider.Handler) {
	r.ctx, r.turn, r.h = ctx, t, h
	r.policy = approvalNever
	if t.Policy.Asks() {
		r.policy = approvalUntrusted
	}
	r.perms, r.cancelPerm = context.WithCancel(ctx)
	r.phase, r.turnID, r.lastErr, r.canceled, r.grace = phaseInitialize, "", "", false, nil
	r.texts, r.textByID, r.tools = nil, map[string]*agentText{}, map[string]*toolItem{}
	r.base, r.usage, r.snapshot = nil, provider.Usage{}, ""
}

// endTurn ends what the turn started: the permission requests in flight
// are cancelled (and answered).
func (r *run) endTurn() {
	r.cancelPerm()
	r.wg.Wait()
	if r.turnID != "" {
		r.finished[r.turnID] = true
	}
}

// Close ends the session: stdin is closed so that the program exits.
func (r *run) Close() {
	close(r.stop)
	r.out.Close()
}

// call sends a request; its response comes to the loop.
func (r *run) call(m method, params any) {
	r.nextID++
	r.pending[r.nextID] = m
	// A failed write means the program is gone: its stdout ends next.
	_ = r.out.Send(request{Method: m, ID: r.nextID, Params: params})
}

// outcome ends the loop: a result, or Run's error.
type outcome struct {
	res provider.Result
	err error
}

func (r *run) failed(code reason.Code, format string, args ...any) *outcome {
	return &outcome{res: r.result(provider.StatusFailed, &provider.Error{Code: code, Message: fmt.Sprintf(format, args...)})}
}

func (r *run) protocol(format string, args ...any) *outcome {
	return r.failed(reason.ProviderProtocol, "codex: "+format, args...)
}

// result is the turn's result with status and err.
func (r *run) result(status provider.Status, err *provider.Error) provider.Result {
	text := r.text()
	if r.canceled {
		text = r.snapshot
	}
	return provider.Result{Status: status, Text: text, Session: r.thread, Usage: r.usage, Error: err}
}

// interrupted is the result of a turn ended by ctx.
func (r *run) interrupted() *outcome {
	return &outcome{res: r.result(provider.StatusInterrupted, provider.Cause(r.ctx))}
}

// text is the turn's assistant text: each message's deltas (its final
// text when none was streamed), in order.
func (r *run) text() string {
	var b strings.Builder
	for _, t := range r.texts {
		b.WriteString(t.b.String())
	}
	return b.String()
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
	switch {
	case !r.initialized:
		r.call(methodInitialize, initializeParams{
			ClientInfo:   clientInfo{Name: clientName, Title: "nlx", Version: orDev(r.adapter.ClientVersion)},
			Capabilities: &initializeCapabilities{OptOutNotificationMethods: quiet},
		})
	case r.thread == "":
		return r.failed(reason.ProviderProtocol, "codex: the session has no thread to continue").res, nil
	default:
		r.startTurn()
	}
	done := r.ctx.Done()
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
			o = r.cancel()
		case <-r.grace:
			// The program did not end the turn in time: the caller stops it.
			o = r.interrupted()
		}
		if o != nil {
			return o.res, o.err
		}
	}
}

func orDev(v string) string {
	if v == "" {
		return "dev"
	}
	return v
}

// cancel interrupts the turn the app-server's way: turn/interrupt, then up
// to Grace for turn/completed. Before the turn started there is nothing to
// interrupt.
func (r *run) cancel() *outcome {
	r.canceled = true
	r.snapshot = r.text()
	switch r.phase {
	case phaseInitialize, phaseThread:
		return r.interrupted()
	case phaseTurnStart:
		// turn/start's answer names the turn: interrupt it then.
	case phaseTurn:
		r.call(methodTurnInterrupt, turnInterruptParams{ThreadID: r.thread, TurnID: r.turnID})
	}
	r.grace = time.After(provider.Grace)
	return nil
}

// ended is the outcome of the program's output ending before the turn.
func (r *run) ended(err error) *outcome {
	if r.canceled {
		return r.interrupted()
	}
	if errors.Is(err, provider.ErrLineTooLong) {
		return r.protocol("sent %v", err)
	}
	what := "exited before it ended the turn"
	switch r.phase {
	case phaseInitialize:
		what = "exited before it answered initialize"
	case phaseThread:
		what = "exited before it opened the thread"
	}
	if err != io.EOF {
		return r.failed(reason.ProviderExited, "codex %s: reading its output: %v", what, err)
	}
	return r.failed(reason.ProviderExited, "codex %s", what)
}

// handle processes one line of the server's output.
func (r *run) handle(line []byte) *outcome {
	var m message
	if err := json.Unmarshal(line, &m); err != nil {
		return r.protocol("sent a line that is not a JSON object (%d bytes): %v", len(line), err)
	}
	hasID := len(m.ID) > 0 && string(m.ID) != "null"
	switch {
	case m.Method != "" && hasID:
		r.serve(m)
		return nil
	case m.Method != "":
		return r.notified(m)
	case hasID && (m.Result != nil || m.Error != nil):
		return r.answered(m)
	}
	return r.protocol("sent a message that is neither a request, a notification nor a response")
}

// answered handles the response to one of our requests.
func (r *run) answered(m message) *outcome {
	var id int64
	if err := json.Unmarshal(m.ID, &id); err != nil {
		return r.protocol("answered a request nlx did not send (id %s)", m.ID)
	}
	meth, ok := r.pending[id]
	if !ok {
		return r.protocol("answered a request nlx did not send (id %d)", id)
	}
	delete(r.pending, id)
	switch meth {
	case methodInitialize:
		if m.Error != nil {
			return r.failed(reason.ProviderError, "codex refused initialize: %v", m.Error)
		}
		_ = r.out.Send(notification{Method: methodInitialized})
		r.initialized = true
		r.phase = phaseThread
		if r.turn.Resume != "" {
			r.call(methodThreadResume, threadResumeParams{ThreadID: r.turn.Resume, Cwd: r.turn.Cwd, ApprovalPolicy: r.policy,
				ApprovalsReviewer: reviewerUser, Sandbox: sandboxNone, ExcludeTurns: true})
		} else {
			r.call(methodThreadStart, threadStartParams{Cwd: r.turn.Cwd, ApprovalPolicy: r.policy,
				ApprovalsReviewer: reviewerUser, Sandbox: sandboxNone})
		}
	case methodThreadStart, methodThreadResume:
		if m.Error != nil {
			if meth == methodThreadResume {
				return &outcome{err: fmt.Errorf("codex: thread/resume %s: %s: %w", r.turn.Resume, m.Error.Message, provider.ErrResumeRejected)}
			}
			return r.failed(reason.ProviderError, "codex refused %s: %v", meth, m.Error)
		}
		var res threadResult
		if err := json.Unmarshal(m.Result, &res); err != nil || res.Thread.ID == "" {
			return r.protocol("answered %s without a thread id", meth)
		}
		r.thread = res.Thread.ID
		r.emit(provider.Event{Type: provider.EventSession, Session: r.thread})
		if r.canceled {
			return r.interrupted()
		}
		r.startTurn()
	case methodTurnStart:
		if m.Error != nil {
			return r.failed(reason.ProviderError, "codex refused turn/start: %v", m.Error)
		}
		var res turnResult
		if err := json.Unmarshal(m.Result, &res); err != nil || res.Turn.ID == "" {
			return r.protocol("answered turn/start without a turn id")
		}
		if r.turnID == "" {
			r.turnID = res.Turn.ID
		}
		r.phase = phaseTurn
		if r.canceled {
			r.call(methodTurnInterrupt, turnInterruptParams{ThreadID: r.thread, TurnID: r.turnID})
		}
	case methodTurnInterrupt:
		// {} or an error (the turn already ended): turn/completed, or
		// Grace, ends the wait either way.
	case methodConfigRead, methodConfigBatchWrite, methodMCPReload, methodMCPStatusList:
		// The late answer of a refresh that gave up waiting for it:
		// nothing waits for it any more.
	}
	return nil
}

// startTurn starts the turn on the thread.
func (r *run) startTurn() {
	r.phase = phaseTurnStart
	r.call(methodTurnStart, turnStartParams{ThreadID: r.thread, Input: []userInput{{Type: inputText, Text: r.turn.Prompt}},
		Cwd: r.turn.Cwd, ApprovalPolicy: r.policy, ApprovalsReviewer: reviewerUser,
		SandboxPolicy: sandboxPolicy{Type: sandboxExternal, NetworkAccess: networkEnabled}})
}

// ours reports whether a notification of thread and turn is of this
// turn. Before turn/start's answer the turn is adopted from it.
func (r *run) ours(thread, turn string) bool {
	if (thread != "" && thread != r.thread) || r.finished[turn] {
		return false
	}
	if r.turnID == "" && r.phase >= phaseTurnStart && turn != "" {
		r.turnID = turn
	}
	return turn == "" || turn == r.turnID
}

// notified handles a notification.
func (r *run) notified(m message) *outcome {
	if r.thread == "" {
		return nil // nothing of a turn before the thread
	}
	switch m.Method {
	case notifyTurnStarted:
		var n turnNotification
		if err := json.Unmarshal(m.Params, &n); err != nil {
			return r.protocol("sent %s with bad params: %v", m.Method, err)
		}
		r.ours(n.ThreadID, n.Turn.ID)
	case notifyTurnCompleted:
		var n turnNotification
		if err := json.Unmarshal(m.Params, &n); err != nil {
			return r.protocol("sent %s with bad params: %v", m.Method, err)
		}
		if n.Turn.ID == "" || !r.ours(n.ThreadID, n.Turn.ID) {
			return nil
		}
		return r.completed(n.Turn)
	case notifyItemStarted, notifyItemCompleted:
		var n itemNotification
		if err := json.Unmarshal(m.Params, &n); err != nil {
			return r.protocol("sent %s with bad params: %v", m.Method, err)
		}
		if !r.ours(n.ThreadID, n.TurnID) {
			return nil
		}
		if m.Method == notifyItemStarted {
			r.itemStarted(n.Item)
		} else {
			r.itemCompleted(n.Item)
		}
	case notifyAgentMessageDelta, notifyReasoningSummary, notifyReasoningText, notifyCommandOutput, notifyFileChangeOutput:
		var n deltaNotification
		if err := json.Unmarshal(m.Params, &n); err != nil {
			return r.protocol("sent %s with bad params: %v", m.Method, err)
		}
		if !r.ours(n.ThreadID, n.TurnID) {
			return nil
		}
		r.delta(m.Method, n)
	case notifyTokenUsage:
		var n tokenUsageNotification
		if err := json.Unmarshal(m.Params, &n); err != nil {
			return r.protocol("sent %s with bad params: %v", m.Method, err)
		}
		// On resume Codex restates the last turn's usage, under that
		// turn's id: only this turn's count.
		if r.turnID == "" || n.ThreadID != r.thread || n.TurnID != r.turnID {
			return nil
		}
		r.tokens(n)
	case notifyError:
		var n errorNotification
		if err := json.Unmarshal(m.Params, &n); err != nil {
			return r.protocol("sent %s with bad params: %v", m.Method, err)
		}
		if r.ours(n.ThreadID, n.TurnID) && !n.WillRetry {
			r.lastErr = errorText(n.Error)
		}
	}
	return nil
}

func errorText(e turnError) string {
	if e.AdditionalDetails != "" && !strings.Contains(e.Message, e.AdditionalDetails) {
		return e.Message + ": " + e.AdditionalDetails
	}
	return e.Message
}

// completed ends the turn at turn/completed.
func (r *run) completed(t wireTurn) *outcome {
	if r.canceled {
		if t.Status == turnCompleted {
			// Finished after all: recorded, never the result.
			stale := r.text()
			if stale == "" {
				stale = itemsText(t.Items)
			}
			r.h.Event(provider.Event{Type: provider.EventStale, Text: stale})
		}
		return r.interrupted()
	}
	switch t.Status {
	case turnCompleted:
		if len(r.texts) == 0 {
			if s := itemsText(t.Items); s != "" {
				r.addText("", s)
			}
		}
		return &outcome{res: r.result(provider.StatusCompleted, nil)}
	case turnFailed:
		msg := r.lastErr
		if t.Error != nil && t.Error.Message != "" {
			msg = errorText(*t.Error)
		}
		if msg == "" {
			msg = "codex reported the turn failed, without a message"
		}
		return &outcome{res: r.result(provider.StatusFailed, &provider.Error{Code: reason.ProviderError, Message: msg})}
	case turnInterrupted:
		return &outcome{res: r.result(provider.StatusFailed, &provider.Error{Code: reason.ProviderError,
			Message: "codex interrupted the turn, unasked"})}
	}
	return r.protocol("completed the turn with status %q", t.Status)
}

// itemsText is the agent messages' text of a turn's items.
func itemsText(items []wireItem) string {
	var b strings.Builder
	for _, it := range items {
		if it.Type == itemAgentMessage {
			b.WriteString(it.Text)
		}
	}
	return b.String()
}

// addText starts (or, when Codex streams the message again on a retry,
// restarts) an agent message.
func (r *run) addText(id, text string) *agentText {
	if t, ok := r.textByID[id]; ok && id != "" {
		t.b.Reset()
		t.deltas = false
		t.b.WriteString(text)
		return t
	}
	t := &agentText{}
	t.b.WriteString(text)
	r.texts = append(r.texts, t)
	if id != "" {
		r.textByID[id] = t
	}
	if text != "" {
		r.emit(provider.Event{Type: provider.EventText, Text: text})
	}
	return t
}

func (r *run) itemStarted(it wireItem) {
	switch it.Type {
	case itemAgentMessage:
		r.addText(it.ID, "")
	case itemCommandExecution, itemFileChange, itemMcpToolCall, itemDynamicToolCall, itemWebSearch:
		ti := r.tool(it)
		e := provider.EventToolStart
		if ti.started {
			e = provider.EventToolUpdate
		}
		ti.started = true
		r.emit(provider.Event{Type: e, Tool: &provider.Tool{ID: it.ID, Name: ti.name, Input: ti.input, Status: toolStatus(it.Status)}})
	}
}

func (r *run) itemCompleted(it wireItem) {
	switch it.Type {
	case itemAgentMessage:
		t, ok := r.textByID[it.ID]
		if !ok {
			r.addText(it.ID, it.Text)
			return
		}
		if !t.deltas && t.b.Len() == 0 && it.Text != "" {
			t.b.WriteString(it.Text)
			r.emit(provider.Event{Type: provider.EventText, Text: it.Text})
		}
	case itemCommandExecution, itemFileChange, itemMcpToolCall, itemDynamicToolCall, itemWebSearch:
		ti := r.tool(it)
		out := ""
		if it.AggregatedOutput != nil {
			out = bound(*it.AggregatedOutput)
		}
		r.emit(provider.Event{Type: provider.EventToolEnd, Tool: &provider.Tool{ID: it.ID, Name: ti.name, Input: ti.input,
			Output: out, Status: toolStatus(it.Status)}})
	}
}

// tool is the item's tool call, noted at its first sight.
func (r *run) tool(it wireItem) *toolItem {
	ti, ok := r.tools[it.ID]
	if !ok {
		ti = &toolItem{name: string(it.Type)}
		r.tools[it.ID] = ti
	}
	switch it.Type {
	case itemCommandExecution:
		if it.Command != "" {
			ti.command, ti.input = it.Command, it.Command
		}
	case itemFileChange:
		if len(it.Changes) > 0 {
			ti.paths = ti.paths[:0]
			for _, c := range it.Changes {
				ti.paths = append(ti.paths, c.Path)
			}
			ti.input = strings.Join(ti.paths, "\n")
		}
	case itemMcpToolCall:
		ti.input = it.Server + "/" + it.Tool
	case itemDynamicToolCall:
		ti.input = it.Tool
	case itemWebSearch:
		ti.input = it.Query
	}
	return ti
}

func toolStatus(s itemStatus) provider.ToolStatus {
	switch s {
	case itemInProgress:
		return provider.ToolRunning
	case itemCompleted:
		return provider.ToolCompleted
	case itemFailed:
		return provider.ToolFailed
	case itemDeclined:
		return provider.ToolDeclined
	}
	return ""
}

func bound(s string) string {
	if len(s) <= maxToolOutput {
		return s
	}
	return s[:maxToolOutput] + "\n[... output cut by nlx]"
}

func (r *run) delta(m method, n deltaNotification) {
	switch m {
	case notifyAgentMessageDelta:
		t, ok := r.textByID[n.ItemID]
		if !ok {
			t = r.addText(n.ItemID, "")
		}
		t.deltas = true
		t.b.WriteString(n.Delta)
		r.emit(provider.Event{Type: provider.EventText, Text: n.Delta})
	case notifyReasoningSummary, notifyReasoningText:
		r.emit(provider.Event{Type: provider.EventReasoning, Text: n.Delta})
	case notifyCommandOutput, notifyFileChangeOutput:
		name := string(itemCommandExecution)
		if m == notifyFileChangeOutput {
			name = string(itemFileChange)
		}
		if ti, ok := r.tools[n.ItemID]; ok {
			name = ti.name
		}
		r.emit(provider.Event{Type: provider.EventToolUpdate, Tool: &provider.Tool{ID: n.ItemID, Name: name,
			Output: bound(n.Delta), Status: provider.ToolRunning}})
	}
}

// tokens counts the turn's usage: the thread's total less what it was
// before the turn (the first update's total less its last request).
func (r *run) tokens(n tokenUsageNotification) {
	if r.base == nil {
		b := n.TokenUsage.Total.minus(n.TokenUsage.Last)
		r.base = &b
	}
	u := n.TokenUsage.Total.minus(*r.base)
	r.usage = provider.Usage{InputTokens: u.InputTokens, CachedInputTokens: u.CachedInputTokens,
		OutputTokens: u.OutputTokens, ReasoningTokens: u.ReasoningOutputTokens}
	usage := r.usage
	r.emit(provider.Event{Type: provider.EventUsage, Usage: &usage})
}

// serve answers a server request: an approval goes to the handler (in a
// goroutine: the loop goes on reading), anything else is refused at once.
func (r *run) serve(m message) {
	switch m.Method {
	case requestCommandApproval:
		var p commandApprovalParams
		if err := json.Unmarshal(m.Params, &p); err != nil {
			r.refuse(m.ID, errInvalidParams, "nlx could not read the request's params: "+err.Error())
			return
		}
		perm := provider.Permission{Kind: provider.PermissionCommand, Tool: string(itemCommandExecution),
			Command: deref(p.Command), Cwd: deref(p.Cwd), Reason: deref(p.Reason)}
		if ti, ok := r.tools[p.ItemID]; ok && perm.Command == "" {
			perm.Command = ti.command
		}
		if perm.Cwd == "" {
			perm.Cwd = r.turn.Cwd
		}
		if n := p.NetworkApproval; n != nil {
			perm.Reason = strings.TrimSpace(perm.Reason + " (network access to " + n.Host + " over " + n.Protocol + ")")
		}
		r.ask(m.ID, perm)
	case requestFileChangeApproval:
		var p fileChangeApprovalParams
		if err := json.Unmarshal(m.Params, &p); err != nil {
			r.refuse(m.ID, errInvalidParams, "nlx could not read the request's params: "+err.Error())
			return
		}
		perm := provider.Permission{Kind: provider.PermissionFileChange, Tool: string(itemFileChange), Cwd: r.turn.Cwd,
			Reason: deref(p.Reason)}
		if ti, ok := r.tools[p.ItemID]; ok {
			perm.Paths = append(perm.Paths, ti.paths...)
		}
		if p.GrantRoot != nil && *p.GrantRoot != "" {
			perm.Paths = append(perm.Paths, *p.GrantRoot)
		}
		r.ask(m.ID, perm)
	case requestPermissions:
		// Wider sandbox permissions: nlx's sandbox is fixed for the turn.
		_ = r.out.Send(response{ID: m.ID, Result: permissionsResponse{Scope: grantTurn}})
	case requestElicitation:
		_ = r.out.Send(response{ID: m.ID, Result: elicitationResponse{Action: elicitationDecline}})
	case requestDynamicToolCall:
		_ = r.out.Send(response{ID: m.ID, Result: dynamicToolResponse{ContentItems: []struct{}{}, Success: false}})
	case requestLegacyPatch, requestLegacyExec:
		var d legacyDenied
		d.Denied.Rejection = "nlx answers approvals through item/*/requestApproval only"
		_ = r.out.Send(response{ID: m.ID, Result: legacyApprovalResponse{Decision: d}})
	default:
		// The model's questions to a user (requestUserInput), ChatGPT
		// token refreshes, attestations and whatever a later version
		// asks: a JSON-RPC error, which Codex takes as a refusal.
		r.refuse(m.ID, errMethodNotFound, "nlx does not serve "+string(m.Method))
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// refuse answers a request with a JSON-RPC error.
func (r *run) refuse(id json.RawMessage, code int64, msg string) {
	_ = r.out.Send(response{ID: id, Error: &rpcError{Code: code, Message: msg}})
}

// ask routes an approval request to the handler and answers it with the
// decision: accept only on an allow, decline on anything else.
func (r *run) ask(id json.RawMessage, p provider.Permission) {
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		d, err := r.h.Permission(r.perms, p)
		answer := decisionDecline
		if err == nil && d.Allow {
			answer = decisionAccept
		}
		_ = r.out.Send(response{ID: id, Result: approvalResponse{Decision: answer}})
	}()
}
