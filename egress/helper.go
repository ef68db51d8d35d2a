package egress

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nlx-dev/nlx/internal/reason"
)

// The helper modes nlx is re-executed in (Main).
const (
	// ProxyMode: the host side of one launch: PROXY SOCKET UID GID
	// ENTRY...; records on stdout, one JSON object per line, after a
	// first {"ready":true}.
	ProxyMode = "__egress-proxy"
	// BridgeMode: inside the sandbox: BRIDGE LISTEN SOCKET -- CMD ARGS...
	BridgeMode = "__egress-bridge"
	// LoopbackMode: a runc createRuntime hook that brings the container's
	// loopback up (bubblewrap does so itself).
	LoopbackMode = "__egress-loopback"
	// ProbeMode: inside a sandbox, under the bridge: asks the proxy for a
	// host no list has and exits 0 when it is refused, as nlx doctor's
	// check of the whole path.
	ProbeMode = "__egress-probe"
)

// ProbeHost is the host ProbeMode asks for: no list may name it (.invalid
// is reserved, RFC 2606).
const ProbeHost = "nlx-doctor.invalid:443"

// Inside the sandbox.
const (
	// BridgeAddr is where the bridge listens, on the sandbox's own
	// loopback; the provider's proxy variables name it.
	BridgeAddr = "127.0.0.1:3128"
	// SocketPath is where the proxy's socket is bound.
	SocketPath = "/run/nlx/egress.sock"
	// HelperPath is where nlx itself is bound, to run the bridge.
	HelperPath = "/run/nlx/nlx"
)

// ProxyEnv are the variables that send a provider through the bridge:
// each is honoured by the pinned Codex (HTTP_PROXY, http_proxy, ALL_PROXY,
// all_proxy for http; HTTPS_PROXY for https) or Claude Code (each of the
// five tried alone: HTTP_PROXY, http_proxy, ALL_PROXY, HTTPS_PROXY,
// https_proxy), as the fake model saw their requests come through the
// proxy; all_proxy is set for the tools they start.
func ProxyEnv() map[string]string {
	url := "http://" + BridgeAddr
	return map[string]string{
		"HTTP_PROXY": url, "HTTPS_PROXY": url, "ALL_PROXY": url,
		"http_proxy": url, "https_proxy": url, "all_proxy": url,
		"NO_PROXY": "", "no_proxy": "",
	}
}

// Main runs nlx's egress helper modes: when os.Args names one it never
// returns.
func Main() {
	if len(os.Args) < 2 {
		return
	}
	var err error
	switch os.Args[1] {
	case ProxyMode:
		err = proxyMain(os.Args[2:])
	case BridgeMode:
		err = bridgeMain(os.Args[2:]) // exits with the command's status
	case LoopbackMode:
		err = loopbackMain(os.Stdin)
	case ProbeMode:
		err = probeMain()
	default:
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "nlx egress:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func proxyMain(args []string) error {
	if len(args) < 3 {
		return errors.New("usage: " + ProxyMode + " SOCKET UID GID [ENTRY...]")
	}
	uid, err1 := strconv.Atoi(args[1])
	gid, err2 := strconv.Atoi(args[2])
	if err1 != nil || err2 != nil {
		return errors.New("UID and GID must be numbers")
	}
	policy, err := NewPolicy(args[3:])
	if err != nil {
		return err
	}
	ln, err := net.Listen("unix", args[0])
	if err != nil {
		return err
	}
	if err := os.Chown(args[0], uid, gid); err != nil {
		return err
	}
	if err := os.Chmod(args[0], 0o600); err != nil {
		return err
	}
	var mu sync.Mutex
	enc := json.NewEncoder(os.Stdout)
	emit := func(v any) {
		mu.Lock()
		defer mu.Unlock()
		enc.Encode(v)
	}
	p := &Proxy{Policy: policy, Record: func(r Record) { emit(r) }}
	emit(map[string]bool{"ready": true})
	// The launching nlx holds stdin: when it goes, so does the proxy.
	go func() {
		io.Copy(io.Discard, os.Stdin)
		ln.Close()
	}()
	return p.Serve(newHandoverListener(ln))
}

// bridgeMain listens on BridgeAddr, hands each connection over to the
// proxy (or, when it cannot, copies it to the proxy's socket), and runs
// the command until it exits.
func bridgeMain(args []string) error {
	if len(args) < 4 || args[2] != "--" {
		return errors.New("usage: " + BridgeMode + " LISTEN SOCKET -- CMD [ARGS...]")
	}
	ln, err := net.Listen("tcp", args[0])
	if err != nil {
		return fmt.Errorf("bridge: %w", err)
	}
	socket := args[1]
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go bridgeConn(c, socket)
		}
	}()
	cmd := exec.Command(args[3], args[4:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = os.Environ()
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("bridge: %w", err)
	}
	go func() {
		for s := range sigs {
			cmd.Process.Signal(s)
		}
	}()
	err = cmd.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			os.Exit(128 + int(ws.Signal()))
		}
		os.Exit(ee.ExitCode())
	}
	return err
}

// bridgeConn hands c over to the proxy at socket, or, when it cannot,
// copies it there both ways until either side ends.
func bridgeConn(c net.Conn, socket string) {
	defer c.Close()
	// The proxy gone, there is no network at all: the connection just
	// closes.
	up, err := net.DialTimeout("unix", socket, 5*time.Second)
	if err != nil {
		return
	}
	defer up.Close()
	if handOver(c, up) == nil {
		return // the proxy serves c's socket itself
	}
	splice(c, c, up)
}

// probeMain asks the bridge for ProbeHost and wants the proxy's refusal.
func probeMain() error {
	c, err := net.DialTimeout("tcp", BridgeAddr, 5*time.Second)
	if err != nil {
		return fmt.Errorf("probe: the bridge: %w", err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", ProbeHost, ProbeHost)
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return fmt.Errorf("probe: no answer through the bridge: %w", err)
	}
	if !strings.HasPrefix(line, "HTTP/1.1 403") {
		return fmt.Errorf("probe: the proxy answered %q, want a 403 refusal", strings.TrimSpace(line))
	}
	return nil
}

// loopbackMain is the runc hook: the container's state on stdin names its
// pid, whose network namespace gets its loopback up.
func loopbackMain(in io.Reader) error {
	var st struct {
		Pid int `json:"pid"`
	}
	if err := json.NewDecoder(in).Decode(&st); err != nil || st.Pid <= 0 {
		return fmt.Errorf("loopback hook: no container pid in the state (%v)", err)
	}
	ns, err := os.Open(filepath.Join("/proc", strconv.Itoa(st.Pid), "ns", "net"))
	if err != nil {
		return fmt.Errorf("loopback hook: %w", err)
	}
	defer ns.Close()
	runtime.LockOSThread() // this thread leaves nlx's namespace for good: the process exits after
	if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("loopback hook: setns: %w", err)
	}
	return loopbackUp()
}

// loopbackUp sets lo up in the calling thread's network namespace.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("loopback: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("loopback: flags: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("loopback: up: %w", err)
	}
	return nil
}

// Running is one launch's proxy.
type Running struct {
	// Socket is the proxy's Unix socket on the host (isolate binds it at
	// SocketPath).
	Socket string
	// Records receives every connection; it is closed when the proxy has
	// ended.
	Records <-chan Record
	// Done is closed when the proxy process has ended.
	Done <-chan struct{}

	cmd   *exec.Cmd
	stdin io.Closer
	dir   string
}

// Start runs the proxy of one launch: nlx (exe) re-executed as ProxyMode,
// its socket in a new directory under base that only root writes, owned
// by the provider's uid:gid, allowing entries. A proxy that cannot start
// is egress_proxy_unavailable: the launch must not start.
func Start(ctx context.Context, exe, base string, uid, gid int, entries []string) (*Running, error) {
	fail := func(err error) (*Running, error) {
		return nil, reason.Wrap(reason.EgressProxyUnavailable, err, "the inference proxy cannot start")
	}
	if _, err := NewPolicy(entries); err != nil {
		return fail(err)
	}
	// The provider's user must reach its socket through the base (search
	// only), which nobody else may write.
	if err := os.MkdirAll(base, 0o711); err != nil {
		return fail(err)
	}
	if err := os.Chmod(base, 0o711); err != nil {
		return fail(err)
	}
	dir, err := os.MkdirTemp(base, "proxy-")
	if err != nil {
		return fail(err)
	}
	if err := os.Chmod(dir, 0o711); err != nil {
		os.RemoveAll(dir)
		return fail(err)
	}
	socket := filepath.Join(dir, "egress.sock")
	cmd := exec.Command(exe, append([]string{ProxyMode, socket, strconv.Itoa(uid), strconv.Itoa(gid)}, entries...)...)
	cmd.Env = []string{}
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		os.RemoveAll(dir)
		return fail(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		os.RemoveAll(dir)
		return fail(err)
	}
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return fail(err)
	}
	records, done := make(chan Record, 64), make(chan struct{})
	r := &Running{Socket: socket, Records: records, Done: done, cmd: cmd, stdin: stdin, dir: dir}
	ready := make(chan error, 1)
	go func() {
		defer close(done)
		defer close(records)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		first := true
		for sc.Scan() {
			if first {
				first = false
				var m map[string]bool
				if json.Unmarshal(sc.Bytes(), &m) != nil || !m["ready"] {
					ready <- errors.New("the proxy said " + sc.Text())
					break
				}
				ready <- nil
				continue
			}
			var rec Record
			if json.Unmarshal(sc.Bytes(), &rec) == nil {
				records <- rec
			}
		}
		if first {
			ready <- errors.New("the proxy exited before it listened")
		}
		cmd.Wait()
	}()
	select {
	case err := <-ready:
		if err != nil {
			r.Stop()
			return fail(err)
		}
	case <-ctx.Done():
		r.Stop()
		return fail(ctx.Err())
	case <-time.After(10 * time.Second):
		r.Stop()
		return fail(errors.New("the proxy did not listen within 10s"))
	}
	return r, nil
}

// Died reports whether the proxy has ended by itself (nobody called Stop):
// it waits up to d for its end to show, since a provider may notice a dead
// proxy (its connections cut) before the proxy's exit is seen here.
func (r *Running) Died(d time.Duration) bool {
	select {
	case <-r.Done:
		return true
	case <-time.After(d):
	}
	// Still no exit seen: a proxy that no longer accepts is dead too.
	c, err := net.DialTimeout("unix", r.Socket, time.Second)
	if err != nil {
		return true
	}
	c.Close()
	return false
}

// Pid is the proxy process's.
func (r *Running) Pid() int { return r.cmd.Process.Pid }

// Stop ends the proxy and removes its socket. Records already made are
// still delivered until Records closes.
func (r *Running) Stop() {
	r.stdin.Close()
	select {
	case <-r.Done:
	case <-time.After(2 * time.Second):
		r.cmd.Process.Kill()
		<-r.Done
	}
	os.RemoveAll(r.dir)
}

// DefaultBase is where launches' proxy sockets go: /run/nlx-egress as
// root (beside runc's /run/nlx, which is 0700), else a directory of the
// user's under the temporary directory.
func DefaultBase() string {
	if os.Geteuid() == 0 {
		return "/run/nlx-egress"
	}
	return filepath.Join(os.TempDir(), "nlx-egress-"+strconv.Itoa(os.Geteuid()))
}
