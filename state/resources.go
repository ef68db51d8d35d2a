package state

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nlx-dev/nlx/internal/procid"
	"github.com/nlx-dev/nlx/reconcile"
	"github.com/nlx-dev/nlx/schema"
	_ "modernc.org/sqlite"
)

var (
	_ reconcile.Store         = (*DB)(nil)
	_ reconcile.ApprovalStore = (*DB)(nil)
)

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
		if s.UnknownClaims, err = unknownClaims(ctx, tx); err != nil {
			return err
		}
		s.Held, err = heldImports(ctx, tx)
		return err
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

// AppliedSpec is the applied spec and status of the resource at address,
// as launches read it (launch.Applied); found is false when there is none.
func (db *DB) AppliedSpec(ctx context.Context, address string) (spec []byte, status reconcile.ResourceStatus, found bool, err error) {
	r, err := db.Resource(ctx, address)
	if err != nil || r == nil {
		return nil, "", false, err
	}
	return r.Spec, r.Status, true, nil
}

// Rows lists every resource with its bookkeeping, by address.
func (db *DB) Rows(ctx context.Context) ([]Row, error) {
	return collect(ctx, db.rdb, "resources", `SELECT address, kind, name, spec_hash, status, serial, updated_at FROM resources ORDER BY address`, nil,
		func(rows *sql.Rows, r *Row) error {
			var kind string
			err := rows.Scan(&r.Address, &kind, &r.Name, &r.Hash, &r.Status, &r.Serial, &r.UpdatedAt)
			r.Kind = schema.Kind(kind)
			return err
		})
}

// Authority implements reconcile.Store.
func (db *DB) Authority(ctx context.Context) (*reconcile.Authority, error) {
	rs, err := collect(ctx, db.rdb, "authority", `SELECT kind, name, spec FROM resources WHERE kind IN ('host', 'workspace')`, nil,
		func(rows *sql.Rows, r *reconcile.Resource) error {
			var kind string
			var spec []byte
			err := rows.Scan(&kind, &r.Name, &spec)
			r.Kind, r.Spec = schema.Kind(kind), spec
			return err
		})
	if err != nil {
		return nil, err
	}
	return reconcile.NewAuthority(rs)
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
