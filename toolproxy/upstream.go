package toolproxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Conn is a connection to one real MCP server: whole JSON-RPC messages.
type Conn interface {
	// Read blocks until the server sends a message; io.EOF (or another
	// error) once it is gone.
	Read() ([]byte, error)
	// Write sends one message. Writes are not concurrent (the upstream
	// serializes them).
	Write(msg []byte) error
	// Close ends the connection and, for a program, the program.
	Close() error
}

// StreamConn is a Conn over a stdio MCP server's pipes: its stdout (r)
// and stdin (w), a message a line. Close closes stdin, then calls stop
// (which ends the program, and may be nil).
func StreamConn(r io.Reader, w io.WriteCloser, stop func() error) Conn {
	return &streamConn{r: newLineReader(r), w: &lineWriter{w: w}, closer: w, stop: stop}
}

type streamConn struct {
	r      *lineReader
	w      *lineWriter
	closer io.Closer
	stop   func() error
	once   sync.Once
	err    error
}

func (c *streamConn) Read() ([]byte, error) {
	line, err := c.r.next()
	if err != nil {
		return nil, err
	}
	return append([]byte(nil), line...), nil
}

func (c *streamConn) Write(msg []byte) error { return c.w.write(msg) }

func (c *streamConn) Close() error {
	c.once.Do(func() {
		c.err = c.closer.Close()
		if c.stop != nil {
			if err := c.stop(); err != nil {
				c.err = err
			}
		}
	})
	return c.err
}

// DialHTTP connects to a streamable-HTTP MCP server (go-sdk's client
// transport, which keeps the session and reads server-sent events):
// endpoint is its URL; when socket is set, every request goes over that
// Unix socket instead of TCP.
func DialHTTP(ctx context.Context, endpoint, socket string) (Conn, error) {
	client := &http.Client{Timeout: 0}
	if socket != "" {
		d := &net.Dialer{Timeout: 10 * time.Second}
		client.Transport = &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return d.DialContext(ctx, "unix", socket)
			},
		}
	}
	t := &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: client, MaxRetries: -1}
	conn, err := t.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &sdkConn{conn: conn, ctx: context.WithoutCancel(ctx)}, nil
}

// sdkConn is a go-sdk connection as a Conn.
type sdkConn struct {
	conn mcp.Connection
	ctx  context.Context
}

func (c *sdkConn) Read() ([]byte, error) {
	m, err := c.conn.Read(c.ctx)
	if err != nil {
		return nil, err
	}
	return jsonrpc.EncodeMessage(m)
}

func (c *sdkConn) Write(msg []byte) error {
	m, err := jsonrpc.DecodeMessage(msg)
	if err != nil {
		return err
	}
	return c.conn.Write(c.ctx, m)
}

func (c *sdkConn) Close() error { return c.conn.Close() }

// clientProtocolVersion is the MCP version the proxy asks a real server
// for; the server answers with one it speaks, which the proxy accepts
// (it uses only tools/list and tools/call, alike in every version).
const clientProtocolVersion = "2025-06-18"

// startTimeout bounds a server's start: its connection and its answer to
// initialize.
const startTimeout = 30 * time.Second

// upstream is the proxy's client of one real MCP server.
type upstream struct {
	name string // the config's tool name
	hash string // the spec it was started from
	conn Conn

	wmu     sync.Mutex // serializes writes
	nextID  atomic.Int64
	mu      sync.Mutex
	pending map[int64]func(*message, error) // each request's answer: the response, or why none comes
	tools   []upstreamTool                  // nil until listed, and again once the server says its list changed
	gone    chan struct{}                   // closed when the connection ended
	err     error                           // why it ended
	changed func()                          // the server said its tool list changed
}

// upstreamTool is one tool as the server lists it.
type upstreamTool struct {
	name string
	def  map[string]json.RawMessage // its definition, as the server sent it
}

// startUpstream connects to s and initializes the session.
func startUpstream(ctx context.Context, s Server, version string, changed func()) (*upstream, error) {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	conn, err := s.Dial(ctx)
	if err != nil {
		return nil, err
	}
	u := &upstream{name: s.Name, hash: s.Hash, conn: conn, pending: map[int64]func(*message, error){}, gone: make(chan struct{}), changed: changed}
	go u.read()
	init := map[string]any{
		"protocolVersion": clientProtocolVersion,
		"capabilities":    map[string]any{},
		"clientInfo":      map[string]string{"name": "nlx", "version": version},
	}
	m, err := u.call(ctx, methodInitialize, init)
	if err != nil {
		u.close()
		return nil, fmt.Errorf("initialize: %w", err)
	}
	if m.Error != nil {
		u.close()
		return nil, fmt.Errorf("initialize: %w", m.Error)
	}
	if err := u.send(notification{JSONRPC: jsonrpcVersion, Method: methodInitialized}); err != nil {
		u.close()
		return nil, err
	}
	return u, nil
}

// send writes one message.
func (u *upstream) send(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return u.write(b)
}

func (u *upstream) write(b []byte) error {
	u.wmu.Lock()
	defer u.wmu.Unlock()
	return u.conn.Write(b)
}

// call sends a request and waits for its response.
func (u *upstream) call(ctx context.Context, method string, params any) (*message, error) {
	id := u.nextID.Add(1)
	b, err := json.Marshal(request{JSONRPC: jsonrpcVersion, ID: id, Method: method, Params: params})
	if err != nil {
		return nil, err
	}
	return u.roundTrip(ctx, id, b)
}

// startCall sends a call of the server's tool and returns at once:
// answer is called with the response (or why none comes) from the
// server's reader, and cancel drops it and tells the server (when it has
// not been answered yet).
func (u *upstream) startCall(tool string, args, meta json.RawMessage, answer func(*message, error)) (cancel func() bool, err error) {
	id := u.nextID.Add(1)
	if err := u.expect(id, answer); err != nil {
		return nil, err
	}
	if err := u.write(appendCall(id, tool, args, meta)); err != nil {
		u.forget(id)
		return nil, fmt.Errorf("tool server %s: %w", u.name, err)
	}
	return func() bool {
		return u.cancel(id)
	}, nil
}

// cancel drops request id's answer and, when it was still awaited, tells
// the server; it reports whether it was.
func (u *upstream) cancel(id int64) bool {
	if !u.forget(id) {
		return false
	}
	_ = u.send(notification{JSONRPC: jsonrpcVersion, Method: methodCancelled,
		Params: map[string]any{"requestId": id, "reason": "cancelled by the provider"}})
	return true
}

// expect registers the answer of request id.
func (u *upstream) expect(id int64, answer func(*message, error)) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.err != nil {
		return fmt.Errorf("tool server %s ended: %w", u.name, u.err)
	}
	u.pending[id] = answer
	return nil
}

// forget drops request id's answer; it reports whether it was still
// awaited.
func (u *upstream) forget(id int64) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	_, ok := u.pending[id]
	delete(u.pending, id)
	return ok
}

// roundTrip writes request id and waits for its response, the
// connection's end, or ctx (then the server is told the request is
// cancelled).
func (u *upstream) roundTrip(ctx context.Context, id int64, b []byte) (*message, error) {
	type answer struct {
		m   *message
		err error
	}
	ch := make(chan answer, 1)
	if err := u.expect(id, func(m *message, err error) { ch <- answer{m, err} }); err != nil {
		return nil, err
	}
	if err := u.write(b); err != nil {
		u.forget(id)
		return nil, fmt.Errorf("tool server %s: %w", u.name, err)
	}
	select {
	case a := <-ch:
		return a.m, a.err
	case <-ctx.Done():
		u.cancel(id)
		return nil, ctx.Err()
	}
}

// read dispatches the server's messages until the connection ends.
func (u *upstream) read() {
	var err error
	for {
		var b []byte
		if b, err = u.conn.Read(); err != nil {
			break
		}
		var m message
		if json.Unmarshal(b, &m) != nil {
			continue // not a message: nothing to answer
		}
		switch {
		case m.isResponse():
			id, perr := strconv.ParseInt(string(m.ID), 10, 64)
			u.mu.Lock()
			answer := u.pending[id]
			delete(u.pending, id)
			u.mu.Unlock()
			if perr == nil && answer != nil {
				answer(&m, nil)
			}
		case m.isRequest():
			// The server asks nlx for something (sampling, roots,
			// elicitation): nlx grants a tool server nothing but a
			// ping's answer.
			if m.Method == methodPing {
				_ = u.write(concat(resultHead, m.ID, resultMid, []byte("{}"), closeBrace))
				continue
			}
			e, _ := json.Marshal(rpcError{Code: errMethodNotFound, Message: "nlx does not serve " + m.Method + " to a tool server"})
			_ = u.write(concat(resultHead, m.ID, errorMid, e, closeBrace))
		case m.Method == methodToolsListChanged:
			u.mu.Lock()
			u.tools = nil
			u.mu.Unlock()
			if u.changed != nil {
				u.changed()
			}
		}
	}
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	u.mu.Lock()
	u.err = err
	waiting := u.pending
	u.pending = map[int64]func(*message, error){}
	u.mu.Unlock()
	close(u.gone)
	for _, answer := range waiting {
		answer(nil, fmt.Errorf("tool server %s ended: %w", u.name, err))
	}
}

// alive reports whether the connection still runs.
func (u *upstream) alive() bool {
	select {
	case <-u.gone:
		return false
	default:
		return true
	}
}

// list returns the server's tools: cached, or asked for (every page).
func (u *upstream) list(ctx context.Context) ([]upstreamTool, error) {
	u.mu.Lock()
	cached := u.tools
	u.mu.Unlock()
	if cached != nil {
		return cached, nil
	}
	var tools []upstreamTool
	var cursor string
	for page := 0; ; page++ {
		if page == 1000 {
			return nil, fmt.Errorf("tool server %s: more than 1000 pages of tools", u.name)
		}
		params := map[string]any{}
		if cursor != "" {
			params["cursor"] = cursor
		}
		m, err := u.call(ctx, methodToolsList, params)
		if err != nil {
			return nil, err
		}
		if m.Error != nil {
			return nil, fmt.Errorf("tool server %s: tools/list: %w", u.name, m.Error)
		}
		var res struct {
			Tools      []map[string]json.RawMessage `json:"tools"`
			NextCursor string                       `json:"nextCursor"`
		}
		if err := json.Unmarshal(m.Result, &res); err != nil {
			return nil, fmt.Errorf("tool server %s: tools/list result: %w", u.name, err)
		}
		for _, def := range res.Tools {
			var name string
			if json.Unmarshal(def["name"], &name) != nil || name == "" {
				continue // a tool nobody could call
			}
			tools = append(tools, upstreamTool{name: name, def: def})
		}
		if res.NextCursor == "" {
			break
		}
		cursor = res.NextCursor
	}
	if tools == nil {
		tools = []upstreamTool{}
	}
	u.mu.Lock()
	u.tools = tools
	u.mu.Unlock()
	return tools, nil
}

// close ends the connection (and the server it started).
func (u *upstream) close() {
	_ = u.conn.Close()
}
