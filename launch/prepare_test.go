package launch

import (
	"context"
	"errors"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/nlx-dev/nlx/images"
	"github.com/nlx-dev/nlx/internal/reason"
	"github.com/nlx-dev/nlx/isolate"
	"github.com/nlx-dev/nlx/state"
)

func TestPrepare(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Setenv("NLX_PROVIDER_USER", "61234:61234")
	}
	ctx := context.Background()
	team := Target{Workspace: "platform", Connection: "team"}
	l, err := Prepare(ctx, base(), paths, Spec{Target: team, Command: []string{"codex", "app-server"},
		HostEnv: []string{"PATH=/usr/bin"}, Backend: isolate.Bwrap})
	if err != nil {
		t.Fatal(err)
	}
	r := l.Request
	if !slices.Equal(r.Command, []string{"codex", "app-server"}) || r.Backend != isolate.Bwrap || len(r.HostEnv) != 1 {
		t.Errorf("request = command %q, backend %q, env %q; want the spec's", r.Command, r.Backend, r.HostEnv)
	}
	if os.Geteuid() == 0 && (r.User == nil || r.User.UID != 61234) {
		t.Errorf("as root, the launch runs as %+v, want the provider user 61234", r.User)
	}
	if os.Geteuid() != 0 && r.User != nil {
		t.Errorf("not as root, the launch switches to %+v", r.User)
	}

	tests := []struct {
		name string
		spec Spec
		want reason.Code
	}{
		{"in the image of a workspace without one", Spec{Target: Target{Workspace: "alice", Connection: "mine"}, InImage: true}, reason.ConnectionWorkspace},
		{"in the image, no store", Spec{Target: team, InImage: true}, reason.InvalidRequest},
		{"in the image, a digest that is no digest", Spec{Target: team, InImage: true, Images: &images.Store{Dir: t.TempDir()}}, reason.InvalidAppliedSpec},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Prepare(ctx, base(), paths, tt.spec)
			if got := reason.CodeOf(err); got != tt.want {
				t.Errorf("Prepare: %v (code %s), want %s", err, got, tt.want)
			}
		})
	}
}

// processes is an in-memory processes table.
type processes struct{ rows map[string]*state.ProcessRow }

var _ Processes = (*processes)(nil)

func (p *processes) RecordProcess(_ context.Context, r state.ProcessRow) error {
	r.Status = "running"
	p.rows[r.LaunchID] = &r
	return nil
}

func (p *processes) StopProcess(_ context.Context, id, receipt, at string) error {
	r := p.rows[id]
	if r == nil || r.Status != "running" {
		return state.ErrNoProcess
	}
	r.Status, r.Receipt, r.StoppedAt = "stopped", receipt, at
	return nil
}

func (p *processes) Process(_ context.Context, id string) (*state.ProcessRow, error) {
	if r := p.rows[id]; r != nil {
		return r, nil
	}
	return nil, state.ErrNoProcess
}

func (p *processes) Processes(_ context.Context, all bool) ([]state.ProcessRow, error) {
	var out []state.ProcessRow
	for _, r := range p.rows {
		if all || r.Status == "running" {
			out = append(out, *r)
		}
	}
	return out, nil
}

func TestRecorder(t *testing.T) {
	ctx := context.Background()
	db := &processes{rows: map[string]*state.ProcessRow{}}
	rec := Recorder{DB: db}
	id := isolate.Identity{LaunchID: "l1", Workspace: "platform", Started: time.Unix(0, 0)}
	if err := rec.Record(ctx, id); err != nil {
		t.Fatal(err)
	}
	if db.rows["l1"].Status != "running" || db.rows["l1"].Identity == "" {
		t.Fatalf("recorded %+v, want a running row with the identity", db.rows["l1"])
	}
	rc := isolate.Receipt{LaunchID: "l1", Stopped: time.Unix(1, 0)}
	if err := rec.Receipt(ctx, "l1", rc); err != nil {
		t.Fatal(err)
	}
	// A second stopper that also proved the tree gone: the first receipt stands.
	if err := rec.Receipt(ctx, "l1", rc); err != nil {
		t.Errorf("second receipt: %v, want the first to stand", err)
	}
	if err := rec.Receipt(ctx, "never", rc); !errors.Is(err, state.ErrNoProcess) {
		t.Errorf("receipt of an unknown launch: %v, want ErrNoProcess", err)
	}
}
