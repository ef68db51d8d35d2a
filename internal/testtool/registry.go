package testtool

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// registryStartTimeout bounds how long a docker-registry may take to answer
// on its address.
const registryStartTimeout = 30 * time.Second

// Registry starts Debian's docker-registry (distribution 2.8) on a free
// 127.0.0.1 port with its storage in t.TempDir(), waits until it listens,
// stops it at t.Cleanup, and returns "127.0.0.1:PORT". Skips (fails under
// CI=true) when docker-registry is missing, via Need.
func Registry(t testing.TB) string {
	t.Helper()
	return RegistryAt(t).Addr
}

// RegistryProc is a docker-registry a test can stop and start again on the
// same storage and address, for outage tests.
type RegistryProc struct {
	// Addr is the registry's "127.0.0.1:PORT"; it stays the same across
	// Stop and Start.
	Addr string

	t      testing.TB
	bin    string
	config string

	mu   sync.Mutex
	cmd  *exec.Cmd
	out  *lockedBuffer
	done chan struct{} // closed when cmd has exited
}

// RegistryAt is Registry, but returns the running registry as a
// *RegistryProc whose Stop and Start let a test take it down and bring it
// back on the same storage directory and address. It is stopped at
// t.Cleanup.
func RegistryAt(t testing.TB) *RegistryProc {
	t.Helper()
	bin := Need(t, "docker-registry")
	addr, err := freeLoopbackAddr()
	if err != nil {
		t.Fatalf("docker-registry: %v", err)
	}
	dir := t.TempDir()
	config := filepath.Join(dir, "config.yml")
	// delete.enabled lets tests remove manifests; the storage is a plain
	// directory so a restarted registry serves what the previous one stored.
	yml := fmt.Sprintf("version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: %s\n  delete:\n    enabled: true\nhttp:\n  addr: %s\n",
		filepath.Join(dir, "data"), addr)
	if err := os.WriteFile(config, []byte(yml), 0o644); err != nil {
		t.Fatal(err)
	}
	r := &RegistryProc{Addr: addr, t: t, bin: bin, config: config}
	t.Cleanup(r.Stop)
	r.Start()
	return r
}

// freeLoopbackAddr picks a port the kernel considers free on 127.0.0.1.
// Another process may take it before docker-registry binds it; Start then
// sees the registry exit and fails the test with its output.
func freeLoopbackAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := l.Addr().String()
	l.Close()
	return addr, nil
}

// Start runs the registry and waits until it answers GET /v2/ on Addr. It
// fails the test when the registry exits first or does not answer in time.
// Starting a running registry does nothing.
func (r *RegistryProc) Start() {
	r.t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd != nil {
		return
	}
	out := &lockedBuffer{}
	cmd := exec.Command(r.bin, "serve", r.config)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		r.t.Fatalf("start docker-registry: %v", err)
	}
	done := make(chan struct{})
	go func() {
		cmd.Wait()
		close(done)
	}()
	r.cmd, r.out, r.done = cmd, out, done

	ctx, cancel := context.WithTimeout(context.Background(), registryStartTimeout)
	defer cancel()
	// Ask for /v2/ rather than only dialling, so that a port someone else
	// grabbed is not taken for our registry.
	client := &http.Client{Timeout: time.Second}
	for {
		select {
		case <-done:
			r.cmd = nil
			r.t.Fatalf("docker-registry exited before it listened on %s: %v\n%s", r.Addr, cmd.ProcessState, out.String())
		default:
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+r.Addr+"/v2/", nil)
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && resp.Header.Get("Docker-Distribution-Api-Version") != "" {
				return
			}
		}
		if ctx.Err() != nil {
			r.stopLocked()
			r.t.Fatalf("docker-registry did not answer on %s within %s:\n%s", r.Addr, registryStartTimeout, out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop kills the registry, as a crash would, and waits until it has exited
// (its port is then closed). Stopping a stopped registry does nothing.
func (r *RegistryProc) Stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopLocked()
}

func (r *RegistryProc) stopLocked() {
	if r.cmd == nil {
		return
	}
	r.cmd.Process.Kill()
	<-r.done
	r.cmd = nil
}

// lockedBuffer collects a process's output; exec writes to it from its own
// goroutine while Start may read it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	return len(p), nil
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}
