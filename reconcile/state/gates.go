package state

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nlx-dev/nlx/plan"
	"github.com/nlx-dev/nlx/reconcile"
	"github.com/nlx-dev/nlx/schema"
)

// dispatchDetail is what a 'dispatched' journal row keeps of its change, so
// that resolving it as applied can record exactly what was dispatched.
type dispatchDetail struct {
	Kind   schema.Kind     `json:"kind"`
	Name   string          `json:"name"`
	Action plan.Action     `json:"action"`
	After  json.RawMessage `json:"after"`
}

// holds refuses to write under a lock that is not (any more) lockID's.
func holds(ctx context.Context, tx *sql.Tx, lockID string) error {
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM locks WHERE id = 1 AND lock_id = ?`, lockID).Scan(&n); err != nil {
		return fmt.Errorf("check lock: %w", err)
	}
	if n != 1 {
		return fmt.Errorf("%w: lock %s was released or taken over", ErrNotLocked, lockID)
	}
	return nil
}

// Dispatch implements reconcile.Store. The transaction is synced to disk
// (synchronous=FULL): an effect must never happen without its record.
func (db *DB) Dispatch(ctx context.Context, applyID int64, changes []plan.Change) error {
	if db.wdb == nil {
		return fmt.Errorf("state %s: %w", db.path, ErrReadOnly)
	}
	if _, err := db.wdb.ExecContext(ctx, `PRAGMA synchronous = FULL`); err != nil {
		return fmt.Errorf("journal dispatch: %w", err)
	}
	defer db.wdb.ExecContext(context.WithoutCancel(ctx), `PRAGMA synchronous = NORMAL`)
	return db.write(ctx, func(tx *sql.Tx) error {
		if err := stillLocked(ctx, tx, applyID); err != nil {
			return err
		}
		at := db.stamp()
		for i := range changes {
			c := &changes[i]
			detail, err := json.Marshal(dispatchDetail{Kind: c.Kind, Name: c.Name, Action: c.Action, After: c.After})
			if err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO journal (apply_id, address, action, phase, at, detail) VALUES (?, ?, ?, 'dispatched', ?, ?)`,
				applyID, c.Address, string(c.Action), at, string(detail)); err != nil {
				return fmt.Errorf("journal %s dispatched: %w", c.Address, err)
			}
		}
		return nil
	})
}

// Fail implements reconcile.Store.
func (db *DB) Fail(ctx context.Context, applyID int64, changes []plan.Change, reason string) error {
	return db.write(ctx, func(tx *sql.Tx) error {
		at := db.stamp()
		for i := range changes {
			if _, err := tx.ExecContext(ctx, `INSERT INTO journal (apply_id, address, action, phase, at, detail) VALUES (?, ?, ?, 'failed', ?, ?)`,
				applyID, changes[i].Address, string(changes[i].Action), at, reason); err != nil {
				return fmt.Errorf("journal %s failed: %w", changes[i].Address, err)
			}
		}
		_, err := tx.ExecContext(ctx, `UPDATE applies SET failed = failed + ? WHERE id = ?`, len(changes), applyID)
		return err
	})
}

// openOutcomes selects the journal rows whose effect nobody knows and nobody
// resolved: 'unknown' rows, and 'dispatched' rows no later row of the same
// apply and address followed.
const openOutcomes = `SELECT j.id, j.apply_id, j.address, j.action, j.phase, j.at, coalesce(j.detail, '') FROM journal j
	WHERE j.phase IN ('dispatched', 'unknown')
	AND NOT EXISTS (SELECT 1 FROM journal k WHERE k.address = j.address AND k.apply_id = j.apply_id AND k.id > j.id)
	AND NOT EXISTS (SELECT 1 FROM resolutions r WHERE r.journal_id = j.id)
	ORDER BY j.id`

type openRow struct {
	id, applyID         int64
	address, action, at string
	phase, detail       string
}

func queryOpen(ctx context.Context, q interface {
	QueryContext(context.Context, string, ...any) (*sql.Rows, error)
}) ([]openRow, error) {
	rows, err := q.QueryContext(ctx, openOutcomes)
	if err != nil {
		return nil, fmt.Errorf("read journal: %w", err)
	}
	defer rows.Close()
	var out []openRow
	for rows.Next() {
		var r openRow
		if err := rows.Scan(&r.id, &r.applyID, &r.address, &r.action, &r.phase, &r.at, &r.detail); err != nil {
			return nil, fmt.Errorf("read journal: %w", err)
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

func unknownsOf(rows []openRow) []plan.Unknown {
	out := []plan.Unknown{}
	for _, r := range rows {
		out = append(out, plan.Unknown{Address: r.address, Action: plan.Action(r.action), ApplyID: r.applyID, At: r.at})
	}
	return out
}

// Unknowns implements reconcile.Store.
func (db *DB) Unknowns(ctx context.Context) ([]plan.Unknown, error) {
	rows, err := queryOpen(ctx, db.rdb)
	if err != nil {
		return nil, err
	}
	return unknownsOf(rows), nil
}

// MarkUnknown implements reconcile.Store.
func (db *DB) MarkUnknown(ctx context.Context, lockID string) ([]plan.Unknown, error) {
	var marked []plan.Unknown
	err := db.write(ctx, func(tx *sql.Tx) error {
		if err := holds(ctx, tx, lockID); err != nil {
			return err
		}
		rows, err := queryOpen(ctx, tx)
		if err != nil {
			return err
		}
		at := db.stamp()
		for _, r := range rows {
			if r.phase != "dispatched" {
				continue
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO journal (apply_id, address, action, phase, at, detail) VALUES (?, ?, ?, 'unknown', ?, ?)`,
				r.applyID, r.address, r.action, at, r.detail); err != nil {
				return fmt.Errorf("journal %s unknown: %w", r.address, err)
			}
			marked = append(marked, plan.Unknown{Address: r.address, Action: plan.Action(r.action), ApplyID: r.applyID, At: r.at})
		}
		// Every apply still 'running' died: the lock is ours.
		_, err = tx.ExecContext(ctx, `UPDATE applies SET status = 'failed', finished_at = ?,
			error = 'interrupted: the process ended before the apply finished' WHERE status = 'running'`, at)
		return err
	})
	return marked, err
}

// Authority implements reconcile.Store.
func (db *DB) Authority(ctx context.Context) (*reconcile.Authority, error) {
	rows, err := db.rdb.QueryContext(ctx, `SELECT kind, name, spec FROM resources WHERE kind IN ('host', 'workspace')`)
	if err != nil {
		return nil, fmt.Errorf("read authority: %w", err)
	}
	defer rows.Close()
	var rs []reconcile.Resource
	for rows.Next() {
		var r reconcile.Resource
		var kind string
		var spec []byte
		if err := rows.Scan(&kind, &r.Name, &spec); err != nil {
			return nil, fmt.Errorf("read authority: %w", err)
		}
		r.Kind, r.Spec = schema.Kind(kind), spec
		rs = append(rs, r)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return reconcile.NewAuthority(rs)
}

// Approvals implements reconcile.Store.
func (db *DB) Approvals(ctx context.Context, planHash string) ([]reconcile.Approval, error) {
	rows, err := db.rdb.QueryContext(ctx, `SELECT id, plan_hash, address, risk, actor, reason, created_at, expires_at,
		consumed_at IS NOT NULL, coalesce(consumed_by, 0)
		FROM approvals WHERE plan_hash = ? ORDER BY id`, planHash)
	if err != nil {
		return nil, fmt.Errorf("read approvals: %w", err)
	}
	defer rows.Close()
	var out []reconcile.Approval
	for rows.Next() {
		var a reconcile.Approval
		var created, expires string
		if err := rows.Scan(&a.ID, &a.PlanHash, &a.Address, &a.Risk, &a.Actor, &a.Reason, &created, &expires, &a.Consumed, &a.ConsumedBy); err != nil {
			return nil, fmt.Errorf("read approvals: %w", err)
		}
		a.CreatedAt, _ = time.Parse(time.RFC3339Nano, created)
		a.ExpiresAt, _ = time.Parse(time.RFC3339Nano, expires)
		out = append(out, a)
	}
	return out, rows.Err()
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

// ErrNothingToResolve means the address has no open unknown outcome.
var ErrNothingToResolve = errors.New("no unknown outcome to resolve")

// Resolve records an operator's decision on the unknown outcomes of address
// under the lock. It never carries anything out: "applied" records in the
// state what was dispatched, "not_applied" records that nothing happened,
// so a later plan may do it again. Both bump the serial.
func (db *DB) Resolve(ctx context.Context, lockID, address, outcome, actor, reason string) (resolved int, serial int64, err error) {
	if outcome == "not-applied" {
		outcome = reconcile.OutcomeNotApplied
	}
	if outcome != reconcile.OutcomeApplied && outcome != reconcile.OutcomeNotApplied {
		return 0, 0, fmt.Errorf("outcome %q: want applied or not-applied", outcome)
	}
	err = db.write(ctx, func(tx *sql.Tx) error {
		if err := holds(ctx, tx, lockID); err != nil {
			return err
		}
		rows, err := queryOpen(ctx, tx)
		if err != nil {
			return err
		}
		at := db.stamp()
		var last *openRow
		for i := range rows {
			r := &rows[i]
			if r.address != address {
				continue
			}
			if r.phase != "unknown" {
				return fmt.Errorf("%s was dispatched by apply %d, which may still run; run nlx apply or nlx plan first", address, r.applyID)
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO resolutions (journal_id, address, outcome, actor, reason, at) VALUES (?, ?, ?, ?, ?, ?)`,
				r.id, address, outcome, actor, reason, at); err != nil {
				return fmt.Errorf("record resolution: %w", err)
			}
			resolved++
			last = r
		}
		if last == nil {
			return fmt.Errorf("%w at %s", ErrNothingToResolve, address)
		}
		if err := tx.QueryRowContext(ctx, `SELECT serial FROM lineage WHERE id = 1`).Scan(&serial); err != nil {
			return err
		}
		// Either outcome changes what a plan of the state holds (its
		// unknown outcomes, the unknown_claim risks, and for applied the
		// resource): plans made before the resolution are stale, and
		// apply's re-derivation never meets a state that moved under an
		// unchanged serial.
		serial++
		if _, err := tx.ExecContext(ctx, `UPDATE lineage SET serial = ? WHERE id = 1`, serial); err != nil {
			return err
		}
		if outcome != reconcile.OutcomeApplied {
			return nil
		}
		// What was dispatched happened: the state records it, so no plan
		// ever does it again.
		var d dispatchDetail
		if err := json.Unmarshal([]byte(last.detail), &d); err != nil {
			return fmt.Errorf("read what was dispatched for %s: %w", address, err)
		}
		if d.Action == plan.Delete {
			_, err = tx.ExecContext(ctx, `DELETE FROM resources WHERE address = ?`, address)
		} else {
			_, err = tx.ExecContext(ctx, `INSERT INTO resources (address, kind, name, spec, spec_hash, status, serial, updated_at)
				VALUES (?, ?, ?, ?, ?, 'active', ?, ?)
				ON CONFLICT (address) DO UPDATE SET spec = excluded.spec, spec_hash = excluded.spec_hash,
					status = 'active', serial = excluded.serial, updated_at = excluded.updated_at`,
				address, string(d.Kind), d.Name, string(d.After), reconcile.HashSpec(d.After), serial, at)
		}
		if err != nil {
			return fmt.Errorf("record %s as applied: %w", address, err)
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO journal (apply_id, address, action, phase, at, detail) VALUES (?, ?, ?, 'committed', ?, ?)`,
			last.applyID, address, last.action, at, "resolved as applied by "+actor+": "+reason)
		return err
	})
	return resolved, serial, err
}

// ApplyRecord is one apply, for nlx state history.
type ApplyRecord struct {
	ID           int64    `json:"id"`
	PlanHash     string   `json:"plan_hash"`
	Actor        string   `json:"actor"`
	SerialBefore int64    `json:"serial_before"`
	SerialAfter  int64    `json:"serial_after"`
	StartedAt    string   `json:"started_at"`
	FinishedAt   string   `json:"finished_at"`
	Status       string   `json:"status"`
	Committed    int      `json:"committed"`
	Failed       int      `json:"failed"`
	Unknown      int      `json:"unknown"`
	Error        string   `json:"error,omitempty"`
	Approvals    []string `json:"approvals"` // "address risk by actor: reason"
}

// History lists every apply, oldest first.
func (db *DB) History(ctx context.Context) ([]ApplyRecord, error) {
	var out []ApplyRecord
	err := db.read(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, `SELECT a.id, a.plan_hash, a.actor, a.serial_before, a.serial_after, a.started_at,
			coalesce(a.finished_at, ''), a.status, a.committed, a.failed, coalesce(a.error, ''),
			(SELECT count(*) FROM journal j WHERE j.apply_id = a.id AND j.phase = 'unknown')
			FROM applies a ORDER BY a.id`)
		if err != nil {
			return fmt.Errorf("read applies: %w", err)
		}
		defer rows.Close()
		for rows.Next() {
			var r ApplyRecord
			if err := rows.Scan(&r.ID, &r.PlanHash, &r.Actor, &r.SerialBefore, &r.SerialAfter, &r.StartedAt, &r.FinishedAt,
				&r.Status, &r.Committed, &r.Failed, &r.Error, &r.Unknown); err != nil {
				return fmt.Errorf("read applies: %w", err)
			}
			r.Approvals = []string{}
			out = append(out, r)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		byID := map[int64]*ApplyRecord{}
		for i := range out {
			byID[out[i].ID] = &out[i]
		}
		arows, err := tx.QueryContext(ctx, `SELECT consumed_by, address, risk, actor, reason FROM approvals WHERE consumed_by IS NOT NULL ORDER BY id`)
		if err != nil {
			return fmt.Errorf("read approvals: %w", err)
		}
		defer arows.Close()
		for arows.Next() {
			var id int64
			var address, risk, actor, reason string
			if err := arows.Scan(&id, &address, &risk, &actor, &reason); err != nil {
				return err
			}
			if r := byID[id]; r != nil {
				r.Approvals = append(r.Approvals, fmt.Sprintf("%s %s by %s: %s", address, risk, actor, reason))
			}
		}
		return arows.Err()
	})
	return out, err
}

var _ reconcile.Resolver = (*DB)(nil)

// Spec implements reconcile.Resolver.
func (db *DB) Spec(ctx context.Context, address string) (json.RawMessage, error) {
	r, err := db.Resource(ctx, address)
	if err != nil || r == nil {
		return nil, err
	}
	return r.Spec, nil
}
