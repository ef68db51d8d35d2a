package state

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/nlx-dev/nlx/reconcile"
	_ "modernc.org/sqlite"
)

// Approvals implements reconcile.Store.
func (db *DB) Approvals(ctx context.Context, planHash string) ([]reconcile.Approval, error) {
	return collect(ctx, db.rdb, "approvals", `SELECT id, plan_hash, address, risk, actor, reason, created_at, expires_at,
		consumed_at IS NOT NULL, coalesce(consumed_by, 0)
		FROM approvals WHERE plan_hash = ? ORDER BY id`, []any{planHash},
		func(rows *sql.Rows, a *reconcile.Approval) error {
			var created, expires string
			if err := rows.Scan(&a.ID, &a.PlanHash, &a.Address, &a.Risk, &a.Actor, &a.Reason, &created, &expires, &a.Consumed, &a.ConsumedBy); err != nil {
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
			if _, err := tx.ExecContext(ctx, `INSERT INTO approvals (plan_hash, address, risk, actor, reason, created_at, expires_at)
				VALUES (?, ?, ?, ?, ?, ?, ?)`, a.PlanHash, a.Address, a.Risk, a.Actor, a.Reason,
				a.CreatedAt.UTC().Format(time.RFC3339Nano), a.ExpiresAt.UTC().Format(time.RFC3339Nano)); err != nil {
				return fmt.Errorf("record approval of %s %s: %w", a.Address, a.Risk, err)
			}
		}
		return nil
	})
}
