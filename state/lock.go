package state

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/nlx-dev/nlx/internal/procid"
	"github.com/nlx-dev/nlx/internal/reason"
	"github.com/nlx-dev/nlx/reconcile"
	_ "modernc.org/sqlite"
)

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
var ErrNotLocked = &reason.Error{Code: reason.LockNotHeld, Msg: "lock not held"}

// Unlock releases the lock with the given id.
func (db *DB) Unlock(ctx context.Context, lockID string) error {
	return db.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM locks WHERE id = 1 AND lock_id = ?`, lockID)
		if err != nil {
			return fmt.Errorf("release lock: %w", err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("%w: no lock %s is held (nlx state list shows who holds the state)", ErrNotLocked, lockID)
		}
		return nil
	})
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
