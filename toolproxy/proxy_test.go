package toolproxy

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/nlx-dev/nlx/internal/fdpass"
	"github.com/nlx-dev/nlx/internal/reason"
)

// The tests run real MCP servers and clients (the official Go SDK) on
// both sides of the proxy, in process: a server over a pipe pair as a
// stdio server would be, and the provider's client on the proxy's socket
// as the bridge connects it.

// testServer is one upstream MCP server and what it saw.
type testServer struct {
	name      string
	calls     atomic.Int64
	cancelled chan string // the slow tool's ctx ended
	stopped   atomic.Bool
	srv       *mcp.Server
}

type echoIn struct {
	Text string `json:"text"`
}

func newTestServer(name string, tools ...string) *testServer {
	ts := &testServer{name: name, cancelled: make(chan string, 4)}
	ts.srv = mcp.NewServer(&mcp.Implementation{Name: name, Version: "1"}, nil)
	for _, tool := range tools {
		switch tool {
		case "echo":
			mcp.AddTool(ts.srv, &mcp.Tool{Name: "echo", Description: "echo text"}, func(ctx context.Context, r *mcp.CallToolRequest, in echoIn) (*mcp.CallToolResult, any, error) {
				ts.calls.Add(1)
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: name + ": " + in.Text}}}, nil, nil
			})
		case "fail":
			mcp.AddTool(ts.srv, &mcp.Tool{Name: "fail", Description: "always fails"}, func(ctx context.Context, r *mcp.CallToolRequest, in echoIn) (*mcp.CallToolResult, any, error) {
				ts.calls.Add(1)
				return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "it failed"}}}, nil, nil
			})
		case "slow":
			mcp.AddTool(ts.srv, &mcp.Tool{Name: "slow", Description: "waits"}, func(ctx context.Context, r *mcp.CallToolRequest, in echoIn) (*mcp.CallToolResult, any, error) {
				ts.calls.Add(1)
				<-ctx.Done()
				ts.cancelled <- in.Text
				return nil, nil, ctx.Err()
			})
		}
	}
	return ts
}

// dial serves ts over a new pipe pair, as a stdio server's program would.
func (ts *testServer) dial(ctx context.Context) (Conn, error) {
	upR, upW := io.Pipe()     // proxy -> server
	downR, downW := io.Pipe() // server -> proxy
	go func() {
		_ = ts.srv.Run(context.Background(), &mcp.IOTransport{Reader: upR, Writer: downW})
		downW.Close()
	}()
	return StreamConn(downR, upW, func() error { ts.stopped.Store(true); return nil }), nil
}

func (ts *testServer) server(hash string) Server {
	return Server{Name: ts.name, Hash: hash, Dial: ts.dial}
}

// catalog is a Catalog the test changes.
type catalog struct {
	mu      sync.Mutex
	servers []Server
}

func (c *catalog) Servers(context.Context) ([]Server, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.servers), nil
}

func (c *catalog) set(s ...Server) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.servers = s
}

// recorder keeps the calls.
type recorder struct {
	mu    sync.Mutex
	calls []Call
}

func (r *recorder) record(c Call) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, c)
}

func (r *recorder) all() []Call {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.calls)
}

// start runs a proxy for one test.
func start(t *testing.T, cat Catalog, rec *recorder) *Proxy {
	t.Helper()
	p, err := Start(Options{Base: t.TempDir(), UID: os.Getuid(), GID: os.Getgid(), Catalog: cat, Record: rec.record, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	return p
}

// client connects a provider's MCP client to the proxy's socket; changed
// receives the proxy's list_changed notifications.
func client(t *testing.T, p *Proxy, changed chan struct{}) *mcp.ClientSession {
	t.Helper()
	c, err := net.Dial("unix", p.Socket())
	if err != nil {
		t.Fatal(err)
	}
	opts := &mcp.ClientOptions{}
	if changed != nil {
		opts.ToolListChangedHandler = func(context.Context, *mcp.ToolListChangedRequest) { changed <- struct{}{} }
	}
	cl := mcp.NewClient(&mcp.Implementation{Name: "provider", Version: "1"}, opts)
	s, err := cl.Connect(context.Background(), &mcp.IOTransport{Reader: c, Writer: c}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func toolNames(t *testing.T, s *mcp.ClientSession) []string {
	t.Helper()
	res, err := s.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
	}
	return names
}

func text(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func TestListExposesExactlyTheCatalog(t *testing.T) {
	files, web, other := newTestServer("files", "echo", "fail"), newTestServer("web", "echo"), newTestServer("other", "echo")
	cat := &catalog{}
	cat.set(files.server("1"), web.server("1"))
	p := start(t, cat, &recorder{})
	s := client(t, p, nil)
	want := []string{"files__echo", "files__fail", ReportTool, "web__echo"}
	if got := toolNames(t, s); !slices.Equal(got, want) {
		t.Errorf("tools %q, want %q", got, want)
	}
	if other.stopped.Load() || other.calls.Load() != 0 {
		t.Errorf("a server outside the catalog was touched")
	}
	pr, err := p.Projection(context.Background())
	if err != nil || !slices.Equal(pr.Tools, want) || !strings.HasPrefix(pr.Digest, "sha256:") {
		t.Errorf("projection %+v (%v), want %q", pr, err, want)
	}
}

func TestCallPassesThroughAndIsRecorded(t *testing.T) {
	files := newTestServer("files", "echo", "fail")
	cat := &catalog{}
	cat.set(files.server("1"))
	rec := &recorder{}
	p := start(t, cat, rec)
	p.SetTurn("turn-1")
	s := client(t, p, nil)
	res, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: "files__echo", Arguments: map[string]any{"text": "hi"}})
	if err != nil || res.IsError || text(res) != "files: hi" {
		t.Fatalf("call: %+v %v, want files: hi", res, err)
	}
	res, err = s.CallTool(context.Background(), &mcp.CallToolParams{Name: "files__fail", Arguments: map[string]any{"text": "x"}})
	if err != nil || !res.IsError || text(res) != "it failed" {
		t.Fatalf("failing call: %+v %v, want the tool's error result", res, err)
	}
	calls := waitCalls(t, rec, 2)
	c := calls[0]
	if c.Turn != "turn-1" || c.Tool != "files__echo" || c.Server != "files" || c.Outcome != CallSucceeded ||
		c.ArgsDigest != digest([]byte(`{"text":"hi"}`)) || c.Ended.Before(c.Started) {
		t.Errorf("record %+v", c)
	}
	if calls[1].Outcome != CallToolError {
		t.Errorf("failing call recorded %+v, want %s", calls[1], CallToolError)
	}
}

func waitCalls(t *testing.T, rec *recorder, n int) []Call {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if c := rec.all(); len(c) >= n {
			return c
		}
	}
	t.Fatalf("%d calls recorded, want %d", len(rec.all()), n)
	return nil
}

func TestCallOutsideTheCatalogIsRefused(t *testing.T) {
	files, other := newTestServer("files", "echo"), newTestServer("other", "echo")
	cat := &catalog{}
	cat.set(files.server("1"))
	rec := &recorder{}
	p := start(t, cat, rec)
	s := client(t, p, nil)
	for _, name := range []string{"other__echo", "echo", "nosuch__echo"} {
		_, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: map[string]any{"text": "x"}})
		if err == nil || !strings.Contains(err.Error(), "not") {
			t.Errorf("call of %s: %v, want refused", name, err)
		}
	}
	if other.calls.Load() != 0 {
		t.Errorf("the other server was called")
	}
	for _, c := range waitCalls(t, rec, 3) {
		if c.Outcome != CallRefused || c.Code != reason.ToolNotAllowed {
			t.Errorf("record %+v, want refused tool_not_allowed", c)
		}
	}
}

func TestRemovedToolIsRefusedAtOnce(t *testing.T) {
	files, web := newTestServer("files", "echo"), newTestServer("web", "echo")
	cat := &catalog{}
	cat.set(files.server("1"), web.server("1"))
	rec := &recorder{}
	p := start(t, cat, rec)
	s := client(t, p, nil)
	if got := toolNames(t, s); !slices.Contains(got, "web__echo") {
		t.Fatalf("tools %q", got)
	}
	if _, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: "web__echo", Arguments: map[string]any{"text": "a"}}); err != nil {
		t.Fatal(err)
	}
	// The apply removes web: the provider still lists it (nobody told
	// it), and its call is refused without reaching the server.
	cat.set(files.server("1"))
	_, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: "web__echo", Arguments: map[string]any{"text": "b"}})
	if err == nil || !strings.Contains(err.Error(), string(reason.ToolNotAllowed)) && !strings.Contains(err.Error(), "may not use") {
		t.Fatalf("call of a removed tool: %v, want refused", err)
	}
	if n := web.calls.Load(); n != 1 {
		t.Errorf("the removed server got %d calls, want 1 (before the removal)", n)
	}
	// The next list drops it and stops its server.
	if got := toolNames(t, s); slices.Contains(got, "web__echo") {
		t.Errorf("tools %q still list the removed server", got)
	}
	for deadline := time.Now().Add(5 * time.Second); !web.stopped.Load(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the removed server was not stopped")
		}
	}
}

func TestNotifyChangedAndWatch(t *testing.T) {
	files, web := newTestServer("files", "echo"), newTestServer("web", "echo")
	cat := &catalog{}
	cat.set(files.server("1"))
	p := start(t, cat, &recorder{})
	changed := make(chan struct{}, 4)
	s := client(t, p, changed)
	toolNames(t, s)
	listings, stop := p.Watch()
	defer stop()
	before, err := p.Projection(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	cat.set(files.server("1"), web.server("1"))
	if n := p.NotifyChanged(); n != 1 {
		t.Fatalf("told %d sessions, want 1", n)
	}
	select {
	case <-changed:
	case <-time.After(5 * time.Second):
		t.Fatal("the client got no list_changed")
	}
	go s.ListTools(context.Background(), nil) // the provider lists again, as Claude Code does
	// The first list's own may come first (it is watched once answered,
	// and Watch began after the answer): skipped, as a refresh skips a
	// listing of another projection.
	deadline := time.After(5 * time.Second)
	for {
		select {
		case l := <-listings:
			if l.Projection.Digest == before.Digest {
				continue
			}
			if !slices.Contains(l.Projection.Tools, "web__echo") {
				t.Errorf("listing %v lacks the added tool", l.Projection.Tools)
			}
			return
		case <-deadline:
			t.Fatal("no listing of the changed tools watched")
		}
	}
}

func TestReport(t *testing.T) {
	rec := &recorder{}
	p := start(t, &catalog{}, rec)
	s := client(t, p, nil)
	res, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: ReportTool,
		Arguments: map[string]any{"status": "succeeded", "summary": "3 issues triaged", "details": map[string]any{"issues": 3}}})
	if err != nil || res.IsError {
		t.Fatalf("report: %+v %v", res, err)
	}
	res, err = s.CallTool(context.Background(), &mcp.CallToolParams{Name: ReportTool, Arguments: map[string]any{"status": "great", "summary": "x"}})
	if err != nil || !res.IsError || !strings.Contains(text(res), "status") {
		t.Fatalf("bad report: %+v %v, want a tool error naming status", res, err)
	}
	calls := waitCalls(t, rec, 2)
	var r Report
	if err := json.Unmarshal(calls[0].Report, &r); err != nil || r.Status != ReportSucceeded || r.Summary != "3 issues triaged" || string(r.Details) != `{"issues":3}` {
		t.Errorf("recorded report %s (%v)", calls[0].Report, err)
	}
	if calls[1].Outcome != CallToolError || calls[1].Report != nil {
		t.Errorf("bad report recorded %+v", calls[1])
	}
}

func TestUnavailableServer(t *testing.T) {
	files := newTestServer("files", "echo")
	broken := Server{Name: "broken", Hash: "1", Dial: func(context.Context) (Conn, error) { return nil, errors.New("no such program") }}
	cat := &catalog{}
	cat.set(broken, files.server("1"))
	rec := &recorder{}
	p := start(t, cat, rec)
	pr, err := p.Projection(context.Background())
	if err != nil || !slices.Equal(pr.Tools, []string{"files__echo", ReportTool}) || !strings.Contains(pr.Unavailable["broken"], "no such program") {
		t.Fatalf("projection %+v (%v): want files only, broken unavailable", pr, err)
	}
	s := client(t, p, nil)
	_, err = s.CallTool(context.Background(), &mcp.CallToolParams{Name: "broken__x", Arguments: map[string]any{}})
	if err == nil || !strings.Contains(err.Error(), string(reason.ToolUnavailable)) {
		t.Errorf("call of a broken server: %v, want tool_unavailable", err)
	}
}

func TestChangedSpecRestartsServer(t *testing.T) {
	files := newTestServer("files", "echo")
	var dials atomic.Int64
	srv := func(hash string) Server {
		return Server{Name: "files", Hash: hash, Dial: func(ctx context.Context) (Conn, error) { dials.Add(1); return files.dial(ctx) }}
	}
	cat := &catalog{}
	cat.set(srv("1"))
	p := start(t, cat, &recorder{})
	s := client(t, p, nil)
	call := func() {
		if _, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: "files__echo", Arguments: map[string]any{"text": "x"}}); err != nil {
			t.Fatal(err)
		}
	}
	call()
	call()
	cat.set(srv("2"))
	call()
	if n := dials.Load(); n != 2 {
		t.Errorf("%d starts, want 2: one per spec", n)
	}
}

func TestCancelledCallReachesServer(t *testing.T) {
	files := newTestServer("files", "slow")
	cat := &catalog{}
	cat.set(files.server("1"))
	rec := &recorder{}
	p := start(t, cat, rec)
	s := client(t, p, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := s.CallTool(ctx, &mcp.CallToolParams{Name: "files__slow", Arguments: map[string]any{"text": "wait"}})
		done <- err
	}()
	for files.calls.Load() == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	select {
	case got := <-files.cancelled:
		if got != "wait" {
			t.Errorf("cancelled %q", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the server's call was not cancelled")
	}
	<-done
	if c := waitCalls(t, rec, 1)[0]; c.Outcome != CallFailed || c.Code != reason.TurnCancelled {
		t.Errorf("record %+v, want failed turn_cancelled", c)
	}
}

func TestBridge(t *testing.T) {
	files := newTestServer("files", "echo")
	cat := &catalog{}
	cat.set(files.server("1"))
	p := start(t, cat, &recorder{})
	// The provider's stdio MCP client talks to the bridge's stdin and
	// stdout.
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- Bridge(inR, outW, p.Socket())
		outW.Close()
	}()
	cl := mcp.NewClient(&mcp.Implementation{Name: "provider", Version: "1"}, nil)
	s, err := cl.Connect(context.Background(), &mcp.IOTransport{Reader: outR, Writer: inW}, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: "files__echo", Arguments: map[string]any{"text": "through"}})
	if err != nil || text(res) != "files: through" {
		t.Fatalf("call through the bridge: %+v %v", res, err)
	}
	s.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("bridge: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the bridge did not end with its stdin")
	}
}

func TestSocketIsTheProviderUsers(t *testing.T) {
	p := start(t, &catalog{}, &recorder{})
	fi, err := os.Stat(p.Socket())
	if err != nil || fi.Mode().Perm() != 0o600 || fi.Mode().Type() != os.ModeSocket {
		t.Fatalf("socket %v %v", fi, err)
	}
	dir := filepath.Dir(p.Socket())
	p.Stop()
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the socket's directory outlived the proxy: %v", err)
	}
}

func TestHTTPServer(t *testing.T) {
	web := newTestServer("web", "echo")
	handler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return web.srv }, nil)
	tcp := httptest.NewServer(handler)
	defer tcp.Close()
	sock := filepath.Join(t.TempDir(), "web.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	unix := &http.Server{Handler: handler}
	go unix.Serve(ln)
	defer unix.Close()
	for _, tt := range []struct{ name, url, socket string }{
		{"loopback", tcp.URL, ""},
		{"unix socket", "http://localhost/mcp", sock},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cat := &catalog{}
			cat.set(Server{Name: "web", Hash: "1", Dial: func(ctx context.Context) (Conn, error) { return DialHTTP(ctx, tt.url, tt.socket) }})
			p := start(t, cat, &recorder{})
			s := client(t, p, nil)
			res, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: "web__echo", Arguments: map[string]any{"text": "over http"}})
			if err != nil || text(res) != "web: over http" {
				t.Fatalf("call: %+v %v", res, err)
			}
		})
	}
}

// TestAnsweredAfterHalfClose: a client that closes its side after its
// requests (a shell piping them into the bridge) still gets the answers.
func TestAnsweredAfterHalfClose(t *testing.T) {
	files := newTestServer("files", "echo")
	cat := &catalog{}
	cat.set(files.server("1"))
	p := start(t, cat, &recorder{})
	c, err := net.Dial("unix", p.Socket())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"sh","version":"1"}}}` + "\n" +
		`{"jsonrpc":"2.0","method":"notifications/initialized"}` + "\n" +
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"files__echo","arguments":{"text":"piped"}}}` + "\n" +
		`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"web__echo","arguments":{"text":"piped"}}}` + "\n"))
	c.(*net.UnixConn).CloseWrite()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	out, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"id":2,"result":{"content":[{"type":"text","text":"files: piped"}]`, `"id":3,"error":`, `tool_not_allowed`} {
		if !strings.Contains(string(out), want) {
			t.Errorf("answers lack %s:\n%s", want, out)
		}
	}
}

// TestHandoff: nlx's bridge hands the provider's own stdio (pipes) to
// the proxy, which serves the session on them; the bridge ends when the
// session does (the provider closed its side).
func TestHandoff(t *testing.T) {
	files := newTestServer("files", "echo")
	cat := &catalog{}
	cat.set(files.server("1"))
	rec := &recorder{}
	p := start(t, cat, rec)
	// The provider's MCP client writes the bridge's stdin and reads its
	// stdout: two pipes, as a program's stdio is.
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		done <- Handoff(inR, outW, p.Socket())
		inR.Close()
		outW.Close()
	}()
	cl := mcp.NewClient(&mcp.Implementation{Name: "provider", Version: "1"}, nil)
	s, err := cl.Connect(context.Background(), &mcp.IOTransport{Reader: outR, Writer: inW}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, word := range []string{"one", "two"} {
		res, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: "files__echo", Arguments: map[string]any{"text": word}})
		if err != nil || text(res) != "files: "+word {
			t.Fatalf("call through the handed-over stdio: %+v %v", res, err)
		}
	}
	if _, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: "web__echo", Arguments: map[string]any{"text": "x"}}); err == nil {
		t.Error("a call outside the catalog was answered")
	}
	s.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("handoff: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the bridge did not end with the session")
	}
	if calls := waitCalls(t, rec, 3); calls[0].Outcome != CallSucceeded || calls[2].Outcome != CallRefused {
		t.Errorf("records %+v", calls)
	}
}

// TestHandoverRefusesOtherDescriptors: a connection that hands over
// anything but two pipes or sockets gets no session.
func TestHandoverRefusesOtherDescriptors(t *testing.T) {
	p := start(t, &catalog{}, &recorder{})
	f, err := os.Open(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c, err := net.Dial("unix", p.Socket())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := fdpass.Send(c.(*net.UnixConn), handoffByte, int(f.Fd()), int(f.Fd())); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := c.Read(make([]byte, 1)); n != 0 || err == nil {
		t.Errorf("read %d bytes (%v): want the connection closed", n, err)
	}
	if p.Sessions() != 0 {
		t.Error("a session was served on a regular file")
	}
}
