package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nlx-dev/nlx/internal/fakemodel"
	"github.com/nlx-dev/nlx/provider/codex"
	"github.com/nlx-dev/nlx/state"
	"github.com/nlx-dev/nlx/toolproxy"
)

// toolCalls is how many tool calls of each path are measured, after
// toolWarm calls of each that are not.
const (
	toolCalls = 2000
	toolWarm  = 200
)

// refreshRounds is how many nlx refresh of the idle worker are measured.
const refreshRounds = 15

// toolsBench measures nlx's MCP tool proxy: a tool call through the
// provider's path (a stdio MCP client running nlx __mcp-bridge SOCKET,
// the bridge, the proxy in this process, the real server's stdio)
// against the same server program called directly over stdio by the
// same client, interleaved, for the reference filesystem server (the
// target) and the repository's Go toolfix (the cheapest tool, reported);
// then a catalog refresh of an idle Codex worker under nlx serve, end to
// end.
func toolsBench(ctx context.Context, work, nlx string) error {
	dir := filepath.Join(work, "tools")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	toolfix := filepath.Join(work, "toolfix")
	build := exec.CommandContext(ctx, "go", "build", "-o", toolfix, "./internal/toolfix")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("build toolfix: %v\n%s", err, out)
	}
	fmt.Printf("\ntool calls through nlx's MCP proxy (a raw stdio client running nlx %s SOCKET; the proxy in the bench process; the server's stdio) "+
		"against the same server program called directly over stdio by the same client, interleaved (%d calls each after %d warm-up; medians):\n",
		toolproxy.BridgeMode, toolCalls, toolWarm)
	fsBin, err := filepath.Abs(".providers/node_modules/.bin/mcp-server-filesystem")
	if err != nil {
		return err
	}
	if _, err := os.Stat(fsBin); err != nil {
		fmt.Println("  filesystem server: not measured: @modelcontextprotocol/server-filesystem is not installed (make providers)")
	} else {
		root := filepath.Join(dir, "fsroot")
		if err := os.MkdirAll(root, 0o755); err != nil {
			return err
		}
		file := filepath.Join(root, "note.txt")
		content := "a small file read by the bench\n"
		if err := os.WriteFile(file, []byte(content), 0o644); err != nil {
			return err
		}
		args, _ := json.Marshal(map[string]string{"path": file})
		r, err := toolCallBench(ctx, dir, nlx, "files", []string{fsBin, root}, "read_text_file", string(args), "a small file read by the bench")
		if err != nil {
			return fmt.Errorf("filesystem server: %w", err)
		}
		fmt.Printf("  filesystem server (@modelcontextprotocol/server-filesystem %s), read_text_file of a %d-byte file:\n    %s (target <= 1.2) %s\n",
			npmVersion("@modelcontextprotocol/server-filesystem"), len(content), r, verdict(r.ratio() <= 1.2, "tool call through the proxy"))
	}
	r, err := toolCallBench(ctx, dir, nlx, "echo", []string{toolfix, "--name", "echo"}, "echo", `{"text":"x"}`, `echo: x`)
	if err != nil {
		return fmt.Errorf("toolfix: %w", err)
	}
	fmt.Printf("  toolfix (Go, the official MCP SDK), echo: the cheapest tool, where the fixed hops show most:\n    %s (reported)\n", r)
	return refreshBench(ctx, dir, nlx, toolfix)
}

// callTimes are one server's per-call times, through the proxy and
// direct, in call order.
type callTimes struct {
	proxied, direct []time.Duration
}

func (c callTimes) ratio() float64 {
	return float64(quantile(c.proxied, 0.5)) / float64(quantile(c.direct, 0.5))
}

func (c callTimes) String() string {
	pm, dm := quantile(c.proxied, 0.5), quantile(c.direct, 0.5)
	return fmt.Sprintf("%.3f ms through the proxy (p90 %.3f), %.3f ms direct (p90 %.3f): %+.3f ms a call, ratio %.2f",
		ms(pm), ms(quantile(c.proxied, 0.9)), ms(dm), ms(quantile(c.direct, 0.9)), ms(pm-dm), c.ratio())
}

func ms(d time.Duration) float64 { return d.Seconds() * 1000 }

// quantile is the q-quantile of ds (nearest rank).
func quantile(ds []time.Duration, q float64) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

// staticCatalog is a Catalog that never changes.
type staticCatalog []toolproxy.Server

func (c staticCatalog) Servers(context.Context) ([]toolproxy.Server, error) { return c, nil }

// toolCallBench calls tool of the server program argv toolWarm+toolCalls
// times directly and as many times through a proxy (server name), the two
// interleaved on two live sessions; each answer must hold want.
func toolCallBench(ctx context.Context, dir, nlx, name string, argv []string, tool, args, want string) (callTimes, error) {
	var recorded atomic.Int64
	px, err := toolproxy.Start(toolproxy.Options{Base: filepath.Join(dir, "proxy"), UID: os.Getuid(), GID: os.Getgid(),
		Catalog: staticCatalog{{Name: name, Hash: "bench", Dial: dialProgram(argv)}},
		Record:  func(toolproxy.Call) { recorded.Add(1) }, Version: "bench"})
	if err != nil {
		return callTimes{}, err
	}
	defer px.Stop()
	direct, err := startMCPClient(ctx, argv)
	if err != nil {
		return callTimes{}, err
	}
	defer direct.close()
	proxied, err := startMCPClient(ctx, []string{nlx, toolproxy.BridgeMode, px.Socket()})
	if err != nil {
		return callTimes{}, err
	}
	defer proxied.close()
	// Both list their tools first, as a provider does (the proxy starts
	// its server then): not measured.
	for _, c := range []struct {
		cl   *mcpClient
		tool string
	}{{direct, tool}, {proxied, name + toolproxy.Separator + tool}} {
		if err := c.cl.initialize(); err != nil {
			return callTimes{}, err
		}
		line, _, err := c.cl.request("tools/list", `{}`)
		if err != nil {
			return callTimes{}, err
		}
		if !bytes.Contains(line, []byte(strconv.Quote(c.tool))) {
			return callTimes{}, fmt.Errorf("%s: tools/list does not name %s: %.300s", c.cl.name, c.tool, line)
		}
	}
	directParams := `{"name":` + strconv.Quote(tool) + `,"arguments":` + args + `}`
	proxiedParams := `{"name":` + strconv.Quote(name+toolproxy.Separator+tool) + `,"arguments":` + args + `}`
	var t callTimes
	call := func(c *mcpClient, params string, into *[]time.Duration, keep bool) error {
		line, d, err := c.request("tools/call", params)
		if err != nil {
			return err
		}
		if !bytes.Contains(line, []byte(want)) || bytes.Contains(line, []byte(`"isError":true`)) {
			return fmt.Errorf("%s: tools/call answered %.300s", c.name, line)
		}
		if keep {
			*into = append(*into, d)
		}
		return nil
	}
	for i := 0; i < toolWarm+toolCalls; i++ {
		keep := i >= toolWarm
		if err := call(direct, directParams, &t.direct, keep); err != nil {
			return callTimes{}, err
		}
		if err := call(proxied, proxiedParams, &t.proxied, keep); err != nil {
			return callTimes{}, err
		}
		if i%500 == 499 {
			fmt.Fprintf(os.Stderr, "tools bench: %s: %d of %d pairs\n", name, i+1, toolWarm+toolCalls)
		}
	}
	// Records are made after the answer is written: the last may lag.
	for deadline := time.Now().Add(5 * time.Second); recorded.Load() < toolWarm+toolCalls && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if n := recorded.Load(); n != toolWarm+toolCalls {
		return callTimes{}, fmt.Errorf("the proxy recorded %d calls, want %d", n, toolWarm+toolCalls)
	}
	return t, nil
}

// dialProgram starts the stdio MCP server argv on pipes of its own, as
// nlx starts a command tool (without its launch: the sandbox is not the
// proxy's cost), and connects to it.
func dialProgram(argv []string) func(context.Context) (toolproxy.Conn, error) {
	return func(context.Context) (toolproxy.Conn, error) {
		inR, inW, err := os.Pipe()
		if err != nil {
			return nil, err
		}
		outR, outW, err := os.Pipe()
		if err != nil {
			inR.Close()
			inW.Close()
			return nil, err
		}
		// Not bound to the dial's context: it outlives the dial.
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Stdin, cmd.Stdout = inR, outW
		err = cmd.Start()
		inR.Close()
		outW.Close()
		if err != nil {
			inW.Close()
			outR.Close()
			return nil, err
		}
		exited := make(chan struct{})
		go func() {
			cmd.Wait()
			close(exited)
		}()
		stop := func() error {
			// Its stdin is closed: it ends by itself, else it is killed.
			select {
			case <-exited:
			case <-time.After(2 * time.Second):
				cmd.Process.Kill()
				<-exited
			}
			return outR.Close()
		}
		return toolproxy.StreamConn(outR, inW, stop), nil
	}
}

// mcpClient is the bench's MCP client: a program's stdio,
// newline-delimited JSON-RPC, one request at a time.
type mcpClient struct {
	name string
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *bufio.Reader
	id   int64
	buf  []byte
}

func startMCPClient(ctx context.Context, argv []string) (*mcpClient, error) {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return &mcpClient{name: filepath.Base(argv[0]), cmd: cmd, in: in, out: bufio.NewReaderSize(out, 64<<10)}, nil
}

// request sends a request and returns its response's line and the time
// from the write until that line was read.
func (c *mcpClient) request(method, params string) ([]byte, time.Duration, error) {
	c.id++
	c.buf = append(c.buf[:0], `{"jsonrpc":"2.0","id":`...)
	c.buf = strconv.AppendInt(c.buf, c.id, 10)
	c.buf = append(c.buf, `,"method":`...)
	c.buf = strconv.AppendQuote(c.buf, method)
	c.buf = append(c.buf, `,"params":`...)
	c.buf = append(c.buf, params...)
	c.buf = append(c.buf, "}\n"...)
	start := time.Now()
	if _, err := c.in.Write(c.buf); err != nil {
		return nil, 0, fmt.Errorf("%s: %w", c.name, err)
	}
	for {
		line, err := c.out.ReadBytes('\n')
		took := time.Since(start)
		if err != nil {
			return nil, 0, fmt.Errorf("%s: %s: %w", c.name, method, err)
		}
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Error  json.RawMessage `json:"error"`
		}
		if json.Unmarshal(line, &m) != nil || m.Method != "" || string(m.ID) != strconv.FormatInt(c.id, 10) {
			continue // a notification, or the server asking something: the bench grants nothing
		}
		if len(m.Error) > 0 && string(m.Error) != "null" {
			return nil, 0, fmt.Errorf("%s: %s: %s", c.name, method, m.Error)
		}
		return line, took, nil
	}
}

func (c *mcpClient) initialize() error {
	if _, _, err := c.request("initialize", `{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"nlx-bench","version":"0"}}`); err != nil {
		return err
	}
	_, err := io.WriteString(c.in, `{"jsonrpc":"2.0","method":"notifications/initialized"}`+"\n")
	return err
}

// close ends the session: stdin closed, the program waited for (killed
// after 5 s).
func (c *mcpClient) close() {
	c.in.Close()
	done := make(chan struct{})
	go func() {
		io.Copy(io.Discard, c.out)
		c.cmd.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		c.cmd.Process.Kill()
		<-done
	}
}

// npmVersion is the version of an npm package make providers installed.
func npmVersion(pkg string) string {
	data, err := os.ReadFile(filepath.Join(".providers", "node_modules", pkg, "package.json"))
	if err != nil {
		return "?"
	}
	var p struct {
		Version string `json:"version"`
	}
	if json.Unmarshal(data, &p) != nil || p.Version == "" {
		return "?"
	}
	return p.Version
}

// refreshBench: nlx refresh of an idle Codex worker (its job's one
// occurrence ended, nlx serve keeps it warm) whose workspace has one
// command tool, toolfix, refreshRounds times; each refresh's own time in
// serve (the attempt's created_at to ended_at: re-proof, projection,
// config/read, config/batchWrite, reload, mcpServerStatus/list) and the
// nlx refresh command's wall time.
func refreshBench(ctx context.Context, dir, nlx, toolfix string) error {
	if os.Geteuid() != 0 {
		fmt.Println("\nrefresh of an idle worker: not measured: the sandbox's cgroups need root")
		return nil
	}
	if _, err := os.Stat(".providers/node_modules/.bin/codex"); err != nil {
		fmt.Println("\nrefresh of an idle worker: not measured: codex is not installed (make providers)")
		return nil
	}
	d := filepath.Join(dir, "refresh")
	cfg := filepath.Join(d, "cfg")
	if err := workDir(d, "cfg"); err != nil {
		return err
	}
	model, err := fakemodel.Start()
	if err != nil {
		return err
	}
	defer model.Close()
	codexArgs, _ := json.Marshal(append([]string{"codex", "app-server"}, codex.FakeModelArgs(model.URL())...))
	toolArgs, _ := json.Marshal([]string{toolfix, "--name", "files"})
	write := func(at time.Time) error {
		config := strings.NewReplacer("CODEXCMD", string(codexArgs), "TOOLCMD", string(toolArgs), "AT", at.Format(time.RFC3339)).Replace(refreshConfig)
		return os.WriteFile(filepath.Join(cfg, "host.cue"), []byte(config), 0o644)
	}
	if err := writeIdentities(cfg, "bench", "alice"); err != nil {
		return err
	}
	env := serveEnv(d)
	// Applied first with the job far ahead, then moved to a few seconds
	// ahead: the second apply changes one job, and is quick.
	if err := write(time.Now().Add(time.Hour).UTC().Truncate(time.Second)); err != nil {
		return err
	}
	if err := applyCfg(ctx, nlx, cfg, env); err != nil {
		return err
	}
	at := time.Now().Add(5 * time.Second).UTC().Truncate(time.Second)
	if err := write(at); err != nil {
		return err
	}
	if err := applyCfg(ctx, nlx, cfg, env); err != nil {
		return err
	}
	srv := exec.CommandContext(ctx, nlx, "serve", "--poll", "200ms")
	srv.Env = env
	var serveLog bytes.Buffer
	srv.Stderr = &serveLog
	if err := srv.Start(); err != nil {
		return err
	}
	stopped := false
	defer func() {
		if !stopped {
			srv.Process.Kill()
			srv.Wait()
		}
	}()
	fmt.Fprintf(os.Stderr, "tools bench: the job's occurrence is due at %s\n", at.Format(time.RFC3339))
	if err := waitClaim(ctx, filepath.Join(d, "state.db"), "j1", 2*time.Minute); err != nil {
		return fmt.Errorf("%w\nnlx serve said:\n%s", err, serveLog.String())
	}
	var walls []time.Duration
	for i := 0; i < refreshRounds; i++ {
		cmd := exec.CommandContext(ctx, nlx, "refresh", "platform", "--actor", "alice")
		cmd.Env = env
		x, err := measure(cmd)
		if err != nil {
			return fmt.Errorf("nlx refresh: %w", err)
		}
		walls = append(walls, x.wall)
	}
	list := exec.CommandContext(ctx, nlx, "refreshes", "platform", "-o", "json", "--limit", "0")
	list.Env = env
	out, err := list.Output()
	if err != nil {
		return fmt.Errorf("nlx refreshes: %v", err)
	}
	var doc struct {
		Refreshes []state.RefreshRow `json:"refreshes"`
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		return fmt.Errorf("nlx refreshes -o json: %v", err)
	}
	var took, before []time.Duration
	for _, r := range doc.Refreshes {
		if r.Trigger != state.RefreshManual {
			continue
		}
		if r.Phase != state.RefreshDone {
			return fmt.Errorf("refresh %s: %s %s %s", r.ID, r.Phase, r.ReasonCode, r.Reason)
		}
		created, err1 := time.Parse(time.RFC3339Nano, r.CreatedAt)
		dispatched, err2 := time.Parse(time.RFC3339Nano, r.DispatchedAt)
		ended, err3 := time.Parse(time.RFC3339Nano, r.EndedAt)
		if err := errors.Join(err1, err2, err3); err != nil {
			return fmt.Errorf("refresh %s: %w", r.ID, err)
		}
		took = append(took, ended.Sub(created))
		before = append(before, dispatched.Sub(created))
	}
	if len(took) != refreshRounds {
		return fmt.Errorf("nlx refreshes lists %d manual attempts, want %d", len(took), refreshRounds)
	}
	srv.Process.Signal(syscall.SIGINT)
	srv.Wait()
	stopped = true
	fmt.Printf("\nrefresh of an idle worker (the real Codex app-server, one command tool; nlx serve --poll 200ms), %d nlx refresh in a row:\n", refreshRounds)
	fmt.Printf("  in serve (attempt created to ended: re-proof, projection, config/read, config/batchWrite, reload, mcpServerStatus/list): median %.1f ms, max %.1f ms (reported)\n",
		ms(quantile(took, 0.5)), ms(quantile(took, 1)))
	fmt.Printf("    of which until dispatched (re-proof, projection, config/read, the dispatch recorded): median %.1f ms\n", ms(quantile(before, 0.5)))
	fmt.Printf("  nlx refresh, end to end (the request, serve's poll, the refresh, the answer): median %.0f ms (reported)\n", ms(quantile(walls, 0.5)))
	return nil
}

// waitClaim waits until job's newest claim succeeded.
func waitClaim(ctx context.Context, db, job string, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	last := "none"
	for time.Now().Before(deadline) {
		st, err := state.Open(ctx, db, state.Options{ReadOnly: true})
		if err == nil {
			rows, err := st.Claims(ctx, job, 1)
			st.Close()
			if err == nil && len(rows) > 0 {
				c := rows[0]
				last = string(c.Phase)
				if c.Phase == state.ClaimSucceeded {
					return nil
				}
				if c.Phase.Terminal() {
					return fmt.Errorf("claim %s of %s: %s (%s %s)", c.ID, job, c.Phase, c.ReasonCode, c.Reason)
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("job %s: no claim succeeded within %s (newest: %s)", job, wait, last)
}

const refreshConfig = `package bench

host: operators: ["alice"]
providers: codex: {kind: "codex-app-server", status: "enabled", version: ">= 0.169.0", command: CODEXCMD}
tools: files: {command: TOOLCMD, scope: "team", owner: "platform"}
workspaces: platform: {
	team:      "platform"
	kind:      "team"
	policy:    "workspace_write"
	chatReset: "manual"
	members: alice: "admin"
	limits: {memory: "2Gi", cpu: 2, pids: 512}
	network: egress: "full"
	tools: ["files"]
}
connections: "team-codex": {owner: "alice", scope: "team", workspace: "platform", provider: "codex", billing: "api", credentialHome: "platform/codex", secret: "env:BENCH_KEY", generation: 1}
jobs: j1: {workspace: "platform", connection: "team-codex", conversation: "shared", schedule: at: "AT", prompt: "Run once."}
`
