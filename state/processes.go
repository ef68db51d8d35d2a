package state

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/nlx-dev/nlx/internal/reason"
	_ "modernc.org/sqlite"
)

// ProcessStatus is whether a launch still runs.
type ProcessStatus string

// The statuses of a launch.
const (
	ProcessRunning ProcessStatus = "running" // recorded; no stop receipt yet
	ProcessStopped ProcessStatus = "stopped" // its tree was proven gone and its receipt written
)

// ProcessRow is one launched provider process as the state keeps it. The
// identity and receipt are the isolation runtime's own records, as JSON.
type ProcessRow struct {
	LaunchID  string        `json:"launch_id"`
	Workspace string        `json:"workspace"`
	PID       int           `json:"pid"`
	StartedAt string        `json:"started_at"`
	Identity  string        `json:"identity"`
	Status    ProcessStatus `json:"status"`
	Receipt   string        `json:"receipt,omitempty"`
	StoppedAt string        `json:"stopped_at,omitempty"`
}

// ErrNoProcess means no process has that launch id.
var ErrNoProcess = &reason.Error{Code: reason.NoSuchLaunch, Msg: "no such launch"}

// RecordProcess records a launch's identity before the launch counts as
// running.
func (db *DB) RecordProcess(ctx context.Context, p ProcessRow) error {
	return db.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO processes (launch_id, workspace, pid, started_at, identity, status)
			VALUES (?, ?, ?, ?, ?, ?)`, p.LaunchID, p.Workspace, p.PID, p.StartedAt, p.Identity, ProcessRunning)
		if err != nil {
			return fmt.Errorf("record launch %s: %w", p.LaunchID, err)
		}
		return nil
	})
}

// StopProcess writes the stop receipt of a running launch and releases its
// identity.
func (db *DB) StopProcess(ctx context.Context, launchID, receipt, stoppedAt string) error {
	return db.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE processes SET status = ?, receipt = ?, stopped_at = ?
			WHERE launch_id = ? AND status = ?`, ProcessStopped, receipt, stoppedAt, launchID, ProcessRunning)
		if err != nil {
			return fmt.Errorf("receipt of launch %s: %w", launchID, err)
		}
		if n, _ := res.RowsAffected(); n != 1 {
			return fmt.Errorf("%w: %s is not a running launch", ErrNoProcess, launchID)
		}
		return nil
	})
}

// Process reads one launch.
func (db *DB) Process(ctx context.Context, launchID string) (*ProcessRow, error) {
	rows, err := db.processes(ctx, `WHERE launch_id = ?`, launchID)
	if err != nil {
		return nil, err
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("%w: %s", ErrNoProcess, launchID)
	}
	return &rows[0], nil
}

// Processes lists launches, newest first; all of them or only running ones.
func (db *DB) Processes(ctx context.Context, all bool) ([]ProcessRow, error) {
	if all {
		return db.processes(ctx, ``)
	}
	// In the SQL text, not a parameter, so that SQLite uses the partial
	// index processes_running.
	return db.processes(ctx, `WHERE status = '`+string(ProcessRunning)+`'`)
}

func (db *DB) processes(ctx context.Context, where string, args ...any) ([]ProcessRow, error) {
	return collect(ctx, db.rdb, "processes", `SELECT launch_id, workspace, pid, started_at, identity, status,
		coalesce(receipt, ''), coalesce(stopped_at, '') FROM processes `+where+` ORDER BY started_at DESC, launch_id`, args,
		func(rows *sql.Rows, p *ProcessRow) error {
			return rows.Scan(&p.LaunchID, &p.Workspace, &p.PID, &p.StartedAt, &p.Identity, &p.Status, &p.Receipt, &p.StoppedAt)
		})
}
