package state_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/nlx-dev/nlx/state"
)

func TestProcessRecordAndReceipt(t *testing.T) {
	ctx := context.Background()
	db, err := state.Open(ctx, filepath.Join(t.TempDir(), "state.db"), state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	p := state.ProcessRow{LaunchID: "l1", Workspace: "platform", PID: 4242, StartedAt: "2026-11-30T10:00:00Z", Identity: `{"pid":4242}`}
	if err := db.RecordProcess(ctx, p); err != nil {
		t.Fatal(err)
	}
	if err := db.RecordProcess(ctx, p); err == nil {
		t.Error("the same launch recorded twice")
	}
	running, err := db.Processes(ctx, false)
	if err != nil || len(running) != 1 || running[0].Status != "running" || running[0].Identity != p.Identity {
		t.Fatalf("running: %+v %v", running, err)
	}
	if err := db.StopProcess(ctx, "l1", `{"outcome":"killed"}`, "2026-11-30T10:05:00Z"); err != nil {
		t.Fatal(err)
	}
	if err := db.StopProcess(ctx, "l1", `{}`, "later"); !errors.Is(err, state.ErrNoProcess) {
		t.Errorf("a second receipt: got %v, want ErrNoProcess", err)
	}
	if running, _ := db.Processes(ctx, false); len(running) != 0 {
		t.Errorf("still running after the receipt: %+v", running)
	}
	got, err := db.Process(ctx, "l1")
	if err != nil || got.Status != "stopped" || got.Receipt != `{"outcome":"killed"}` || got.StoppedAt != "2026-11-30T10:05:00Z" {
		t.Errorf("stopped launch: %+v %v", got, err)
	}
	if _, err := db.Process(ctx, "nope"); !errors.Is(err, state.ErrNoProcess) {
		t.Errorf("unknown launch: %v", err)
	}
}
