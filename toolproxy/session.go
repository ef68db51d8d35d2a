package toolproxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nlx-dev/nlx/internal/fault"
	"github.com/nlx-dev/nlx/internal/reason"
)

// The MCP versions the proxy speaks with a provider (newest last): it
// answers initialize with the provider's own when it is one of these, else
// with the newest.
var serverVersions = []string{"2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"}

// instructions are what the proxy's initialize tells the provider's model.
const instructions = "These are the tools this workspace may use, through nlx. Tools named SERVER__TOOL are SERVER's. " +
	"When a job's work is done, call nlx_report once with its structured result: nlx records it with the turn."

// session is one provider's MCP client connected to the proxy: on the
// provider's own pipes (the bridge handed them over), or on the bridge's
// connection.
type session struct {
	p  *Proxy
	id int64
	c  io.Closer
	r  *lineReader
	w  *lineWriter

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup // requests not answered yet

	// told is set when the provider was told the tools changed, until it
	// lists them again.
	told atomic.Bool

	mu          sync.Mutex
	initialized bool
	inflight    map[string]func() // by request id: what cancels it
}

func newSession(p *Proxy, r io.Reader, w io.Writer, c io.Closer) *session {
	ctx, cancel := context.WithCancel(context.Background())
	return &session{p: p, id: p.sessionSq.Add(1), c: c, r: newLineReader(r), w: &lineWriter{w: w},
		ctx: ctx, cancel: cancel, inflight: map[string]func(){}}
}

// serve reads the provider's messages until the connection ends. A
// client that stops writing (its stdin closed) still gets the answers to
// what it asked; a connection that fails, or a proxy that stops, cancels
// them.
func (s *session) serve() {
	defer func() {
		s.cancelAll()
		s.cancel()
		s.wg.Wait()
		s.c.Close()
	}()
	for {
		line, err := s.r.next()
		if errors.Is(err, io.EOF) {
			answered := make(chan struct{})
			go func() {
				s.wg.Wait()
				close(answered)
			}()
			select {
			case <-answered:
			case <-s.ctx.Done():
			}
			return
		}
		if err != nil {
			return
		}
		var m message
		if err := json.Unmarshal(line, &m); err != nil {
			_ = s.w.writeError(json.RawMessage("null"), errParse, "nlx: not a JSON-RPC message: "+err.Error(), nil)
			continue
		}
		switch {
		case m.isRequest():
			s.request(&m)
		case m.Method == methodCancelled:
			var c struct {
				RequestID json.RawMessage `json:"requestId"`
			}
			if json.Unmarshal(m.Params, &c) == nil {
				s.mu.Lock()
				cancel := s.inflight[string(c.RequestID)]
				s.mu.Unlock()
				if cancel != nil {
					cancel()
				}
			}
		}
		// Other notifications (initialized, progress) and responses
		// (the proxy asks the provider nothing) need no answer.
	}
}

// cancelAll cancels every request not answered yet.
func (s *session) cancelAll() {
	s.mu.Lock()
	cancels := slices.Collect(maps.Values(s.inflight))
	s.mu.Unlock()
	for _, c := range cancels {
		c()
	}
}

// close ends the session.
func (s *session) close() {
	s.cancel()
	s.c.Close()
}

// ready reports whether the provider initialized the session.
func (s *session) ready() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.initialized
}

// notify sends the provider a notification.
func (s *session) notify(method string) error {
	if method == methodToolsListChanged {
		s.told.Store(true)
	}
	return s.w.writeMessage(notification{JSONRPC: jsonrpcVersion, Method: method})
}

func (s *session) request(m *message) {
	switch m.Method {
	case methodInitialize:
		s.initialize(m)
	case methodPing:
		_ = s.w.writeResult(m.ID, json.RawMessage("{}"))
	case methodToolsList:
		s.async(m, s.list)
	case methodToolsCall:
		s.call(m)
	default:
		_ = s.w.writeError(m.ID, errMethodNotFound, "nlx's tool proxy does not serve "+m.Method, nil)
	}
}

// async handles a request in a goroutine of its own, cancelled by the
// provider's notifications/cancelled or the session's end.
func (s *session) async(m *message, handle func(ctx context.Context, m *message)) {
	ctx, cancel := context.WithCancel(s.ctx)
	key := string(m.ID)
	s.track(key, cancel)
	go func() {
		defer s.untrack(key)
		defer cancel()
		handle(ctx, m)
	}()
}

// track counts request key as not answered yet, cancelled by cancel.
func (s *session) track(key string, cancel func()) {
	s.wg.Add(1)
	s.mu.Lock()
	s.inflight[key] = cancel
	s.mu.Unlock()
}

// untrack counts request key as answered (or given up).
func (s *session) untrack(key string) {
	s.mu.Lock()
	delete(s.inflight, key)
	s.mu.Unlock()
	s.wg.Done()
}

func (s *session) initialize(m *message) {
	var params struct {
		ProtocolVersion string `json:"protocolVersion"`
	}
	_ = json.Unmarshal(m.Params, &params)
	version := serverVersions[len(serverVersions)-1]
	if slices.Contains(serverVersions, params.ProtocolVersion) {
		version = params.ProtocolVersion
	}
	res := map[string]any{
		"protocolVersion": version,
		"capabilities":    map[string]any{"tools": map[string]bool{"listChanged": true}},
		"serverInfo":      map[string]string{"name": "nlx", "title": "nlx tools", "version": s.p.version()},
		"instructions":    instructions,
	}
	b, err := json.Marshal(res)
	if err != nil {
		_ = s.w.writeError(m.ID, errInternal, err.Error(), nil)
		return
	}
	s.mu.Lock()
	s.initialized = true
	s.mu.Unlock()
	_ = s.w.writeResult(m.ID, b)
}

// list answers tools/list with the projection of now.
func (s *session) list(ctx context.Context, m *message) {
	if s.told.Swap(false) {
		// A test holds the answer to the list a change asked for here: a
		// provider that does not list again in time.
		fault.Point("toolproxy.relist")
	}
	pr, err := s.p.Projection(ctx)
	if err != nil {
		_ = s.w.writeError(m.ID, errInternal, "nlx could not read the workspace's tools: "+err.Error(), nil)
		return
	}
	n := 12
	for _, d := range pr.defs {
		n += len(d) + 1
	}
	b := make([]byte, 0, n)
	b = append(b, `{"tools":[`...)
	for i, d := range pr.defs {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, d...)
	}
	b = append(b, "]}"...)
	if err := s.w.writeResult(m.ID, b); err == nil {
		s.p.listed(Listing{Session: s.id, At: time.Now(), Projection: pr})
	}
}

// call routes tools/call: refused when the workspace may not use the
// tool now, answered by nlx for its own tools, else passed to the server
// and its answer passed back. Every call is recorded. A call to a server
// that runs is routed and sent from the session's reader, and its answer
// written from the server's: no goroutine is woken between; only a
// server yet to start is waited for in a goroutine of the call's own.
func (s *session) call(m *message) {
	c := Call{ID: "call-" + strconv.FormatInt(s.p.callSeq.Add(1), 10) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36),
		Turn: s.p.currentTurn(), Started: time.Now()}
	done := func() {
		c.Ended = time.Now()
		s.p.record(c)
	}
	var params callParams
	if err := json.Unmarshal(m.Params, &params); err != nil || params.Name == "" {
		c.Outcome, c.Code, c.Message = CallRefused, reason.InvalidRequest, "tools/call without a tool name"
		_ = s.w.writeError(m.ID, errInvalidParams, "nlx: tools/call needs params with a name", nil)
		done()
		return
	}
	c.Tool = params.Name
	args := params.Arguments
	if len(args) == 0 || string(args) == "null" {
		args = json.RawMessage("{}")
	}
	c.ArgsDigest = digest(args)
	own, srv, tool, err := s.p.route(s.ctx, params.Name)
	if err != nil {
		c.Outcome, c.Code, c.Message = CallRefused, reason.CodeOf(err), err.Error()
		_ = s.w.writeError(m.ID, errInvalidParams, "nlx: "+err.Error(), map[string]string{"nlx_code": string(c.Code)})
		done()
		return
	}
	if own != nil {
		res, report, isErr := own.call(args)
		c.Report = report
		c.Outcome = CallSucceeded
		if isErr {
			c.Outcome, c.Message = CallToolError, "the report was refused"
		}
		_ = s.w.writeResult(m.ID, res)
		done()
		return
	}
	c.Server = srv.Name
	if up := s.p.running(srv); up != nil {
		key := string(m.ID)
		var mu sync.Mutex
		var cancel func()
		requested := false
		s.track(key, func() {
			mu.Lock()
			f := cancel
			requested = f == nil
			mu.Unlock()
			if f != nil {
				f()
			}
		})
		f, _ := s.forward(m, &c, up, tool, params, func() {
			done()
			s.untrack(key)
		})
		mu.Lock()
		cancel = f
		late := requested
		mu.Unlock()
		if late {
			f()
		}
		return
	}
	s.async(m, func(ctx context.Context, m *message) {
		up, err := s.p.server(ctx, srv)
		if err != nil {
			c.Outcome, c.Code, c.Message = CallFailed, reason.CodeOf(err), err.Error()
			if ctx.Err() == nil {
				_ = s.w.writeError(m.ID, errInternal, "nlx: "+err.Error(), map[string]string{"nlx_code": string(c.Code)})
			}
			done()
			return
		}
		cancel, answered := s.forward(m, &c, up, tool, params, done)
		select {
		case <-answered:
		case <-ctx.Done():
			cancel()
			<-answered
		}
	})
}

// forward sends call c to server up and answers the provider when the
// server does (from the server's reader); done runs once it is over.
// cancel drops the call and tells the server, when it was not answered
// yet; answered is closed once it is over.
func (s *session) forward(m *message, c *Call, up *upstream, tool string, params callParams, done func()) (cancel func(), answered <-chan struct{}) {
	over := make(chan struct{})
	var once sync.Once
	finish := func(resp *message, err error, byProvider bool) {
		once.Do(func() {
			switch {
			case byProvider:
				// The provider cancelled it (or went): it wants no answer.
				c.Outcome, c.Code, c.Message = CallFailed, reason.TurnCancelled, "cancelled by the provider"
			case err != nil:
				c.Outcome, c.Code, c.Message = CallFailed, reason.ToolUnavailable, err.Error()
				_ = s.w.writeError(m.ID, errInternal, "nlx: "+err.Error(), map[string]string{"nlx_code": string(reason.ToolUnavailable)})
			case resp.Error != nil:
				c.Outcome, c.Message = CallFailed, fmt.Sprintf("the tool server answered an error: %v", resp.Error)
				b, _ := json.Marshal(resp.Error)
				_ = s.w.write(resultHead, m.ID, errorMid, b, closeBrace)
			default:
				c.Outcome = CallSucceeded
				if isErrorResult(resp.Result) {
					c.Outcome = CallToolError
				}
				result := resp.Result
				if len(result) == 0 {
					result = json.RawMessage("{}")
				}
				_ = s.w.writeResult(m.ID, result)
			}
			done()
			close(over)
		})
	}
	cf, err := up.startCall(tool, params.Arguments, params.Meta, func(resp *message, err error) { finish(resp, err, false) })
	if err != nil {
		finish(nil, err, false)
		return func() {}, over
	}
	return func() {
		if cf() {
			finish(nil, nil, true)
		}
	}, over
}

// isErrorResult reports whether a tool's result says isError: true,
// reading no more of it than it must.
func isErrorResult(result json.RawMessage) bool {
	if !bytes.Contains(result, []byte(`"isError"`)) {
		return false
	}
	var r struct {
		IsError bool `json:"isError"`
	}
	return json.Unmarshal(result, &r) == nil && r.IsError
}
