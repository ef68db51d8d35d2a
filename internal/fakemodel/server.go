// Package fakemodel is the one fake of the provider tests: a model served
// on 127.0.0.1 that speaks both APIs the real provider programs stream
// from, OpenAI's Responses API (Codex: POST /v1/responses) and Anthropic's
// Messages API (Claude Code: POST /v1/messages), from a script of replies,
// and records every request it got. Nothing else of a provider is faked:
// the tests drive the real programs against it.
//
// Each agent request (a turn of the conversation, as opposed to the
// auxiliary calls a provider makes on the side: titles, quota probes,
// token counts) takes the next reply of the script; with none left it
// answers "ok". A reply is a list of steps streamed in order: text and
// reasoning deltas, a shell tool call, an API error, a stall, a
// disconnect.
package fakemodel

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// API names the wire protocol of a request.
type API string

// The APIs served.
const (
	Responses API = "responses" // OpenAI Responses (Codex)
	Messages  API = "messages"  // Anthropic Messages (Claude Code)
)

// Reply is what the model answers one agent request with.
type Reply struct {
	Steps []Step
}

// Step is one part of a reply. Exactly one field is set.
type Step struct {
	// Text is streamed as assistant text deltas (a few characters each).
	Text string
	// Reasoning is streamed as reasoning (thinking) deltas.
	Reasoning string
	// Command is a shell tool call: Codex's exec_command {"cmd"}, Claude
	// Code's Bash {"command"}. The reply ends after it (the provider runs
	// it, or not, and sends the result in its next request).
	Command string
	// Error answers with an HTTP error instead of a stream; it must be the
	// reply's only step.
	Error *APIError
	// Stall waits this long (or until the client goes away, or Release is
	// closed) before the next step.
	Stall time.Duration
	// Release, with Stall, ends the stall early when closed.
	Release chan struct{}
	// Disconnect closes the connection mid-stream, without a terminal
	// event.
	Disconnect bool
	// Call is a call of a tool other than the shell (an MCP tool the
	// provider offers). The reply ends after it, as after a Command.
	Call *Call
}

// Call is a tool call by name. Tool names are written as the provider
// offers them to the model: Claude Code's mcp__SERVER__TOOL, and for
// Codex, which offers an MCP server's tools as functions of a namespace
// (mcp__SERVER), the namespace and the function joined the same way
// (mcp__SERVER__TOOL): Request.Tools lists them so too.
type Call struct {
	Name string
	// Arguments is the call's input, a JSON object ({} when nil).
	Arguments json.RawMessage
}

// arguments is the call's input, {} when it has none.
func (c *Call) arguments() json.RawMessage {
	if len(c.Arguments) == 0 {
		return json.RawMessage("{}")
	}
	return c.Arguments
}

// APIError is an HTTP error answer.
type APIError struct {
	Status  int    // 500, 429, 400, ...
	Type    string // the API's error type: server_error, overloaded_error, ...
	Message string
}

// Request is one request the model got.
type Request struct {
	API    API
	Method string
	Path   string
	Header http.Header
	Body   json.RawMessage
	// Agent is true for a request that took a reply of the script (a turn
	// of the conversation), false for an auxiliary one.
	Agent bool
	// Tools are the names of the tools the request offers the model.
	Tools []string
	// Texts are every text of the request's conversation, in order: the
	// instructions are not included; user, assistant and tool-result texts
	// are.
	Texts []string
	At    time.Time
}

// Server is a running fake model.
type Server struct {
	srv *http.Server
	ln  net.Listener

	mu       sync.Mutex
	script   []Reply
	requests []Request
	agent    chan struct{} // one send per agent request received
}

// Start serves the fake model on a free port of 127.0.0.1.
func Start() (*Server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("fake model: %w", err)
	}
	s := &Server{ln: ln, agent: make(chan struct{}, 1024)}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/responses", s.serveResponses)
	mux.HandleFunc("POST /v1/messages", s.serveMessages)
	mux.HandleFunc("POST /v1/messages/count_tokens", s.serveMessages)
	mux.HandleFunc("/", s.serveOther)
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go s.srv.Serve(ln)
	return s, nil
}

// URL is the server's base URL, http://127.0.0.1:PORT (Claude Code's
// ANTHROPIC_BASE_URL; Codex's base_url is URL()+"/v1").
func (s *Server) URL() string { return "http://" + s.ln.Addr().String() }

// Close stops the server, ending every stream.
func (s *Server) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if s.srv.Shutdown(ctx) != nil {
		s.srv.Close()
	}
}

// Push appends replies to the script.
func (s *Server) Push(r ...Reply) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.script = append(s.script, r...)
}

// Requests returns every request received so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// AgentRequests returns the agent requests received so far.
func (s *Server) AgentRequests() []Request {
	var out []Request
	for _, r := range s.Requests() {
		if r.Agent {
			out = append(out, r)
		}
	}
	return out
}

// WaitAgent blocks until the next agent request arrives (counting from the
// last WaitAgent), or ctx ends.
func (s *Server) WaitAgent(ctx context.Context) error {
	select {
	case <-s.agent:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("fake model: no agent request: %w", ctx.Err())
	}
}

// WaitTaken blocks until every reply pushed so far has been taken by an
// agent request (the last one may still be streaming), or ctx ends.
func (s *Server) WaitTaken(ctx context.Context) error {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		s.mu.Lock()
		left := len(s.script)
		s.mu.Unlock()
		if left == 0 {
			return nil
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return fmt.Errorf("fake model: %d replies not taken: %w", left, ctx.Err())
		}
	}
}

// record stores a request and, for an agent one, takes its reply.
func (s *Server) record(r Request) Reply {
	s.mu.Lock()
	defer s.mu.Unlock()
	r.At = time.Now()
	s.requests = append(s.requests, r)
	if !r.Agent {
		return Reply{}
	}
	select {
	case s.agent <- struct{}{}:
	default:
	}
	if len(s.script) == 0 {
		return Reply{Steps: []Step{{Text: "ok"}}}
	}
	next := s.script[0]
	s.script = s.script[1:]
	return next
}

// readBody reads a request body of at most 32 MiB.
func readBody(r *http.Request) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r.Body, 32<<20))
	if err != nil {
		return nil, fmt.Errorf("fake model: read body: %w", err)
	}
	return data, nil
}

// serveOther records any other request and answers 404.
func (s *Server) serveOther(w http.ResponseWriter, r *http.Request) {
	body, _ := readBody(r)
	s.record(Request{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Body: jsonOrNull(body)})
	http.NotFound(w, r)
}

func jsonOrNull(b []byte) json.RawMessage {
	if json.Valid(b) && len(b) > 0 {
		return b
	}
	return json.RawMessage("null")
}

// stall waits for d, or until ctx ends or release closes; false when the
// client went away.
func stall(ctx context.Context, d time.Duration, release chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-release:
		return true
	case <-ctx.Done():
		return false
	}
}

// chunks splits s into deltas of a few characters.
func chunks(s string) []string {
	const n = 8
	var out []string
	r := []rune(s)
	for len(r) > n {
		out = append(out, string(r[:n]))
		r = r[n:]
	}
	if len(r) > 0 {
		out = append(out, string(r))
	}
	return out
}

// sse writes server-sent events and flushes each.
type sse struct {
	w http.ResponseWriter
	f http.Flusher
}

func newSSE(w http.ResponseWriter) *sse {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	f, _ := w.(http.Flusher)
	return &sse{w: w, f: f}
}

// event writes one event with a JSON data line.
func (e *sse) event(name string, data any) error {
	b, err := json.Marshal(data)
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintf(e.w, "event: %s\ndata: %s\n\n", name, b); err != nil {
		return err
	}
	if e.f != nil {
		e.f.Flush()
	}
	return nil
}

// disconnect closes the client's connection without ending the stream.
func disconnect(w http.ResponseWriter) {
	if h, ok := w.(http.Hijacker); ok {
		if c, _, err := h.Hijack(); err == nil {
			c.Close()
			return
		}
	}
	panic(http.ErrAbortHandler)
}

// writeError answers with an API error in the API's JSON shape.
func writeError(w http.ResponseWriter, api API, e *APIError) {
	status := e.Status
	if status == 0 {
		status = http.StatusInternalServerError
	}
	var body any
	switch api {
	case Messages:
		body = map[string]any{"type": "error", "error": map[string]any{"type": e.Type, "message": e.Message}}
	default:
		body = map[string]any{"error": map[string]any{"type": e.Type, "message": e.Message, "code": e.Type}}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}

var errNotJSON = errors.New("fake model: request body is not JSON")
