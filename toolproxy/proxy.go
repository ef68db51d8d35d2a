// Package toolproxy is nlx's MCP proxy: the one MCP server a provider
// launch is given. It exposes exactly the tools the launch's workspace
// may use in the applied state, each real server's tools under that
// server's name (NAME__TOOL), plus nlx's own tools (nlx_report); it holds
// every real server's command, URL and credential on nlx's side (the
// provider's configuration names only the proxy); it asks the Catalog at
// every list and every call, so that a call to a tool the workspace no
// longer has is refused at once, even while the provider still lists it;
// and it records every call.
//
// The provider reaches the proxy through nlx's bridge (Main, the
// BridgeMode helper), its stdio MCP server inside the sandbox, which
// connects to the proxy's Unix socket (bound into the sandbox) and hands
// over its stdio: the proxy then reads and writes the provider's pipes
// itself (Handover). The real
// servers run outside the provider's sandbox: a program under a launch
// of its own (the caller's Server.Dial starts it), or a server already
// listening on the host's loopback or a Unix socket (DialHTTP).
//
// The proxy reads only the envelope of what passes and the members it
// routes by: arguments and results pass through unchanged.
package toolproxy

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nlx-dev/nlx/internal/fdpass"
	"github.com/nlx-dev/nlx/internal/reason"
)

// Separator joins a server's name and its tool's name into the name the
// provider sees (NAME__TOOL). A server's name (a config name) has no
// underscore, so the first separator splits it back.
const Separator = "__"

// Server is one real MCP server the workspace may use.
type Server struct {
	// Name is the tool's name in the config; its tools are exposed as
	// Name__TOOL.
	Name string
	// Hash is the applied spec the server is started from: a server
	// whose hash changed is started anew.
	Hash string
	// Dial starts or connects the server.
	Dial func(ctx context.Context) (Conn, error)
}

// Catalog says which servers the launch's workspace may use now.
type Catalog interface {
	// Servers returns them, sorted by name. The proxy asks at every list
	// and every call: it must be cheap when nothing changed.
	Servers(ctx context.Context) ([]Server, error)
}

// Outcome is how a tool call ended.
type Outcome string

// The outcomes of a call.
const (
	CallSucceeded Outcome = "succeeded"  // the tool answered
	CallToolError Outcome = "tool_error" // the tool answered with isError
	CallRefused   Outcome = "refused"    // nlx refused it (Call.Code says why)
	CallFailed    Outcome = "failed"     // the server failed or went away, or the call was cancelled
)

// Call is one tool call as the proxy records it.
type Call struct {
	ID string `json:"id"`
	// Turn is the turn the call belongs to (SetTurn); "" between turns.
	Turn string `json:"turn,omitempty"`
	// Tool is the name the provider called; Server the config's tool
	// ("" for nlx's own tools).
	Tool   string `json:"tool"`
	Server string `json:"server,omitempty"`
	// ArgsDigest is sha256:HEX of the arguments as the provider sent them.
	ArgsDigest string  `json:"args_digest"`
	Outcome    Outcome `json:"outcome"`
	// Code and Message say why a call was refused or failed.
	Code    reason.Code `json:"code,omitempty"`
	Message string      `json:"message,omitempty"`
	// Report is nlx_report's structured result.
	Report  json.RawMessage `json:"report,omitempty"`
	Started time.Time       `json:"started"`
	Ended   time.Time       `json:"ended"`
}

// Options are a proxy's settings.
type Options struct {
	// Base is where the socket's directory is made (DefaultBase when "").
	Base string
	// UID and GID own the socket: the provider's user, who alone may
	// connect.
	UID, GID int
	Catalog  Catalog
	// Record receives every call once it ended or was refused, from the
	// call's goroutine: it must not block for long.
	Record func(Call)
	// Log receives a line per server started, failed or stopped.
	Log func(format string, args ...any)
	// Version is nlx's, named in the proxy's serverInfo.
	Version string
}

// Proxy is one launch's tool proxy.
type Proxy struct {
	opts   Options
	ln     net.Listener
	dir    string
	socket string
	turn   atomic.Pointer[string]

	mu        sync.Mutex
	servers   map[string]*entry // by name
	sessions  map[*session]bool
	watchers  map[chan Listing]bool
	closed    bool
	wg        sync.WaitGroup
	callSeq   atomic.Int64
	sessionSq atomic.Int64
}

// entry is a real server the proxy started (or is starting).
type entry struct {
	hash  string
	ready chan struct{} // closed once up or err is set
	up    *upstream
	err   error
	at    time.Time // when the attempt ended
}

// Listing is a tools/list the proxy answered: which session, when, and
// the projection it served.
type Listing struct {
	Session    int64
	At         time.Time
	Projection Projection
}

// DefaultBase is where proxies' sockets go: /run/nlx-tools as root, else
// a directory of the user's under the temporary directory.
func DefaultBase() string {
	if os.Geteuid() == 0 {
		return "/run/nlx-tools"
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("nlx-tools-%d", os.Geteuid()))
}

// Start listens on a new socket in a directory of its own under
// opts.Base, which only root (or nlx's user) writes, owned by
// opts.UID:opts.GID and readable by nobody else. A proxy that cannot
// start is tools_proxy_unavailable: the launch must not be made.
func Start(opts Options) (*Proxy, error) {
	fail := func(err error) (*Proxy, error) {
		return nil, reason.Wrap(reason.ToolsProxyUnavailable, err, "the tool proxy cannot start")
	}
	if opts.Catalog == nil {
		return fail(errors.New("no catalog"))
	}
	if opts.Base == "" {
		opts.Base = DefaultBase()
	}
	// The provider's user reaches its socket through the base (search
	// only), which nobody else may write.
	if err := os.MkdirAll(opts.Base, 0o711); err != nil {
		return fail(err)
	}
	if err := os.Chmod(opts.Base, 0o711); err != nil {
		return fail(err)
	}
	dir, err := os.MkdirTemp(opts.Base, "tools-")
	if err != nil {
		return fail(err)
	}
	if err := os.Chmod(dir, 0o711); err != nil {
		os.RemoveAll(dir)
		return fail(err)
	}
	socket := filepath.Join(dir, "tools.sock")
	ln, err := net.Listen("unix", socket)
	if err == nil {
		err = os.Chown(socket, opts.UID, opts.GID)
	}
	if err == nil {
		err = os.Chmod(socket, 0o600)
	}
	if err != nil {
		if ln != nil {
			ln.Close()
		}
		os.RemoveAll(dir)
		return fail(err)
	}
	p := &Proxy{opts: opts, ln: ln, dir: dir, socket: socket, servers: map[string]*entry{},
		sessions: map[*session]bool{}, watchers: map[chan Listing]bool{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Socket is the proxy's socket on the host (the sandbox binds it).
func (p *Proxy) Socket() string { return p.socket }

// SetTurn names the turn the calls from now on belong to ("": none).
func (p *Proxy) SetTurn(id string) { p.turn.Store(&id) }

func (p *Proxy) currentTurn() string {
	if t := p.turn.Load(); t != nil {
		return *t
	}
	return ""
}

func (p *Proxy) logf(format string, args ...any) {
	if p.opts.Log != nil {
		p.opts.Log(format, args...)
	}
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			c.Close()
			return
		}
		p.wg.Add(1)
		p.mu.Unlock()
		go func() {
			defer p.wg.Done()
			r, w, closer, err := Handover(c)
			if err != nil {
				p.logf("a connection to the tool proxy: %v", err)
				c.Close()
				return
			}
			s := newSession(p, r, w, closer)
			p.mu.Lock()
			if p.closed {
				p.mu.Unlock()
				closer.Close()
				return
			}
			p.sessions[s] = true
			p.mu.Unlock()
			s.serve()
			p.mu.Lock()
			delete(p.sessions, s)
			p.mu.Unlock()
		}()
	}
}

// handoffByte is the one byte nlx's bridge sends with the provider's
// stdio descriptors; a client that writes MCP on the connection itself
// starts with '{'.
const handoffByte = 0

// Handover reads the first byte a connection sends. From nlx's bridge it
// carries the provider's own stdio (two pipes, or sockets): the session
// reads and writes them directly, without the bridge copying every
// message, and ends the connection (which ends the bridge) when it ends.
// Anything else is a client that speaks MCP on the connection.
func Handover(c net.Conn) (io.Reader, io.Writer, io.Closer, error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return c, c, c, nil
	}
	first, fds, err := fdpass.Receive(uc)
	if err != nil {
		return nil, nil, nil, err
	}
	if len(first) == 1 && first[0] == handoffByte && len(fds) == 2 && streamFD(fds[0]) && streamFD(fds[1]) {
		for _, fd := range fds {
			// Pollable: a read or write waits in the runtime's poller.
			if err := syscall.SetNonblock(fd, true); err != nil {
				fdpass.Close(fds)
				return nil, nil, nil, err
			}
		}
		in, out := os.NewFile(uintptr(fds[0]), "provider-stdin"), os.NewFile(uintptr(fds[1]), "provider-stdout")
		return in, out, closers{in, out, c}, nil
	}
	fdpass.Close(fds)
	if len(fds) > 0 || len(first) == 0 {
		return nil, nil, nil, fmt.Errorf("it handed over %d descriptor(s) that are not the provider's stdio", len(fds))
	}
	return io.MultiReader(bytes.NewReader(first), c), c, c, nil
}

// streamFD reports whether fd is a pipe or a socket: what a provider's
// stdio is.
func streamFD(fd int) bool {
	var st syscall.Stat_t
	if syscall.Fstat(fd, &st) != nil {
		return false
	}
	t := st.Mode & syscall.S_IFMT
	return t == syscall.S_IFIFO || t == syscall.S_IFSOCK
}

// closers closes each, in order.
type closers []io.Closer

func (cs closers) Close() error {
	var errs []error
	for _, c := range cs {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

// Stop closes the socket, every session and every server the proxy
// started, and waits for them.
func (p *Proxy) Stop() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	sessions := slices.Collect(maps.Keys(p.sessions))
	servers := p.servers
	p.servers = map[string]*entry{}
	p.mu.Unlock()
	p.ln.Close()
	for _, s := range sessions {
		s.close()
	}
	p.wg.Wait()
	for _, e := range servers {
		e.close()
	}
	os.RemoveAll(p.dir)
}

// close stops the server once its start is over.
func (e *entry) close() {
	<-e.ready
	if e.up != nil {
		e.up.close()
	}
}

// retryAfter is how long a server that failed to start is left alone
// before a list or a call tries it again.
const retryAfter = 5 * time.Second

// server returns the started server s, starting it when it is not (or
// was started from another spec, or has ended).
func (p *Proxy) server(ctx context.Context, s Server) (*upstream, error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, errors.New("the tool proxy is stopped")
	}
	e := p.servers[s.Name]
	if e != nil {
		select {
		case <-e.ready:
			stale := e.hash != s.Hash || (e.up != nil && !e.up.alive()) || (e.err != nil && time.Since(e.at) > retryAfter)
			if stale {
				delete(p.servers, s.Name)
				go e.close()
				e = nil
			}
		default:
			if e.hash != s.Hash {
				// Still starting from an older spec: it is closed once
				// up, and this one starts beside it.
				delete(p.servers, s.Name)
				go e.close()
				e = nil
			}
		}
	}
	if e == nil {
		e = &entry{hash: s.Hash, ready: make(chan struct{})}
		p.servers[s.Name] = e
		p.mu.Unlock()
		e.up, e.err = startUpstream(context.WithoutCancel(ctx), s, p.version(), func() { p.NotifyChanged() })
		e.at = time.Now()
		if e.err != nil {
			e.err = reason.Wrap(reason.ToolUnavailable, e.err, "tool %s cannot be started", s.Name)
			p.logf("tool %s: %v", s.Name, e.err)
		} else {
			p.logf("tool %s started", s.Name)
		}
		close(e.ready)
	} else {
		p.mu.Unlock()
	}
	select {
	case <-e.ready:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return e.up, e.err
}

func (p *Proxy) version() string {
	if p.opts.Version == "" {
		return "dev"
	}
	return p.opts.Version
}

// running returns server s when it runs, started from its spec: a call
// to it need not wait.
func (p *Proxy) running(s Server) *upstream {
	p.mu.Lock()
	defer p.mu.Unlock()
	e := p.servers[s.Name]
	if e == nil || e.hash != s.Hash {
		return nil
	}
	select {
	case <-e.ready:
	default:
		return nil
	}
	if e.err != nil || e.up == nil || !e.up.alive() {
		return nil
	}
	return e.up
}

// prune stops the servers the catalog no longer names.
func (p *Proxy) prune(allowed []Server) {
	names := map[string]bool{}
	for _, s := range allowed {
		names[s.Name] = true
	}
	p.mu.Lock()
	var gone []*entry
	for name, e := range p.servers {
		if !names[name] {
			delete(p.servers, name)
			gone = append(gone, e)
			p.logf("tool %s stopped: the workspace no longer has it", name)
		}
	}
	p.mu.Unlock()
	for _, e := range gone {
		go e.close()
	}
}

// Projection is the tools the proxy exposes now.
type Projection struct {
	// Tools are the names the provider sees, sorted: nlx's own and
	// NAME__TOOL of every server the workspace may use.
	Tools []string `json:"tools"`
	// Digest is sha256:HEX of every tool's name and definition.
	Digest string `json:"digest"`
	// Unavailable are the servers the workspace may use whose tools are
	// missing: they could not be started or listed (with why).
	Unavailable map[string]string `json:"unavailable,omitempty"`

	defs [][]byte // each tool's definition, in Tools order
}

// Projection lists the tools the proxy exposes now: the catalog's
// servers, started where they are not, and their tool lists.
func (p *Proxy) Projection(ctx context.Context) (Projection, error) {
	servers, err := p.opts.Catalog.Servers(ctx)
	if err != nil {
		return Projection{}, err
	}
	p.prune(servers)
	type listed struct {
		tools []upstreamTool
		err   error
	}
	results := make([]listed, len(servers))
	var wg sync.WaitGroup
	for i, s := range servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			up, err := p.server(ctx, s)
			if err == nil {
				results[i].tools, err = up.list(ctx)
			}
			results[i].err = err
		}()
	}
	wg.Wait()
	type def struct {
		name string
		b    []byte
	}
	defs := []def{}
	for _, t := range ownTools {
		defs = append(defs, def{t.name, t.def})
	}
	var pr Projection
	for i, s := range servers {
		if results[i].err != nil {
			if pr.Unavailable == nil {
				pr.Unavailable = map[string]string{}
			}
			pr.Unavailable[s.Name] = results[i].err.Error()
			continue
		}
		for _, t := range results[i].tools {
			name := s.Name + Separator + t.name
			d := maps.Clone(t.def)
			d["name"], _ = json.Marshal(name)
			b, err := json.Marshal(d)
			if err != nil {
				continue
			}
			defs = append(defs, def{name, b})
		}
	}
	sort.Slice(defs, func(i, j int) bool { return defs[i].name < defs[j].name })
	h := sha256.New()
	for _, d := range defs {
		pr.Tools = append(pr.Tools, d.name)
		pr.defs = append(pr.defs, d.b)
		h.Write([]byte(d.name))
		h.Write([]byte{0})
		h.Write(d.b)
		h.Write([]byte{0})
	}
	pr.Digest = "sha256:" + hex.EncodeToString(h.Sum(nil))
	return pr, nil
}

// route finds what the provider called: one of nlx's own tools, or a
// server the catalog allows now and its tool's own name.
func (p *Proxy) route(ctx context.Context, name string) (own *ownTool, s Server, tool string, err error) {
	for i := range ownTools {
		if ownTools[i].name == name {
			return &ownTools[i], Server{}, "", nil
		}
	}
	server, tool, ok := strings.Cut(name, Separator)
	if !ok || server == "" || tool == "" {
		return nil, Server{}, "", reason.New(reason.ToolNotAllowed, "no tool %q: the workspace's tools are named SERVER%sTOOL", name, Separator)
	}
	servers, err := p.opts.Catalog.Servers(ctx)
	if err != nil {
		return nil, Server{}, "", err
	}
	for _, s := range servers {
		if s.Name == server {
			return nil, s, tool, nil
		}
	}
	return nil, Server{}, "", reason.New(reason.ToolNotAllowed, "the workspace may not use tool %s (not granted in the applied state, or removed)", server)
}

// Watch returns a channel that receives every tools/list the proxy
// answers from now on, until stop is called.
func (p *Proxy) Watch() (listings <-chan Listing, stop func()) {
	ch := make(chan Listing, 16)
	p.mu.Lock()
	p.watchers[ch] = true
	p.mu.Unlock()
	return ch, func() {
		p.mu.Lock()
		delete(p.watchers, ch)
		p.mu.Unlock()
	}
}

func (p *Proxy) listed(l Listing) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for ch := range p.watchers {
		select {
		case ch <- l:
		default:
		}
	}
}

// NotifyChanged tells every session the tool list changed
// (notifications/tools/list_changed): a provider that honours it lists
// the tools again, which Watch shows. It returns how many sessions were
// told.
func (p *Proxy) NotifyChanged() int {
	p.mu.Lock()
	var live []*session
	for s := range p.sessions {
		if s.ready() {
			live = append(live, s)
		}
	}
	p.mu.Unlock()
	n := 0
	for _, s := range live {
		if s.notify(methodToolsListChanged) == nil {
			n++
		}
	}
	return n
}

// Sessions is how many providers' MCP clients are connected now.
func (p *Proxy) Sessions() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.sessions)
}

// record hands a call to the recorder.
func (p *Proxy) record(c Call) {
	if p.opts.Record != nil {
		p.opts.Record(c)
	}
}

// digest is sha256:HEX of b.
func digest(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}
