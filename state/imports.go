package state

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/nlx-dev/nlx/plan"
	"github.com/nlx-dev/nlx/reconcile"
)

// The reason codes an imported claim carries.
const (
	// ClaimImportedCompleted marks the succeeded claim of a one-time job
	// OpenClaw completed: it never runs again.
	ClaimImportedCompleted = "imported_completed"
	// ClaimImportedRunning marks the unknown claim of a run OpenClaw
	// started and never recorded the end of (runningAtMs).
	ClaimImportedRunning = "imported_running"
)

// ImportActor is who an imported claim was made for.
func ImportActor(preservation string) string { return "import:" + preservation }

// importClaimID is an imported claim's id: the same for the same
// occurrence of the same import, so that no re-run could add it twice.
func importClaimID(preservation, job, at string) string {
	s := sha256.Sum256([]byte(preservation + "\x00" + job + "\x00" + at))
	return "i" + hex.EncodeToString(s[:6])
}

// writeImport writes an import's records, in the transaction that creates
// its held jobs: the import row, one row per job (its unsupported work,
// one-time completion and last outcome), the claims that keep a completed
// one-time job from running again and an interrupted run unknown, and the
// conversations kept as evidence.
func writeImport(ctx context.Context, tx *sql.Tx, applyID, serial int64, im *reconcile.Import, at string) error {
	counts, err := json.Marshal(im.Counts)
	if err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO imports (preservation, manifest, era, source_path, export_dir, counts, apply_id, imported_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?)`, im.Preservation, im.Manifest, im.Era, im.SourcePath, im.ExportDir, string(counts), applyID, at); err != nil {
		return fmt.Errorf("record the import: %w", err)
	}
	self, err := selfIdentity()
	if err != nil {
		return fmt.Errorf("identify this process: %w", err)
	}
	claim := func(j reconcile.ImportedJob, when string, phase ClaimPhase, code, why string) error {
		conv := j.Spec.Conversation
		if conv == "" {
			conv = j.Name
		}
		ended := ""
		if phase.Terminal() {
			ended = at
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO claims (id, job, scheduled_at, trigger, workspace, conversation, connection,
			actor, serial, owner_pid, owner_start, owner_boot, phase, reason_code, reason, claimed_at, dispatched_at, ended_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			importClaimID(im.Preservation, j.Name, when), j.Name, when, TriggerSchedule, j.Spec.Workspace, conv, j.Spec.Connection,
			ImportActor(im.Preservation), serial, self.PID, self.Start, self.Boot, phase, code, why, at, at, ended)
		if err != nil {
			return fmt.Errorf("claim of imported job %s at %s: %w", j.Name, when, err)
		}
		return nil
	}
	for _, j := range im.Jobs {
		unsupported, err := json.Marshal(orEmpty(j.Unsupported))
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO imported_jobs (job, preservation, source_id, record, unsupported, completed_at, last_outcome)
			VALUES (?, ?, ?, ?, ?, ?, ?)`, j.Name, im.Preservation, j.SourceID, j.Record, string(unsupported), j.Completed, j.LastOutcome); err != nil {
			return fmt.Errorf("imported job %s: %w", j.Name, err)
		}
		if j.Completed != "" {
			if err := claim(j, j.Completed, ClaimSucceeded, ClaimImportedCompleted,
				"OpenClaw ran this one-time occurrence to completion before the export"); err != nil {
				return err
			}
		}
		if j.Running != "" && j.Running != j.Completed {
			if err := claim(j, j.Running, ClaimUnknown, ClaimImportedRunning,
				"OpenClaw started this run (runningAtMs) and never recorded how it ended; resolve it, nothing replays it"); err != nil {
				return err
			}
		}
	}
	stmt, err := tx.PrepareContext(ctx, `INSERT INTO imported_conversations (preservation, session_key, workspace, conversation, session_id, transcript, entries)
		VALUES (?, ?, ?, ?, ?, ?, ?)`)
	if err != nil {
		return err
	}
	defer stmt.Close()
	for _, c := range im.Conversations {
		if _, err := stmt.ExecContext(ctx, im.Preservation, c.SessionKey, c.Workspace, c.Conversation, c.SessionID, c.Transcript, c.Entries); err != nil {
			return fmt.Errorf("imported conversation %s: %w", c.SessionKey, err)
		}
	}
	return nil
}

func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// recordRelease records, when c takes a held resource into service, its
// definitions before and after and the held_import approval that allowed
// it. Completed flags and claims of the job stay as they are.
func recordRelease(ctx context.Context, tx *sql.Tx, applyID int64, c *plan.Change, approvals []int64, at string) error {
	if c.Action != plan.Update && c.Action != plan.Replace {
		return nil
	}
	var status string
	err := tx.QueryRowContext(ctx, `SELECT status FROM resources WHERE address = ?`, c.Address).Scan(&status)
	if err == sql.ErrNoRows || status != string(reconcile.StatusHeld) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("release %s: %w", c.Address, err)
	}
	ids, err := json.Marshal(approvals)
	if err != nil {
		return err
	}
	var approval int64
	err = tx.QueryRowContext(ctx, `SELECT id FROM approvals WHERE id IN (SELECT value FROM json_each(?)) AND address = ? AND risk = ?`,
		string(ids), c.Address, string(plan.RiskHeldImport)).Scan(&approval)
	if err != nil {
		return fmt.Errorf("release %s: no held_import approval among those the apply uses: %w", c.Address, err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO releases (address, apply_id, approval_id, before_spec, after_spec, at) VALUES (?, ?, ?, ?, ?, ?)`,
		c.Address, applyID, approval, string(c.Before), string(c.After), at); err != nil {
		return fmt.Errorf("release %s: %w", c.Address, err)
	}
	return nil
}

// heldImports reads what the state knows of its held imported resources.
func heldImports(ctx context.Context, tx *sql.Tx) (map[string]reconcile.HeldImport, error) {
	rows, err := tx.QueryContext(ctx, `SELECT 'job.' || j.job, j.preservation, i.manifest, j.unsupported
		FROM imported_jobs j JOIN imports i ON i.preservation = j.preservation
		JOIN resources r ON r.address = 'job.' || j.job WHERE r.status = ?`, string(reconcile.StatusHeld))
	if err != nil {
		return nil, fmt.Errorf("read held imports: %w", err)
	}
	defer rows.Close()
	out := map[string]reconcile.HeldImport{}
	for rows.Next() {
		var addr, unsupported string
		var h reconcile.HeldImport
		if err := rows.Scan(&addr, &h.Preservation, &h.Manifest, &unsupported); err != nil {
			return nil, err
		}
		if err := json.Unmarshal([]byte(unsupported), &h.Unsupported); err != nil {
			return nil, fmt.Errorf("held import %s: %w", addr, err)
		}
		out[addr] = h
	}
	return out, rows.Err()
}

// Release is one held import taken into service.
type Release struct {
	Address    string          `json:"address"`
	ApplyID    int64           `json:"apply_id"`
	ApprovalID int64           `json:"approval_id"`
	Before     json.RawMessage `json:"before"`
	After      json.RawMessage `json:"after"`
	At         string          `json:"at"`
}

// Releases lists the releases of held imports, in order.
func (db *DB) Releases(ctx context.Context) ([]Release, error) {
	return collect(ctx, db.rdb, "releases", `SELECT address, apply_id, approval_id, before_spec, after_spec, at FROM releases ORDER BY id`, nil,
		func(rows *sql.Rows, r *Release) error {
			var before, after string
			if err := rows.Scan(&r.Address, &r.ApplyID, &r.ApprovalID, &before, &after, &r.At); err != nil {
				return err
			}
			r.Before, r.After = json.RawMessage(before), json.RawMessage(after)
			return nil
		})
}

// ImportRow is one import as the state records it.
type ImportRow struct {
	Preservation  string           `json:"preservation"`
	Manifest      string           `json:"manifest"`
	Era           int              `json:"era"`
	SourcePath    string           `json:"source_path"`
	ExportDir     string           `json:"export_dir"`
	Counts        map[string]int64 `json:"counts"`
	ApplyID       int64            `json:"apply_id"`
	ImportedAt    string           `json:"imported_at"`
	Jobs          int              `json:"jobs"`
	Held          int              `json:"held"`
	Conversations int              `json:"conversations"`
}

// Imports lists the imports, by preservation.
func (db *DB) Imports(ctx context.Context) ([]ImportRow, error) {
	return collect(ctx, db.rdb, "imports", `SELECT i.preservation, i.manifest, i.era, i.source_path, i.export_dir, i.counts, i.apply_id, i.imported_at,
		(SELECT count(*) FROM imported_jobs j WHERE j.preservation = i.preservation),
		(SELECT count(*) FROM imported_jobs j JOIN resources r ON r.address = 'job.' || j.job WHERE j.preservation = i.preservation AND r.status = ?),
		(SELECT count(*) FROM imported_conversations c WHERE c.preservation = i.preservation)
		FROM imports i ORDER BY i.preservation`, []any{string(reconcile.StatusHeld)},
		func(rows *sql.Rows, r *ImportRow) error {
			var counts string
			if err := rows.Scan(&r.Preservation, &r.Manifest, &r.Era, &r.SourcePath, &r.ExportDir, &counts, &r.ApplyID, &r.ImportedAt,
				&r.Jobs, &r.Held, &r.Conversations); err != nil {
				return err
			}
			return json.Unmarshal([]byte(counts), &r.Counts)
		})
}
