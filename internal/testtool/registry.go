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
	proc *registryProcess // nil while stopped
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
	config, err := writeRegistryConfig(t.TempDir(), addr)
	if err != nil {
		t.Fatal(err)
	}
	r := &RegistryProc{Addr: addr, t: t, bin: bin, config: config}
	t.Cleanup(r.Stop)
	r.Start()
	return r
}

// writeRegistryConfig writes the config.yml of a docker-registry serving
// addr with its storage under dir, and returns its path. delete.enabled
// lets tests remove manifests; the storage is a plain directory, so a
// restarted registry serves what the previous one stored.
func writeRegistryConfig(dir, addr string) (string, error) {
	config := filepath.Join(dir, "config.yml")
	yml := fmt.Sprintf("version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: %s\n  delete:\n    enabled: true\nhttp:\n  addr: %s\n",
		filepath.Join(dir, "data"), addr)
	return config, os.WriteFile(config, []byte(yml), 0o644)
}

// registryProcess is a running docker-registry.
type registryProcess struct {
	cmd  *exec.Cmd
	out  *lockedBuffer
	done chan struct{} // closed when cmd has exited
}

func (p *registryProcess) kill() {
	p.cmd.Process.Kill()
	<-p.done
}

// startRegistry runs bin with config and waits until it answers GET /v2/
// on addr, within registryStartTimeout (or ctx). It asks for /v2/ rather
// than only dialling, so that a port someone else grabbed is not taken for
// the registry. On failure nothing is left running.
func startRegistry(ctx context.Context, bin, config, addr string) (*registryProcess, error) {
	p := &registryProcess{out: &lockedBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(bin, "serve", config)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start docker-registry: %w", err)
	}
	go func() {
		p.cmd.Wait()
		close(p.done)
	}()
	ctx, cancel := context.WithTimeout(ctx, registryStartTimeout)
	defer cancel()
	client := &http.Client{Timeout: time.Second}
	for {
		select {
		case <-p.done:
			return nil, fmt.Errorf("docker-registry exited before it listened on %s: %v\n%s", addr, p.cmd.ProcessState, p.out.String())
		default:
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/v2/", nil)
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && resp.Header.Get("Docker-Distribution-Api-Version") != "" {
				return p, nil
			}
		}
		if ctx.Err() != nil {
			p.kill()
			return nil, fmt.Errorf("docker-registry did not answer on %s within %s:\n%s", addr, registryStartTimeout, p.out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// StartRegistry is Registry for a program that is not a test (the
// benchmark): docker-registry (bin) on a free 127.0.0.1 port with its
// storage under dir, answering; stop kills it and waits for it to exit.
func StartRegistry(ctx context.Context, bin, dir string) (addr string, stop func(), err error) {
	if addr, err = freeLoopbackAddr(); err != nil {
		return "", nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", nil, err
	}
	config, err := writeRegistryConfig(dir, addr)
	if err != nil {
		return "", nil, err
	}
	p, err := startRegistry(ctx, bin, config, addr)
	if err != nil {
		return "", nil, err
	}
	return addr, p.kill, nil
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
	if r.proc != nil {
		return
	}
	p, err := startRegistry(context.Background(), r.bin, r.config, r.Addr)
	if err != nil {
		r.t.Fatal(err)
	}
	r.proc = p
}

// Stop kills the registry, as a crash would, and waits until it has exited
// (its port is then closed). Stopping a stopped registry does nothing.
func (r *RegistryProc) Stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopLocked()
}

func (r *RegistryProc) stopLocked() {
	if r.proc == nil {
		return
	}
	r.proc.kill()
	r.proc = nil
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
