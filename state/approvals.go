package state

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/nlx-dev/nlx/internal/reason"
	"github.com/nlx-dev/nlx/reconcile"
	_ "modernc.org/sqlite"
)

// Approvals implements reconcile.Store.
func (db *DB) Approvals(ctx context.Context, planHash string) ([]reconcile.Approval, error) {
	return collect(ctx, db.rdb, "approvals", `SELECT id, plan_hash, address, risk, actor, reason, created_at, expires_at,
		consumed_at IS NOT NULL, coalesce(consumed_by, 0), proof, coalesce(signature, '')
		FROM approvals WHERE plan_hash = ? ORDER BY id`, []any{planHash},
		func(rows *sql.Rows, a *reconcile.Approval) error {
			var created, expires string
			if err := rows.Scan(&a.ID, &a.PlanHash, &a.Address, &a.Risk, &a.Actor, &a.Reason, &created, &expires, &a.Consumed, &a.ConsumedBy, &a.Proof, &a.Signature); err != nil {
				return err
			}
			a.CreatedAt, _ = time.Parse(time.RFC3339Nano, created)
			a.ExpiresAt, _ = time.Parse(time.RFC3339Nano, expires)
			return nil
		})
}

// RecordApprovals implements reconcile.Store.
func (db *DB) RecordApprovals(ctx context.Context, lockID string, approvals []reconcile.Approval) error {
	return db.write(ctx, func(tx *sql.Tx) error {
		if err := holds(ctx, tx, lockID); err != nil {
			return err
		}
		for _, a := range approvals {
			if _, err := tx.ExecContext(ctx, `INSERT INTO approvals (plan_hash, address, risk, actor, reason, created_at, expires_at, proof)
				VALUES (?, ?, ?, ?, ?, ?, ?, ?)`, a.PlanHash, a.Address, a.Risk, a.Actor, a.Reason,
				a.CreatedAt.UTC().Format(time.RFC3339Nano), a.ExpiresAt.UTC().Format(time.RFC3339Nano), a.Proof); err != nil {
				return fmt.Errorf("record approval of %s %s: %w", a.Address, a.Risk, err)
			}
		}
		return nil
	})
}

// recordSigned records, in an apply's commit, the signed approvals it uses
// (ID 0), and returns the ids of all it uses. A signature already recorded
// was used by an earlier apply: approval_replayed, and nothing of the
// commit is kept.
func recordSigned(ctx context.Context, tx *sql.Tx, used []reconcile.Approval) ([]int64, error) {
	ids := make([]int64, 0, len(used))
	for _, a := range used {
		if a.ID != 0 {
			ids = append(ids, a.ID)
			continue
		}
		if a.Signature == "" {
			return nil, fmt.Errorf("approval of %s %s by %s: neither recorded nor signed", a.Address, a.Risk, a.Actor)
		}
		var prior int64
		err := tx.QueryRowContext(ctx, `SELECT coalesce(consumed_by, 0) FROM approvals WHERE signature = ?`, a.Signature).Scan(&prior)
		if err == nil {
			return nil, reason.New(reason.ApprovalReplayed, "the signed approval of %s %s by %s (%s) was used by apply %d", a.Address, a.Risk, a.Actor, a.Source, prior)
		}
		if err != sql.ErrNoRows {
			return nil, fmt.Errorf("look up signed approval: %w", err)
		}
		var id int64
		if err := tx.QueryRowContext(ctx, `INSERT INTO approvals (plan_hash, address, risk, actor, reason, created_at, expires_at, proof, signature)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id`, a.PlanHash, a.Address, a.Risk, a.Actor, a.Reason,
			a.CreatedAt.UTC().Format(time.RFC3339Nano), a.ExpiresAt.UTC().Format(time.RFC3339Nano), a.Proof, a.Signature).Scan(&id); err != nil {
			return nil, fmt.Errorf("record signed approval of %s %s: %w", a.Address, a.Risk, err)
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// AppliedPlan returns the id and resulting serial of the completed apply of
// the plan with that hash, or 0, 0 when none completed.
func (db *DB) AppliedPlan(ctx context.Context, planHash string) (int64, int64, error) {
	var id, serial int64
	err := db.rdb.QueryRowContext(ctx, `SELECT id, serial_after FROM applies WHERE plan_hash = ? AND status = ? ORDER BY id DESC LIMIT 1`, planHash, ApplyCompleted).Scan(&id, &serial)
	if err == sql.ErrNoRows {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, fmt.Errorf("state %s: read applies: %w", db.path, err)
	}
	return id, serial, nil
}
