package launch

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/nlx-dev/nlx/egress"
	"github.com/nlx-dev/nlx/isolate"
	"github.com/nlx-dev/nlx/state"
)

// EgressRecorder keeps a launch's connections: the state (state.DB), or a
// fake.
type EgressRecorder interface {
	RecordEgress(ctx context.Context, e state.EgressRow) error
}

// Egress is the running proxy of a launch with egress inference.
type Egress struct {
	*egress.Running
	recorded chan struct{}
}

// StartEgress starts the proxy of launch l (id launchID) when its
// workspace's egress is inference, and completes its request with it: the
// proxy allows exactly the provider's inference endpoints, and every
// connection is recorded with the launch. It returns nil for any other
// egress. A proxy that cannot start is egress_proxy_unavailable, and the
// launch must not be made.
func StartEgress(ctx context.Context, l *Launch, launchID string, rec EgressRecorder) (*Egress, error) {
	req := &l.Request
	if req.Egress != isolate.EgressInference {
		return nil, nil
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("egress: nlx's own executable: %w", err)
	}
	uid, gid := req.RunAs()
	run, err := egress.Start(ctx, exe, egress.DefaultBase(), uid, gid, l.ProviderSpec.Inference)
	if err != nil {
		return nil, err
	}
	e := &Egress{Running: run, recorded: make(chan struct{})}
	go func() {
		defer close(e.recorded)
		bg := context.WithoutCancel(ctx)
		for r := range run.Records {
			// Best effort: a connection whose record fails is still made
			// or refused as decided.
			_ = rec.RecordEgress(bg, state.EgressRow{LaunchID: launchID, Host: r.Host, Port: r.Port, Method: r.Method,
				Decision: string(r.Decision), Reason: r.Reason, Addr: r.Addr, BytesUp: r.BytesUp, BytesDown: r.BytesDown,
				StartedAt: r.Start.UTC().Format(time.RFC3339Nano), EndedAt: r.End.UTC().Format(time.RFC3339Nano)})
		}
	}()
	req.Proxy = &isolate.Proxy{Socket: run.Socket, Helper: exe}
	return e, nil
}

// Stop ends the proxy once its launch has ended, and waits until every
// connection it saw is recorded.
func (e *Egress) Stop() {
	if e == nil {
		return
	}
	e.Running.Stop()
	<-e.recorded
}

// CheckEgress proves this host can give a launch inference egress: it
// starts a proxy allowing nothing and, in a sandbox with egress inference
// (backend b, as the provider's user), a probe that asks the bridge for a
// host and wants the proxy's refusal. nlx doctor reports it.
func CheckEgress(ctx context.Context, b isolate.Backend, user *isolate.User) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	uid, gid := os.Geteuid(), os.Getegid()
	if user != nil {
		uid, gid = int(user.UID), int(user.GID)
	}
	run, err := egress.Start(ctx, exe, egress.DefaultBase(), uid, gid, nil)
	if err != nil {
		return err
	}
	defer run.Stop()
	go func() {
		for range run.Records {
		}
	}()
	root, err := os.MkdirTemp(egress.DefaultBase(), "doctor-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(root)
	ws := root + "/w"
	if err := os.Mkdir(ws, 0o755); err != nil {
		return err
	}
	if err := os.Chmod(root, 0o711); err != nil {
		return err
	}
	req := isolate.Request{Workspace: "doctor", WorkspaceRoot: root, WorkspaceDir: ws, Policy: isolate.ReadOnly,
		Egress: isolate.EgressInference, Proxy: &isolate.Proxy{Socket: run.Socket, Helper: exe},
		Limits:  isolate.Limits{MemoryBytes: 128 << 20, CPU: 1, Pids: 64},
		Command: []string{egress.HelperPath, egress.ProbeMode}, Backend: b, User: user}
	var out memWriter
	p, err := isolate.Launch(ctx, req, isolate.Options{Recorder: nopRecorder{}, Stdout: &out, Stderr: &out})
	if err != nil {
		return err
	}
	ps, werr := p.Wait(ctx)
	if _, err := isolate.Stop(context.WithoutCancel(ctx), p.Identity, time.Second, nopRecorder{}); err != nil {
		return err
	}
	if werr != nil {
		return werr
	}
	if !ps.Success() {
		return fmt.Errorf("the probe through the bridge failed: %s", out.String())
	}
	return nil
}

// nopRecorder records nothing: a doctor's probe is not a launch of the
// state.
type nopRecorder struct{}

func (nopRecorder) Record(context.Context, isolate.Identity) error         { return nil }
func (nopRecorder) Receipt(context.Context, string, isolate.Receipt) error { return nil }

// memWriter keeps what is written to it.
type memWriter struct {
	mu sync.Mutex
	b  []byte
}

func (w *memWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.b = append(w.b, p...)
	return len(p), nil
}

func (w *memWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return string(w.b)
}
