package launch

import (
	"context"
	"fmt"
	"os"
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
	uid, gid := os.Geteuid(), os.Getegid()
	if req.User != nil {
		uid, gid = int(req.User.UID), int(req.User.GID)
	}
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
