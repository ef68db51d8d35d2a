package turn

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/nlx-dev/nlx/internal/reason"
	"github.com/nlx-dev/nlx/isolate"
	"github.com/nlx-dev/nlx/launch"
	"github.com/nlx-dev/nlx/provider"
	"github.com/nlx-dev/nlx/schema"
	"github.com/nlx-dev/nlx/state"
	"github.com/nlx-dev/nlx/toolproxy"
)

// Every provider launch of a turn gets one MCP server, nlx's tool proxy
// (package toolproxy), which exposes the tools the launch's workspace may
// use in the applied state now. The proxy runs in this nlx (serve's, or
// nlx turn's); the provider reaches it through nlx's bridge, bound into
// its sandbox with the proxy's socket. A command tool runs under a launch
// of its own beside the provider's, never inside it.

// GrantEnv is the variable of nlx's MCP server entry that carries the
// workspace's grant digest: the entry changes exactly when the grant
// does, so that a provider that compares entries reloads the server.
const GrantEnv = "NLX_TOOLS_GRANT"

// catalog is a launch's toolproxy.Catalog: the tools its workspace may use
// in the applied state, read again whenever the state's files changed (two
// stat calls when they did not), so that a tool removed by an apply is
// refused at the next call.
type catalog struct {
	db                    *state.DB
	workspace, connection string
	dial                  func(t launch.Tool) func(ctx context.Context) (toolproxy.Conn, error)

	mu      sync.Mutex
	stamp   state.Stamp
	version int64 // the state's resources version the catalog was read at
	read    bool
	servers []toolproxy.Server
	tools   []launch.Tool
	grant   string
}

// Servers implements toolproxy.Catalog.
func (c *catalog) Servers(ctx context.Context) ([]toolproxy.Server, error) {
	if err := c.refresh(ctx); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.servers, nil
}

// current is the grant now: its tools and digest.
func (c *catalog) current(ctx context.Context) ([]launch.Tool, string, error) {
	if err := c.refresh(ctx); err != nil {
		return nil, "", err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.tools, c.grant, nil
}

func (c *catalog) refresh(ctx context.Context) error {
	stamp := c.db.Stamp()
	c.mu.Lock()
	fresh := c.read && stamp == c.stamp
	c.mu.Unlock()
	if fresh {
		return nil
	}
	// Something wrote the state (a call's record, a claim, an apply): the
	// grant is read again only when applied resources changed.
	version, err := c.db.ResourcesVersion(ctx)
	if err != nil {
		return err
	}
	c.mu.Lock()
	fresh = c.read && version == c.version
	if fresh {
		c.stamp = stamp
	}
	c.mu.Unlock()
	if fresh {
		return nil
	}
	tools, grant, err := launch.Tools(ctx, c.db, c.workspace, c.connection)
	if err != nil {
		return err
	}
	servers := make([]toolproxy.Server, len(tools))
	for i, t := range tools {
		servers[i] = toolproxy.Server{Name: t.Name, Hash: t.Hash, Dial: c.dial(t)}
	}
	c.mu.Lock()
	c.stamp, c.version, c.read, c.servers, c.tools, c.grant = stamp, version, true, servers, tools, grant
	c.mu.Unlock()
	return nil
}

// toolServer starts tool t's server for worker w: a command under a
// launch of its own (the workspace's sandbox policy and limits, its own
// egress, no credential home, no skills, the host's programs), or a
// connection to the URL it names.
func (r *Runner) toolServer(w *worker, base isolate.Request, hostEnv []string, t launch.Tool) func(ctx context.Context) (toolproxy.Conn, error) {
	return func(ctx context.Context) (toolproxy.Conn, error) {
		if t.Spec.IsURL() {
			return dialURL(ctx, t.Spec)
		}
		if len(t.Spec.Command) == 0 {
			return nil, reason.New(reason.InvalidAppliedSpec, "tool %s has neither a command nor a url", t.Name)
		}
		prog, err := launch.FindProgram(t.Spec.Command[0], launch.LookupPath(hostEnv))
		if err != nil {
			return nil, err
		}
		req := base
		req.Command = append([]string{prog.Path}, t.Spec.Command[1:]...)
		req.Programs = []string{prog.Dir}
		req.Env = map[string]string{}
		maps.Copy(req.Env, t.Spec.Env)
		for k, ref := range t.Spec.Secrets {
			v, err := launch.Secret(ref, hostEnv)
			if err != nil {
				return nil, err
			}
			req.Env[k] = v
		}
		req.CredentialRoot, req.CredentialHome, req.Skills = "", "", nil
		req.Egress, req.Proxy, req.Tools, req.ProviderHome, req.RootFS = isolate.EgressNone, nil, nil, "", ""
		if t.Spec.Egress == "full" {
			req.Egress = isolate.EgressFull
		}
		rec := launch.Recorder{DB: r.DB}
		id := fmt.Sprintf("%s-t%d", w.launchID, w.toolSeq.Add(1))
		stderr := &tailBuffer{max: 4 << 10}
		proc, inW, outR, err := isolate.LaunchPiped(context.WithoutCancel(ctx), req, isolate.Options{Recorder: rec, LaunchID: id, Stderr: stderr})
		if err != nil {
			return nil, err
		}
		exited := make(chan struct{})
		go func() {
			proc.Wait(context.Background())
			close(exited)
		}()
		stop := func() error {
			// Its stdin is closed: a server ends by itself, else it is
			// stopped; either way its tree is proven gone, with a receipt.
			select {
			case <-exited:
			case <-time.After(2 * time.Second):
			}
			_, err := isolate.Stop(context.Background(), proc.Identity, 2*time.Second, rec)
			outR.Close()
			if err != nil {
				return fmt.Errorf("tool %s (launch %s): %w", t.Name, id, err)
			}
			return nil
		}
		return &launchedConn{Conn: toolproxy.StreamConn(outR, inW, stop), stderr: stderr, name: t.Name}, nil
	}
}

// launchedConn is a command tool's connection: its stderr's tail is told
// when the server ends.
type launchedConn struct {
	toolproxy.Conn
	stderr *tailBuffer
	name   string
}

func (c *launchedConn) Read() ([]byte, error) {
	b, err := c.Conn.Read()
	if err != nil {
		if msg := strings.TrimSpace(c.stderr.String()); msg != "" {
			err = fmt.Errorf("%w: %s", err, tail(msg, 400))
		}
	}
	return b, err
}

// dialURL connects to a tool server that listens: on the host's loopback,
// or on a Unix socket (unix:///path, at its endpoint path).
func dialURL(ctx context.Context, t schema.Tool) (toolproxy.Conn, error) {
	if t.IsUnix() {
		endpoint := t.Endpoint
		if endpoint == "" {
			endpoint = "/"
		}
		return toolproxy.DialHTTP(ctx, "http://localhost"+endpoint, t.SocketPath())
	}
	return toolproxy.DialHTTP(ctx, t.URL, "")
}

// callWriter records the proxies' tool calls in the state, in batches,
// apart from the calls themselves: a call waits for no database write.
type callWriter struct {
	db      *state.DB
	mu      sync.Mutex
	queue   []state.ToolCallRow
	wake    chan struct{}
	idle    *sync.Cond
	writing bool
	once    sync.Once
	log     func(string, ...any)
}

func (c *callWriter) start() {
	c.once.Do(func() {
		c.wake = make(chan struct{}, 1)
		c.idle = sync.NewCond(&c.mu)
		go c.loop()
	})
}

// add queues a call.
func (c *callWriter) add(row state.ToolCallRow) {
	c.start()
	c.mu.Lock()
	c.queue = append(c.queue, row)
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *callWriter) loop() {
	for range c.wake {
		for {
			c.mu.Lock()
			batch := c.queue
			c.queue = nil
			c.writing = len(batch) > 0
			if !c.writing {
				c.idle.Broadcast()
				c.mu.Unlock()
				break
			}
			c.mu.Unlock()
			if err := c.db.RecordToolCalls(context.Background(), batch); err != nil && c.log != nil {
				c.log("recording %d tool call(s): %v", len(batch), err)
			}
		}
	}
}

// flush waits until every call queued so far is written.
func (c *callWriter) flush() {
	c.start()
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.queue) > 0 || c.writing {
		c.idle.Wait()
	}
}

// recordCall is the Record of launchID's proxy: a call as a state row.
func (r *Runner) recordCall(launchID, workspace string) func(toolproxy.Call) {
	return func(c toolproxy.Call) {
		r.calls.add(state.ToolCallRow{ID: c.ID + "-" + launchID, LaunchID: launchID, TurnID: c.Turn, Workspace: workspace,
			Tool: c.Tool, Server: c.Server, ArgsDigest: c.ArgsDigest, Outcome: string(c.Outcome), ReasonCode: string(c.Code),
			Message: c.Message, Report: string(c.Report), StartedAt: c.Started.UTC().Format(time.RFC3339Nano),
			EndedAt: c.Ended.UTC().Format(time.RFC3339Nano)})
	}
}

// startTools starts worker w's tool proxy and completes its launch
// request: the proxy's socket and nlx's bridge bound, and, for an adapter
// that keeps its configuration in a home of its own, the worker's private
// home. It returns nlx's MCP server as the provider is to start it.
func (r *Runner) startTools(ctx context.Context, w *worker, b *binding, req *isolate.Request, hostEnv []string) (*provider.MCPServer, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("tools: nlx's own executable: %w", err)
	}
	base := *req
	cat := &catalog{db: r.DB, workspace: b.warmKey.workspace, connection: b.connection}
	cat.dial = func(t launch.Tool) func(context.Context) (toolproxy.Conn, error) {
		return r.toolServer(w, base, hostEnv, t)
	}
	_, grant, err := cat.current(ctx)
	if err != nil {
		return nil, err
	}
	uid, gid := req.RunAs()
	r.calls.db, r.calls.log = r.DB, r.Pool.logf
	px, err := toolproxy.Start(toolproxy.Options{UID: uid, GID: gid, Catalog: cat, Record: r.recordCall(w.launchID, b.warmKey.workspace),
		Log: func(format string, args ...any) {
			r.Pool.logf("launch %s: "+format, append([]any{w.launchID}, args...)...)
		}})
	if err != nil {
		return nil, err
	}
	w.tools, w.catalog, w.flushCalls = px, cat, r.calls.flush
	w.give(grant)
	req.Tools = &isolate.Proxy{Socket: px.Socket(), Helper: exe}
	helper, socket := req.ToolPaths()
	server := &provider.MCPServer{Name: provider.ToolsServerName, Command: helper, Args: []string{toolproxy.BridgeMode, socket},
		Env: map[string]string{GrantEnv: grant}}
	w.server = *server
	if ph, ok := b.adapter.(provider.PrivateHome); ok {
		if err := r.privateHome(b, req, ph, *server); err != nil {
			px.Stop()
			return nil, err
		}
		w.homeConfig = path.Join(req.Env[ph.HomeEnv()], ph.OwnerConfig())
	}
	return server, nil
}

// privateHome makes the conversation's private provider home (one per
// workspace, connection and conversation, kept across its launches: the
// program's sessions live there) with its files from the owner's
// configuration, and binds it.
func (r *Runner) privateHome(b *binding, req *isolate.Request, ph provider.PrivateHome, server provider.MCPServer) error {
	if r.Host.WorkerRoot == "" {
		return reason.New(reason.InvalidRequest, "no worker root on this host: a private provider home has nowhere to go")
	}
	sum := sha256.Sum256([]byte(b.warmKey.conversation))
	dir := filepath.Join(r.Host.WorkerRoot, b.warmKey.workspace, b.connection, hex.EncodeToString(sum[:8]))
	var owner []byte
	credHome := ""
	if req.CredentialHome != "" {
		hostHome := filepath.Join(req.CredentialRoot, req.CredentialHome)
		data, err := readOwnerConfig(hostHome, ph.OwnerConfig())
		if err != nil {
			return err
		}
		owner = data
		credHome = isolate.CredentialPath
		if req.Policy == isolate.DangerFullAccess {
			credHome = hostHome
		}
	}
	files, links, err := ph.HomeFiles(owner, server, credHome)
	if err != nil {
		return reason.Wrap(reason.InvalidAppliedSpec, err, "connection %s", b.connection)
	}
	uid, gid := req.RunAs()
	if err := writeHome(dir, uid, gid, files, links); err != nil {
		return err
	}
	req.ProviderHome = dir
	in := isolate.ProviderHomePath
	if req.Policy == isolate.DangerFullAccess {
		in = dir
	}
	req.Env[ph.HomeEnv()] = in
	return nil
}

// maxOwnerConfig bounds the owner's configuration nlx reads.
const maxOwnerConfig = 1 << 20

// readOwnerConfig reads file of the owner's credential home, which is
// never edited: nil when there is none. A symlink there is not followed.
func readOwnerConfig(home, file string) ([]byte, error) {
	root, err := os.OpenRoot(home)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, reason.Wrap(reason.CredentialHomeUnsafe, err, "the credential home %s", home)
	}
	defer root.Close()
	if fi, err := root.Lstat(file); err != nil || !fi.Mode().IsRegular() {
		return nil, nil
	}
	f, err := root.Open(file)
	if err != nil {
		return nil, nil
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxOwnerConfig+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxOwnerConfig {
		return nil, reason.New(reason.InvalidAppliedSpec, "%s in the credential home %s is over %d bytes", file, home, maxOwnerConfig)
	}
	return data, nil
}

// writeHome makes dir (its parents root's, 0711; itself the provider's,
// 0700) and writes files and links in it, each replacing whatever the
// name held: the directory is the provider's, so nothing in it is
// followed (a link planted in place of a file is removed, not written
// through).
func writeHome(dir string, uid, gid int, files map[string][]byte, links map[string]string) error {
	fail := func(err error) error {
		return reason.Wrap(reason.InvalidRequest, err, "the private provider home %s", dir)
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o711); err != nil {
		return fail(err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return fail(err)
	}
	if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() {
		return fail(fmt.Errorf("not a directory (%v)", err))
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fail(err)
	}
	defer root.Close()
	if err := os.Chown(dir, uid, gid); err != nil {
		return fail(err)
	}
	for name, data := range files {
		if err := root.RemoveAll(name); err != nil {
			return fail(err)
		}
		f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return fail(err)
		}
		_, werr := f.Write(data)
		cerr := f.Chown(uid, gid)
		if err := errors.Join(werr, cerr, f.Close()); err != nil {
			return fail(err)
		}
	}
	for name, target := range links {
		if err := root.RemoveAll(name); err != nil {
			return fail(err)
		}
		if err := root.Symlink(target, name); err != nil {
			return fail(err)
		}
		if err := root.Lchown(name, uid, gid); err != nil {
			return fail(err)
		}
	}
	return nil
}
