package state

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"github.com/nlx-dev/nlx/internal/reason"
	"github.com/nlx-dev/nlx/plan"
	"github.com/nlx-dev/nlx/reconcile"
	"github.com/nlx-dev/nlx/schema"
	_ "modernc.org/sqlite"
)

// JournalPhase is the phase a journal row records a change in; its values
// are defined here and only here.
type JournalPhase string

// The journal phases, in the order a change goes through them. A change
// without an effect outside the state goes from intended to committed; an
// effect is dispatched first, and ends committed or failed, or, when the
// apply that dispatched it died, unknown.
const (
	PhaseIntended   JournalPhase = "intended"   // about to be applied
	PhaseDispatched JournalPhase = "dispatched" // its effect is being carried out
	PhaseCommitted  JournalPhase = "committed"  // applied to the state
	PhaseFailed     JournalPhase = "failed"     // its effect failed, or was never started
	PhaseUnknown    JournalPhase = "unknown"    // dispatched, and nobody knows how it ended
)

// ApplyStatus is how far an apply got.
type ApplyStatus string

// The statuses of an apply.
const (
	ApplyRunning   ApplyStatus = "running"
	ApplyCompleted ApplyStatus = "completed"
	ApplyFailed    ApplyStatus = "failed" // it ended with an error, or its process died
)

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
		res, err := tx.ExecContext(ctx, `INSERT INTO applies (plan_hash, lock_id, actor, serial_before, serial_after, started_at, status) VALUES (?, ?, ?, ?, ?, ?, ?)`,
			planHash, lockID, actor, serial, serial+1, db.stamp(), ApplyRunning)
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

// Intend implements reconcile.Store: one transaction for the batch.
func (db *DB) Intend(ctx context.Context, applyID int64, changes []plan.Change) error {
	return db.write(ctx, func(tx *sql.Tx) error {
		if err := stillLocked(ctx, tx, applyID); err != nil {
			return err
		}
		stmt, err := tx.PrepareContext(ctx, `INSERT INTO journal (apply_id, address, action, phase, at) VALUES (?, ?, ?, ?, ?)`)
		if err != nil {
			return fmt.Errorf("journal: %w", err)
		}
		defer stmt.Close()
		at := db.stamp()
		for i := range changes {
			if _, err := stmt.ExecContext(ctx, applyID, changes[i].Address, string(changes[i].Action), PhaseIntended, at); err != nil {
				return fmt.Errorf("journal %s intended: %w", changes[i].Address, err)
			}
		}
		return nil
	})
}

// Commit implements reconcile.Store: the changes, their journal rows and the
// apply's count, in one transaction.
func (db *DB) Commit(ctx context.Context, applyID, serial int64, changes []plan.Change, used []reconcile.Approval, imports map[string]*reconcile.Import) error {
	return db.write(ctx, func(tx *sql.Tx) error {
		if err := stillLocked(ctx, tx, applyID); err != nil {
			return err
		}
		at := db.stamp()
		approvals, err := recordSigned(ctx, tx, used)
		if err != nil {
			return err
		}
		// Applying a change puts the resource under the config's management:
		// a held import leaves the held state (the plan gated that with
		// held_import).
		upsert, err := tx.PrepareContext(ctx, `INSERT INTO resources (address, kind, name, spec, spec_hash, status, serial, updated_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (address) DO UPDATE SET spec = excluded.spec, spec_hash = excluded.spec_hash,
				serial = excluded.serial, updated_at = excluded.updated_at, status = excluded.status`)
		if err != nil {
			return fmt.Errorf("apply: %w", err)
		}
		defer upsert.Close()
		del, err := tx.PrepareContext(ctx, `DELETE FROM resources WHERE address = ?`)
		if err != nil {
			return fmt.Errorf("apply: %w", err)
		}
		defer del.Close()
		journal, err := tx.PrepareContext(ctx, `INSERT INTO journal (apply_id, address, action, phase, at) VALUES (?, ?, ?, ?, ?)`)
		if err != nil {
			return fmt.Errorf("apply: %w", err)
		}
		defer journal.Close()
		for i := range changes {
			c := &changes[i]
			if c.Action != plan.Delete && (len(c.After) == 0 || string(c.After) == "null") {
				return fmt.Errorf("apply %s: no spec to %s", c.Address, c.Action)
			}
			status := reconcile.StatusActive
			if c.Import != "" && c.Action == plan.Create {
				status = reconcile.StatusHeld // an import under review
			} else if err := recordRelease(ctx, tx, applyID, c, approvals, at); err != nil {
				return err
			}
			if c.Action == plan.Delete {
				_, err = del.ExecContext(ctx, c.Address)
			} else {
				_, err = upsert.ExecContext(ctx, c.Address, string(c.Kind), c.Name, string(c.After), reconcile.HashSpec(c.After), status, serial, at)
			}
			if err != nil {
				return fmt.Errorf("apply %s: %w", c.Address, err)
			}
			if _, err := journal.ExecContext(ctx, applyID, c.Address, string(c.Action), PhaseCommitted, at); err != nil {
				return fmt.Errorf("journal %s committed: %w", c.Address, err)
			}
		}
		for _, name := range slices.Sorted(maps.Keys(imports)) {
			if err := writeImport(ctx, tx, applyID, serial, imports[name], at); err != nil {
				return fmt.Errorf("import %s: %w", name, err)
			}
		}
		if _, err := tx.ExecContext(ctx, `UPDATE applies SET committed = committed + ? WHERE id = ?`, len(changes), applyID); err != nil {
			return fmt.Errorf("count committed changes: %w", err)
		}
		if err := resourcesChanged(ctx, tx); err != nil {
			return err
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
	status, msg := ApplyCompleted, sql.NullString{}
	if r.Err != nil {
		status, msg = ApplyFailed, sql.NullString{String: r.Err.Error(), Valid: true}
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
	ID      int64        `json:"id"`
	ApplyID int64        `json:"apply_id"`
	Address string       `json:"address"`
	Action  string       `json:"action"`
	Phase   JournalPhase `json:"phase"`
	At      string       `json:"at"`
	// Resolution of an 'unknown' row: "applied by alice: reason".
	Resolution string `json:"resolution,omitempty"`
}

// Journal lists the journal in order.
func (db *DB) Journal(ctx context.Context) ([]JournalEntry, error) {
	return collect(ctx, db.rdb, "journal", `SELECT j.id, j.apply_id, j.address, j.action, j.phase, j.at,
		coalesce(r.outcome || ' by ' || r.actor || ': ' || r.reason, '')
		FROM journal j LEFT JOIN resolutions r ON r.journal_id = j.id ORDER BY j.id`, nil,
		func(rows *sql.Rows, e *JournalEntry) error {
			return rows.Scan(&e.ID, &e.ApplyID, &e.Address, &e.Action, &e.Phase, &e.At, &e.Resolution)
		})
}

// dispatchDetail is what a 'dispatched' journal row keeps of its change, so
// that resolving it as applied can record exactly what was dispatched.
type dispatchDetail struct {
	Kind   schema.Kind     `json:"kind"`
	Name   string          `json:"name"`
	Action plan.Action     `json:"action"`
	After  json.RawMessage `json:"after"`
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
			if _, err := tx.ExecContext(ctx, `INSERT INTO journal (apply_id, address, action, phase, at, detail) VALUES (?, ?, ?, ?, ?, ?)`,
				applyID, c.Address, string(c.Action), PhaseDispatched, at, string(detail)); err != nil {
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
			if _, err := tx.ExecContext(ctx, `INSERT INTO journal (apply_id, address, action, phase, at, detail) VALUES (?, ?, ?, ?, ?, ?)`,
				applyID, changes[i].Address, string(changes[i].Action), PhaseFailed, at, reason); err != nil {
				return fmt.Errorf("journal %s failed: %w", changes[i].Address, err)
			}
		}
		_, err := tx.ExecContext(ctx, `UPDATE applies SET failed = failed + ? WHERE id = ?`, len(changes), applyID)
		return err
	})
}

// openOutcomes selects the journal rows whose effect nobody knows and nobody
// resolved: unknown rows, and dispatched rows no later row of the same apply
// and address followed. The phases are in the SQL text, not parameters, so
// that SQLite uses the partial index journal_open.
const openOutcomes = `SELECT j.id, j.apply_id, j.address, j.action, j.phase, j.at, coalesce(j.detail, '') FROM journal j
	WHERE j.phase IN ('` + string(PhaseDispatched) + `', '` + string(PhaseUnknown) + `')
	AND NOT EXISTS (SELECT 1 FROM journal k WHERE k.address = j.address AND k.apply_id = j.apply_id AND k.id > j.id)
	AND NOT EXISTS (SELECT 1 FROM resolutions r WHERE r.journal_id = j.id)
	ORDER BY j.id`

type openRow struct {
	id, applyID         int64
	address, action, at string
	phase               JournalPhase
	detail              string
}

func queryOpen(ctx context.Context, q queryer) ([]openRow, error) {
	return collect(ctx, q, "journal", openOutcomes, nil, func(rows *sql.Rows, r *openRow) error {
		return rows.Scan(&r.id, &r.applyID, &r.address, &r.action, &r.phase, &r.at, &r.detail)
	})
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
			if r.phase != PhaseDispatched {
				continue
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO journal (apply_id, address, action, phase, at, detail) VALUES (?, ?, ?, ?, ?, ?)`,
				r.applyID, r.address, r.action, PhaseUnknown, at, r.detail); err != nil {
				return fmt.Errorf("journal %s unknown: %w", r.address, err)
			}
			marked = append(marked, plan.Unknown{Address: r.address, Action: plan.Action(r.action), ApplyID: r.applyID, At: r.at})
		}
		// Every apply still running died: the lock is ours.
		_, err = tx.ExecContext(ctx, `UPDATE applies SET status = ?, finished_at = ?,
			error = 'interrupted: the process ended before the apply finished' WHERE status = ?`, ApplyFailed, at, ApplyRunning)
		return err
	})
	return marked, err
}

// ErrNothingToResolve means the address has no open unknown outcome.
var ErrNothingToResolve = &reason.Error{Code: reason.NothingToResolve, Msg: "no unknown outcome to resolve"}

// Resolve records an operator's decision on the unknown outcomes of address
// under the lock. It never carries anything out: applied records in the
// state what was dispatched, not_applied (or not-applied) records that
// nothing happened, so a later plan may do it again. Both bump the serial.
func (db *DB) Resolve(ctx context.Context, lockID, address, outcomeFlag, actor, why string) (resolved int, serial int64, err error) {
	outcome, err := reconcile.ParseOutcome(outcomeFlag)
	if err != nil {
		return 0, 0, err
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
			if r.phase != PhaseUnknown {
				return fmt.Errorf("%s was dispatched by apply %d, which may still run; run nlx apply or nlx plan first", address, r.applyID)
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO resolutions (journal_id, address, outcome, actor, reason, at) VALUES (?, ?, ?, ?, ?, ?)`,
				r.id, address, outcome, actor, why, at); err != nil {
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
				VALUES (?, ?, ?, ?, ?, ?, ?, ?)
				ON CONFLICT (address) DO UPDATE SET spec = excluded.spec, spec_hash = excluded.spec_hash,
					status = excluded.status, serial = excluded.serial, updated_at = excluded.updated_at`,
				address, string(d.Kind), d.Name, string(d.After), reconcile.HashSpec(d.After), reconcile.StatusActive, serial, at)
		}
		if err != nil {
			return fmt.Errorf("record %s as applied: %w", address, err)
		}
		if err := resourcesChanged(ctx, tx); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO journal (apply_id, address, action, phase, at, detail) VALUES (?, ?, ?, ?, ?, ?)`,
			last.applyID, address, last.action, PhaseCommitted, at, "resolved as applied by "+actor+": "+why)
		return err
	})
	return resolved, serial, err
}

// ApplyRecord is one apply, for nlx state history.
type ApplyRecord struct {
	ID           int64       `json:"id"`
	PlanHash     string      `json:"plan_hash"`
	Actor        string      `json:"actor"`
	SerialBefore int64       `json:"serial_before"`
	SerialAfter  int64       `json:"serial_after"`
	StartedAt    string      `json:"started_at"`
	FinishedAt   string      `json:"finished_at"`
	Status       ApplyStatus `json:"status"`
	Committed    int         `json:"committed"`
	Failed       int         `json:"failed"`
	Unknown      int         `json:"unknown"`
	Error        string      `json:"error,omitempty"`
	Approvals    []string    `json:"approvals"` // "address risk by actor (proof): reason"
}

// History lists every apply, oldest first.
func (db *DB) History(ctx context.Context) ([]ApplyRecord, error) {
	var out []ApplyRecord
	err := db.read(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, `SELECT a.id, a.plan_hash, a.actor, a.serial_before, a.serial_after, a.started_at,
			coalesce(a.finished_at, ''), a.status, a.committed, a.failed, coalesce(a.error, ''),
			(SELECT count(*) FROM journal j WHERE j.apply_id = a.id AND j.phase = '`+string(PhaseUnknown)+`')
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
		arows, err := tx.QueryContext(ctx, `SELECT consumed_by, address, risk, actor, reason, proof FROM approvals WHERE consumed_by IS NOT NULL ORDER BY id`)
		if err != nil {
			return fmt.Errorf("read approvals: %w", err)
		}
		defer arows.Close()
		for arows.Next() {
			var id int64
			var address, risk, actor, reason, proof string
			if err := arows.Scan(&id, &address, &risk, &actor, &reason, &proof); err != nil {
				return err
			}
			if proof != "" {
				actor += " (" + proof + ")" // how the approver was proven
			}
			if r := byID[id]; r != nil {
				r.Approvals = append(r.Approvals, fmt.Sprintf("%s %s by %s: %s", address, risk, actor, reason))
			}
		}
		return arows.Err()
	})
	return out, err
}

// resourcesChanged counts a transaction that writes applied resources
// (ResourcesVersion).
func resourcesChanged(ctx context.Context, tx *sql.Tx) error {
	if _, err := tx.ExecContext(ctx, `UPDATE lineage SET resources_version = resources_version + 1 WHERE id = 1`); err != nil {
		return fmt.Errorf("count the resources' change: %w", err)
	}
	return nil
}

// ResourcesVersion is the count of transactions that wrote applied
// resources: equal values tell that no applied resource changed between
// two reads.
func (db *DB) ResourcesVersion(ctx context.Context) (int64, error) {
	var v int64
	if err := db.rdb.QueryRowContext(ctx, `SELECT resources_version FROM lineage WHERE id = 1`).Scan(&v); err != nil {
		return 0, fmt.Errorf("state %s: read the resources' version: %w", db.path, err)
	}
	return v, nil
}
