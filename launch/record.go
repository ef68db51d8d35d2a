package launch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nlx-dev/nlx/isolate"
	"github.com/nlx-dev/nlx/state"
)

// Processes is where launches are recorded: the state's processes table
// (state.DB), or a fake.
type Processes interface {
	RecordProcess(ctx context.Context, p state.ProcessRow) error
	StopProcess(ctx context.Context, launchID, receipt, stoppedAt string) error
	Process(ctx context.Context, launchID string) (*state.ProcessRow, error)
	Processes(ctx context.Context, all bool) ([]state.ProcessRow, error)
}

// Recorder keeps launch identities and stop receipts in the state, for
// isolate.Launch and isolate.Stop.
type Recorder struct{ DB Processes }

var _ isolate.Recorder = Recorder{}

// Record writes the identity of a launch before it counts as running.
func (r Recorder) Record(ctx context.Context, id isolate.Identity) error {
	data, err := json.Marshal(id)
	if err != nil {
		return fmt.Errorf("record launch %s: %w", id.LaunchID, err)
	}
	return r.DB.RecordProcess(ctx, state.ProcessRow{LaunchID: id.LaunchID, Workspace: id.Workspace, PID: id.PID,
		StartedAt: id.Started.UTC().Format(time.RFC3339Nano), Identity: string(data)})
}

// Receipt writes the stop receipt of a launch whose tree is proven gone.
func (r Recorder) Receipt(ctx context.Context, launchID string, rc isolate.Receipt) error {
	data, err := json.Marshal(rc)
	if err != nil {
		return fmt.Errorf("receipt of launch %s: %w", launchID, err)
	}
	err = r.DB.StopProcess(ctx, launchID, string(data), rc.Stopped.UTC().Format(time.RFC3339Nano))
	if errors.Is(err, state.ErrNoProcess) {
		// Two stoppers (nlx stop, and the nlx exec whose process it ended)
		// both proved the tree gone; the first receipt stands.
		if row, rerr := r.DB.Process(ctx, launchID); rerr == nil && row.Status == state.ProcessStopped {
			return nil
		}
	}
	return err
}

// ReapGone writes the receipts of launches recorded as running whose tree
// is proven gone (an nlx that died, killed or its terminal gone, left them
// so) and returns their ids. A launch it cannot prove gone, or stop, is
// left for the next run.
func ReapGone(ctx context.Context, r Recorder) ([]string, error) {
	rows, err := r.DB.Processes(ctx, false)
	if err != nil {
		return nil, err
	}
	var reaped []string
	for _, row := range rows {
		var id isolate.Identity
		if json.Unmarshal([]byte(row.Identity), &id) != nil {
			continue
		}
		if gone, err := isolate.Gone(id); err != nil || !gone {
			continue
		}
		if _, err := isolate.Stop(ctx, id, 0, r); err == nil {
			reaped = append(reaped, row.LaunchID)
		}
	}
	return reaped, nil
}
