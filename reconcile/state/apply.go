package state

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nlx-dev/nlx/internal/procid"
	"github.com/nlx-dev/nlx/plan"
	"github.com/nlx-dev/nlx/reconcile"
	"github.com/nlx-dev/nlx/schema"
)

var _ reconcile.Store = (*DB)(nil)

// Snapshot reads lineage, serial and every resource in one read
// transaction, for a plan. It refuses (*reconcile.LockedError) while an
// apply or a resolve that is not proven dead holds the lock: their changes
// are half made, and the serial was bumped when they began, so a plan of
// that state would pass apply's stale check once they end and carry out
// their changes a second time. A holder proven dead left the state as it
// will stay: a plan of it is a plan of what that apply did.
func (db *DB) Snapshot(ctx context.Context) (*reconcile.Snapshot, error) {
	return db.snapshot(ctx, "")
}

// SnapshotLocked is Snapshot for the holder of lockID (an apply that
// re-derives its plan under its own lock); it fails if that lock is not
// held.
func (db *DB) SnapshotLocked(ctx context.Context, lockID string) (*reconcile.Snapshot, error) {
	if lockID == "" {
		return nil, fmt.Errorf("state %s: snapshot under a lock: no lock id", db.path)
	}
	return db.snapshot(ctx, lockID)
}

// changesState names the lock operations that change resources or the
// serial while they hold the lock.
var changesState = map[string]bool{"apply": true, "resolve": true}

func (db *DB) snapshot(ctx context.Context, lockID string) (*reconcile.Snapshot, error) {
	var s reconcile.Snapshot
	err := db.read(ctx, func(tx *sql.Tx) error {
		h, err := holder(ctx, tx)
		if err != nil {
			return err
		}
		switch {
		case lockID != "" && (h == nil || h.LockID != lockID):
			return fmt.Errorf("%w: lock %s is not held", ErrNotLocked, lockID)
		case lockID == "" && h != nil && changesState[h.Operation]:
			gone, err := procid.Gone(h.Process)
			if err != nil {
				return fmt.Errorf("check lock holder: %w", err)
			}
			if !gone {
				return &reconcile.LockedError{Holder: *h, Changing: true}
			}
		}
		if err := tx.QueryRowContext(ctx, `SELECT lineage, serial FROM lineage WHERE id = 1`).Scan(&s.Lineage, &s.Serial); err != nil {
			return fmt.Errorf("read lineage: %w", err)
		}
		rows, err := tx.QueryContext(ctx, `SELECT kind, name, spec, spec_hash, status FROM resources ORDER BY address`)
		if err != nil {
			return fmt.Errorf("read resources: %w", err)
		}
		defer rows.Close()
		for rows.Next() {
			var r reconcile.Resource
			var kind string
			var spec []byte
			if err := rows.Scan(&kind, &r.Name, &spec, &r.Hash, &r.Status); err != nil {
				return fmt.Errorf("read resources: %w", err)
			}
			r.Kind = schema.Kind(kind)
			r.Spec = spec
			s.Resources = append(s.Resources, r)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		open, err := queryOpen(ctx, tx)
		if err != nil {
			return err
		}
		s.Unknowns = unknownsOf(open)
		return nil
	})
	var locked *reconcile.LockedError
	if errors.As(err, &locked) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("state %s: %w", db.path, err)
	}
	return &s, nil
}

// Meta implements reconcile.Store.
func (db *DB) Meta(ctx context.Context) (string, int64, error) {
	var lineage string
	var serial int64
	if err := db.rdb.QueryRowContext(ctx, `SELECT lineage, serial FROM lineage WHERE id = 1`).Scan(&lineage, &serial); err != nil {
		return "", 0, fmt.Errorf("state %s: read lineage: %w", db.path, err)
	}
	return lineage, serial, nil
}

// Row is one stored resource with its bookkeeping.
type Row struct {
	reconcile.Resource
	Address   string
	Serial    int64 // serial of the apply that last wrote it
	UpdatedAt string
}

// Resource reads one resource by address; nil if absent.
func (db *DB) Resource(ctx context.Context, address string) (*Row, error) {
	var r Row
	var kind string
	var spec []byte
	err := db.rdb.QueryRowContext(ctx, `SELECT address, kind, name, spec, spec_hash, status, serial, updated_at FROM resources WHERE address = ?`, address).
		Scan(&r.Address, &kind, &r.Name, &spec, &r.Hash, &r.Status, &r.Serial, &r.UpdatedAt)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", address, err)
	}
	r.Kind = schema.Kind(kind)
	r.Spec = spec
	return &r, nil
}

// Rows lists every resource with its bookkeeping, by address.
func (db *DB) Rows(ctx context.Context) ([]Row, error) {
	rows, err := db.rdb.QueryContext(ctx, `SELECT address, kind, name, spec_hash, status, serial, updated_at FROM resources ORDER BY address`)
	if err != nil {
		return nil, fmt.Errorf("read resources: %w", err)
	}
	defer rows.Close()
	var out []Row
	for rows.Next() {
		var r Row
		var kind string
		if err := rows.Scan(&r.Address, &kind, &r.Name, &r.Hash, &r.Status, &r.Serial, &r.UpdatedAt); err != nil {
			return nil, fmt.Errorf("read resources: %w", err)
		}
		r.Kind = schema.Kind(kind)
		out = append(out, r)
	}
	return out, rows.Err()
}

// Lock takes the state lock. A holder proven dead (same host, and its pid
// gone, reused, or from an earlier boot) is taken over and reported in
// Lock.TookOverFrom; any other holder fails with *reconcile.LockedError.
func (db *DB) Lock(ctx context.Context, operation string) (*reconcile.Lock, error) {
	self, err := procid.Self()
	if err != nil {
		return nil, fmt.Errorf("identify this process: %w", err)
	}
	id, err := newLockID()
	if err != nil {
		return nil, err
	}
	lock := &reconcile.Lock{ID: id}
	err = db.write(ctx, func(tx *sql.Tx) error {
		h, err := holder(ctx, tx)
		if err != nil {
			return err
		}
		if h != nil {
			gone, err := procid.Gone(h.Process)
			if err != nil {
				return fmt.Errorf("check lock holder: %w", err)
			}
			if !gone {
				return &reconcile.LockedError{Holder: *h}
			}
			lock.TookOverFrom = h
			if _, err := tx.ExecContext(ctx, `DELETE FROM locks WHERE id = 1`); err != nil {
				return fmt.Errorf("take over lock: %w", err)
			}
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO locks (id, lock_id, operation, pid, pid_start, pid_ns, boot_id, host, user, acquired_at)
			VALUES (1, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, id, operation, self.PID, self.Start, self.PidNS, self.Boot, self.Host, self.User, db.stamp())
		if err != nil {
			return fmt.Errorf("take lock: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return lock, nil
}

func newLockID() (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("lock id: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// LockHolder returns the current lock holder, or nil.
func (db *DB) LockHolder(ctx context.Context) (*reconcile.Holder, error) {
	var h *reconcile.Holder
	err := db.read(ctx, func(tx *sql.Tx) error {
		var err error
		h, err = holder(ctx, tx)
		return err
	})
	return h, err
}

func holder(ctx context.Context, tx *sql.Tx) (*reconcile.Holder, error) {
	var h reconcile.Holder
	var at string
	err := tx.QueryRowContext(ctx, `SELECT lock_id, operation, pid, pid_start, pid_ns, boot_id, host, user, acquired_at FROM locks WHERE id = 1`).
		Scan(&h.LockID, &h.Operation, &h.Process.PID, &h.Process.Start, &h.Process.PidNS, &h.Process.Boot, &h.Process.Host, &h.Process.User, &at)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read lock: %w", err)
	}
	h.AcquiredAt, _ = time.Parse(time.RFC3339Nano, at)
	return &h, nil
}

// ErrNotLocked means Unlock named a lock that is not held.
var ErrNotLocked = errors.New("lock not held")

// Unlock releases the lock with the given id.
func (db *DB) Unlock(ctx context.Context, lockID string) error {
	return db.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM locks WHERE id = 1 AND lock_id = ?`, lockID)
		if err != nil {
			return fmt.Errorf("release lock: %w", err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("%w: no lock %s", ErrNotLocked, lockID)
		}
		return nil
	})
}

// BeginApply implements reconcile.Store.
func (db *DB) BeginApply(ctx context.Context, lockID, planHash, actor, lineage string, serial int64) (int64, int64, error) {
	var id int64
	err := db.write(ctx, func(tx *sql.Tx) error {
		var held int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM locks WHERE id = 1 AND lock_id = ?`, lockID).Scan(&held); err != nil {
			return fmt.Errorf("check lock: %w", err)
		}
		if held != 1 {
			return fmt.Errorf("%w: lock %s was released or taken over", ErrNotLocked, lockID)
		}
		var gotLineage string
		var gotSerial int64
		if err := tx.QueryRowContext(ctx, `SELECT lineage, serial FROM lineage WHERE id = 1`).Scan(&gotLineage, &gotSerial); err != nil {
			return fmt.Errorf("read lineage: %w", err)
		}
		if gotLineage != lineage || gotSerial != serial {
			return fmt.Errorf("state moved to lineage %s serial %d under the lock (want %s serial %d)", gotLineage, gotSerial, lineage, serial)
		}
		if _, err := tx.ExecContext(ctx, `UPDATE lineage SET serial = serial + 1 WHERE id = 1`); err != nil {
			return fmt.Errorf("bump serial: %w", err)
		}
		res, err := tx.ExecContext(ctx, `INSERT INTO applies (plan_hash, lock_id, actor, serial_before, serial_after, started_at, status) VALUES (?, ?, ?, ?, ?, ?, 'running')`,
			planHash, lockID, actor, serial, serial+1, db.stamp())
		if err != nil {
			return fmt.Errorf("record apply: %w", err)
		}
		id, err = res.LastInsertId()
		return err
	})
	if err != nil {
		return 0, 0, err
	}
	return id, serial + 1, nil
}

// stillLocked refuses to write for an apply whose lock was released or
// taken over since it began: never two writers.
func stillLocked(ctx context.Context, tx *sql.Tx, applyID int64) error {
	var n int
	err := tx.QueryRowContext(ctx, `SELECT count(*) FROM applies a JOIN locks l ON l.lock_id = a.lock_id WHERE a.id = ?`, applyID).Scan(&n)
	if err != nil {
		return fmt.Errorf("check lock: %w", err)
	}
	if n != 1 {
		return fmt.Errorf("%w: the lock of apply %d was released or taken over", ErrNotLocked, applyID)
	}
	return nil
}

// Intend implements reconcile.Store: one transaction for the batch.
func (db *DB) Intend(ctx context.Context, applyID int64, changes []plan.Change) error {
	return db.write(ctx, func(tx *sql.Tx) error {
		if err := stillLocked(ctx, tx, applyID); err != nil {
			return err
		}
		stmt, err := tx.PrepareContext(ctx, `INSERT INTO journal (apply_id, address, action, phase, at) VALUES (?, ?, ?, 'intended', ?)`)
		if err != nil {
			return fmt.Errorf("journal: %w", err)
		}
		defer stmt.Close()
		at := db.stamp()
		for i := range changes {
			if _, err := stmt.ExecContext(ctx, applyID, changes[i].Address, string(changes[i].Action), at); err != nil {
				return fmt.Errorf("journal %s intended: %w", changes[i].Address, err)
			}
		}
		return nil
	})
}

// Commit implements reconcile.Store: the changes, their journal rows and the
// apply's count, in one transaction.
func (db *DB) Commit(ctx context.Context, applyID, serial int64, changes []plan.Change, approvals []int64) error {
	return db.write(ctx, func(tx *sql.Tx) error {
		if err := stillLocked(ctx, tx, applyID); err != nil {
			return err
		}
		at := db.stamp()
		// Applying a change puts the resource under the config's management:
		// a held import leaves the held state (the plan gated that with
		// held_import).
		upsert, err := tx.PrepareContext(ctx, `INSERT INTO resources (address, kind, name, spec, spec_hash, status, serial, updated_at)
			VALUES (?, ?, ?, ?, ?, 'active', ?, ?)
			ON CONFLICT (address) DO UPDATE SET spec = excluded.spec, spec_hash = excluded.spec_hash,
				serial = excluded.serial, updated_at = excluded.updated_at, status = 'active'`)
		if err != nil {
			return fmt.Errorf("apply: %w", err)
		}
		defer upsert.Close()
		del, err := tx.PrepareContext(ctx, `DELETE FROM resources WHERE address = ?`)
		if err != nil {
			return fmt.Errorf("apply: %w", err)
		}
		defer del.Close()
		journal, err := tx.PrepareContext(ctx, `INSERT INTO journal (apply_id, address, action, phase, at) VALUES (?, ?, ?, 'committed', ?)`)
		if err != nil {
			return fmt.Errorf("apply: %w", err)
		}
		defer journal.Close()
		for i := range changes {
			c := &changes[i]
			if c.Action != plan.Delete && (len(c.After) == 0 || string(c.After) == "null") {
				return fmt.Errorf("apply %s: no spec to %s", c.Address, c.Action)
			}
			if c.Action == plan.Delete {
				_, err = del.ExecContext(ctx, c.Address)
			} else {
				_, err = upsert.ExecContext(ctx, c.Address, string(c.Kind), c.Name, string(c.After), reconcile.HashSpec(c.After), serial, at)
			}
			if err != nil {
				return fmt.Errorf("apply %s: %w", c.Address, err)
			}
			if _, err := journal.ExecContext(ctx, applyID, c.Address, string(c.Action), at); err != nil {
				return fmt.Errorf("journal %s committed: %w", c.Address, err)
			}
		}
		if _, err := tx.ExecContext(ctx, `UPDATE applies SET committed = committed + ? WHERE id = ?`, len(changes), applyID); err != nil {
			return fmt.Errorf("count committed changes: %w", err)
		}
		// The approvals these changes used are spent with them, each once.
		if len(approvals) > 0 {
			ids, err := json.Marshal(approvals)
			if err != nil {
				return err
			}
			res, err := tx.ExecContext(ctx, `UPDATE approvals SET consumed_at = ?, consumed_by = ?
				WHERE id IN (SELECT value FROM json_each(?)) AND consumed_at IS NULL`, at, applyID, string(ids))
			if err != nil {
				return fmt.Errorf("consume approvals: %w", err)
			}
			if n, _ := res.RowsAffected(); n != int64(len(approvals)) {
				return fmt.Errorf("%d of the %d approvals these changes use were already used", int64(len(approvals))-n, len(approvals))
			}
		}
		return nil
	})
}

// FinishApply implements reconcile.Store.
func (db *DB) FinishApply(ctx context.Context, applyID int64, r reconcile.ApplyResult) error {
	status, msg := "completed", sql.NullString{}
	if r.Err != nil {
		status, msg = "failed", sql.NullString{String: r.Err.Error(), Valid: true}
	}
	return db.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `UPDATE applies SET status = ?, finished_at = ?, failed = ?, error = ? WHERE id = ?`,
			status, db.stamp(), r.Failed, msg, applyID)
		if err != nil {
			return fmt.Errorf("finish apply: %w", err)
		}
		return nil
	})
}

// JournalEntry is one row of the journal.
type JournalEntry struct {
	ID      int64  `json:"id"`
	ApplyID int64  `json:"apply_id"`
	Address string `json:"address"`
	Action  string `json:"action"`
	Phase   string `json:"phase"`
	At      string `json:"at"`
	// Resolution of an 'unknown' row: "applied by alice: reason".
	Resolution string `json:"resolution,omitempty"`
}

// Journal lists the journal in order.
func (db *DB) Journal(ctx context.Context) ([]JournalEntry, error) {
	rows, err := db.rdb.QueryContext(ctx, `SELECT j.id, j.apply_id, j.address, j.action, j.phase, j.at,
		coalesce(r.outcome || ' by ' || r.actor || ': ' || r.reason, '')
		FROM journal j LEFT JOIN resolutions r ON r.journal_id = j.id ORDER BY j.id`)
	if err != nil {
		return nil, fmt.Errorf("read journal: %w", err)
	}
	defer rows.Close()
	var out []JournalEntry
	for rows.Next() {
		var e JournalEntry
		if err := rows.Scan(&e.ID, &e.ApplyID, &e.Address, &e.Action, &e.Phase, &e.At, &e.Resolution); err != nil {
			return nil, fmt.Errorf("read journal: %w", err)
		}
		out = append(out, e)
	}
	return out, rows.Err()
}
