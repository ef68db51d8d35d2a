package state

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nlx-dev/nlx/internal/procid"
	"github.com/nlx-dev/nlx/internal/reason"
	"github.com/nlx-dev/nlx/plan"
)

// ClaimPhase is where an occurrence of a job is.
type ClaimPhase string

// The phases of a claim: claimed (written before anything is launched),
// dispatched (written before the provider starts, with the binding), then
// one end. Skipped is an occurrence that never dispatched: refused before
// launch (its reason says why), dropped by concurrency skip, or claimed by
// an nlx that stopped before dispatching it.
const (
	ClaimClaimed     ClaimPhase = "claimed"
	ClaimDispatched  ClaimPhase = ClaimPhase(PhaseDispatched)
	ClaimSucceeded   ClaimPhase = "succeeded"
	ClaimFailed      ClaimPhase = ClaimPhase(TurnFailed)
	ClaimInterrupted ClaimPhase = ClaimPhase(TurnInterrupted)
	ClaimUnknown     ClaimPhase = ClaimPhase(PhaseUnknown)
	ClaimSkipped     ClaimPhase = "skipped"
)

// Terminal reports whether a claim in phase p has ended (unknown counts:
// it never runs again, though it holds its workflow lock until resolved).
func (p ClaimPhase) Terminal() bool { return p != ClaimClaimed && p != ClaimDispatched }

// ClaimTrigger is what made an occurrence.
type ClaimTrigger string

// The triggers: the job's schedule (nlx serve), or a person (nlx run).
const (
	TriggerSchedule ClaimTrigger = "schedule"
	TriggerManual   ClaimTrigger = "manual"
)

// ClaimOutcome is what a person resolved an unknown claim as.
type ClaimOutcome string

// The outcomes of nlx resolve claim.
const (
	ClaimOutcomeSucceeded ClaimOutcome = "succeeded"
	ClaimOutcomeFailed    ClaimOutcome = ClaimOutcome(TurnFailed)
	ClaimOutcomeNotRun    ClaimOutcome = "not-run"
)

// ClaimRow is one occurrence of a job.
type ClaimRow struct {
	ID           string       `json:"id"`
	Job          string       `json:"job"`
	ScheduledAt  string       `json:"scheduled_at"`
	Trigger      ClaimTrigger `json:"trigger"`
	Workspace    string       `json:"workspace"`
	Conversation string       `json:"conversation"`
	Connection   string       `json:"connection"`
	Actor        string       `json:"actor"`
	Serial       int64        `json:"serial"`
	Owner        string       `json:"owner"` // the nlx process that made it
	Phase        ClaimPhase   `json:"phase"`
	TurnID       string       `json:"turn_id,omitempty"`
	// The binding, from the turn that dispatched it.
	EffectiveConnection string `json:"effective_connection,omitempty"`
	CredentialOwner     string `json:"credential_owner,omitempty"`
	Provider            string `json:"provider,omitempty"`
	Billing             string `json:"billing,omitempty"`
	Generation          int64  `json:"generation,omitempty"`
	Session             string `json:"-"` // the native handle continued: metadata, never a label
	ReasonCode          string `json:"reason_code,omitempty"`
	Reason              string `json:"reason,omitempty"`
	ClaimedAt           string `json:"claimed_at"`
	DispatchedAt        string `json:"dispatched_at,omitempty"`
	EndedAt             string `json:"ended_at,omitempty"`
	ResolvedOutcome     string `json:"resolved_outcome,omitempty"`
	ResolvedBy          string `json:"resolved_by,omitempty"`
	ResolvedReason      string `json:"resolved_reason,omitempty"`
	ResolvedAt          string `json:"resolved_at,omitempty"`

	owner procid.Identity
}

// OwnerIdentity is the process that made the claim.
func (c *ClaimRow) OwnerIdentity() procid.Identity { return c.owner }

// selfIdentity is this process's identity, read once.
var selfIdentity = sync.OnceValues(procid.Self)

// ErrNoClaim means no claim has that id.
var ErrNoClaim = &reason.Error{Code: reason.NoSuchClaim, Msg: "no such claim"}

// FormatInstant is how the state writes an occurrence's instant: UTC,
// RFC 3339, with the fraction of a second only when there is one (a
// manual run's).
func FormatInstant(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// Claim records an occurrence before anything is launched for it, by this
// process, in c.Phase (claimed, or skipped with its reason). created is
// false when the occurrence was claimed before (by anyone): it is never
// claimed twice.
func (db *DB) Claim(ctx context.Context, c ClaimRow) (created bool, err error) {
	self, err := selfIdentity()
	if err != nil {
		return false, fmt.Errorf("identify this process: %w", err)
	}
	if c.Phase == "" {
		c.Phase = ClaimClaimed
	}
	ended := ""
	if c.Phase.Terminal() {
		ended = db.stamp()
	}
	err = db.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `INSERT INTO claims (id, job, scheduled_at, trigger, workspace, conversation, connection,
			actor, serial, owner_pid, owner_start, owner_boot, phase, reason_code, reason, claimed_at, ended_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (job, scheduled_at) DO NOTHING`,
			c.ID, c.Job, c.ScheduledAt, c.Trigger, c.Workspace, c.Conversation, c.Connection, c.Actor, c.Serial,
			self.PID, self.Start, self.Boot, c.Phase, c.ReasonCode, c.Reason, db.stamp(), ended)
		if err != nil {
			return fmt.Errorf("claim %s of job %s: %w", c.ScheduledAt, c.Job, err)
		}
		n, _ := res.RowsAffected()
		created = n == 1
		return nil
	})
	return created, err
}

// dispatch moves a claimed occurrence to dispatched in the transaction
// that begins its turn, copying the turn's binding in. It fails when
// another claim holds the conversation's workflow lock: dispatching is
// taking that lock.
func dispatch(ctx context.Context, tx *sql.Tx, t TurnRow, at string) error {
	var holder ClaimRow
	// The open phases in the SQL text, so that SQLite uses claims_open
	// (the claims of a conversation that are not over), not a scan of
	// every claim ever made.
	err := tx.QueryRowContext(ctx, `SELECT o.id, o.job, o.phase FROM claims c JOIN claims o
		ON o.conversation = c.conversation AND o.workspace = c.workspace AND o.id != c.id
		WHERE c.id = ? AND o.phase IN `+openPhases+`
		AND (o.phase = '`+string(ClaimDispatched)+`' OR (o.phase = '`+string(ClaimUnknown)+`' AND o.resolved_at = ''))
		LIMIT 1`, t.ClaimID).Scan(&holder.ID, &holder.Job, &holder.Phase)
	switch {
	case err == nil && holder.Phase == ClaimUnknown:
		return reason.New(reason.WorkflowLocked, "claim %s of job %s in the same conversation has an outcome nobody knows: resolve it first (nlx resolve claim %s)", holder.ID, holder.Job, holder.ID)
	case err == nil:
		return reason.New(reason.ConversationBusy, "claim %s of job %s runs in the same conversation", holder.ID, holder.Job)
	case !errors.Is(err, sql.ErrNoRows):
		return fmt.Errorf("dispatch claim %s: %w", t.ClaimID, err)
	}
	res, err := tx.ExecContext(ctx, `UPDATE claims SET phase = ?, turn_id = ?, effective_connection = ?, credential_owner = ?,
		provider = ?, billing = ?, generation = ?, session = ?, dispatched_at = ? WHERE id = ? AND phase = ?`,
		ClaimDispatched, t.ID, t.Connection, t.CredentialOwner, t.EffectiveProvider, t.Billing, t.Generation, t.Resumed, at,
		t.ClaimID, ClaimClaimed)
	if err != nil {
		return fmt.Errorf("dispatch claim %s: %w", t.ClaimID, err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return fmt.Errorf("%w: %s is not a claimed occurrence", ErrNoClaim, t.ClaimID)
	}
	return nil
}

// endOfTurn is the phase a claim ends in for a turn status, and its reason
// code when the turn's own does not say.
func endOfTurn(s TurnStatus) ClaimPhase {
	switch s {
	case TurnCompleted:
		return ClaimSucceeded
	case TurnInterrupted:
		return ClaimInterrupted
	}
	return ClaimFailed // failed, and blocked: the turn did not do its work
}

// EndClaim ends a claim that never dispatched (phase claimed) as skipped,
// or marks a dispatched one in phase, with its reason. It reports whether
// the claim was in from.
func (db *DB) EndClaim(ctx context.Context, id string, from, phase ClaimPhase, code reason.Code, why string) (bool, error) {
	var changed bool
	err := db.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE claims SET phase = ?, reason_code = ?, reason = ?, ended_at = ? WHERE id = ? AND phase = ?`,
			phase, code, why, db.stamp(), id, from)
		if err != nil {
			return fmt.Errorf("end claim %s: %w", id, err)
		}
		n, _ := res.RowsAffected()
		changed = n == 1
		return nil
	})
	return changed, err
}

const claimColumns = `id, job, scheduled_at, trigger, workspace, conversation, connection, actor, serial, owner_pid, owner_start,
	owner_boot, phase, turn_id, effective_connection, credential_owner, provider, billing, generation, session, reason_code, reason,
	claimed_at, dispatched_at, ended_at, resolved_outcome, resolved_by, resolved_reason, resolved_at`

func (db *DB) claims(ctx context.Context, tail string, args ...any) ([]ClaimRow, error) {
	host, _ := selfIdentity()
	return collect(ctx, db.rdb, "claims", `SELECT `+claimColumns+` FROM claims `+tail, args,
		func(rows *sql.Rows, c *ClaimRow) error {
			err := rows.Scan(&c.ID, &c.Job, &c.ScheduledAt, &c.Trigger, &c.Workspace, &c.Conversation, &c.Connection, &c.Actor,
				&c.Serial, &c.owner.PID, &c.owner.Start, &c.owner.Boot, &c.Phase, &c.TurnID, &c.EffectiveConnection,
				&c.CredentialOwner, &c.Provider, &c.Billing, &c.Generation, &c.Session, &c.ReasonCode, &c.Reason,
				&c.ClaimedAt, &c.DispatchedAt, &c.EndedAt, &c.ResolvedOutcome, &c.ResolvedBy, &c.ResolvedReason, &c.ResolvedAt)
			// A claim's owner is a process of this host (the state is
			// local), in nlx's pid namespace.
			c.owner.Host, c.owner.PidNS = host.Host, host.PidNS
			c.Owner = fmt.Sprintf("pid %d", c.owner.PID)
			return err
		})
}

// ClaimByID reads one claim.
func (db *DB) ClaimByID(ctx context.Context, id string) (*ClaimRow, error) {
	rows, err := db.claims(ctx, `WHERE id = ?`, id)
	if err != nil {
		return nil, err
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("%w: %s", ErrNoClaim, id)
	}
	return &rows[0], nil
}

// Claims lists claims, newest first: of one job (or all with job ""), at
// most limit (0: all).
func (db *DB) Claims(ctx context.Context, job string, limit int) ([]ClaimRow, error) {
	tail, args := ``, []any{}
	if job != "" {
		tail, args = `WHERE job = ? `, append(args, job)
	}
	tail += `ORDER BY claimed_at DESC, id`
	if limit > 0 {
		tail += fmt.Sprintf(` LIMIT %d`, limit)
	}
	return db.claims(ctx, tail, args...)
}

// openPhases are the phases of claims_open's partial index, as SQL: a
// query that names them so uses the index.
const openPhases = `('` + string(ClaimClaimed) + `', '` + string(ClaimDispatched) + `', '` + string(ClaimUnknown) + `')`

// OpenClaims lists the claims that have not ended (claimed, dispatched)
// and the unknown ones nobody resolved, oldest first.
func (db *DB) OpenClaims(ctx context.Context) ([]ClaimRow, error) {
	return db.claims(ctx, `WHERE phase IN `+openPhases+` AND resolved_at = '' ORDER BY claimed_at, id`)
}

// ConversationLock is the unknown claim nobody resolved that holds a
// conversation's workflow lock, if any.
func (db *DB) ConversationLock(ctx context.Context, workspace, conversation string) (*ClaimRow, error) {
	rows, err := db.claims(ctx, `WHERE conversation = ? AND workspace = ? AND phase IN `+openPhases+`
		AND phase = '`+string(ClaimUnknown)+`' AND resolved_at = '' ORDER BY claimed_at, id LIMIT 1`, conversation, workspace)
	if err != nil || len(rows) == 0 {
		return nil, err
	}
	return &rows[0], nil
}

// JobActive reports whether an occurrence of job is claimed or running
// (by any nlx).
func (db *DB) JobActive(ctx context.Context, job string) (bool, error) {
	var n int
	err := db.rdb.QueryRowContext(ctx, `SELECT count(*) FROM claims WHERE job = ? AND phase IN `+openPhases+`
		AND phase IN ('`+string(ClaimClaimed)+`', '`+string(ClaimDispatched)+`')`, job).Scan(&n)
	if err != nil {
		return false, fmt.Errorf("read claims of job %s: %w", job, err)
	}
	return n > 0, nil
}

// OpenClaimsPage is one page of OpenClaims: at most limit claims after
// the claim after (by claim time and id; nil: from the first). Recovery
// reads the open claims in pages, so that a state with many holds little
// at once.
func (db *DB) OpenClaimsPage(ctx context.Context, after *ClaimRow, limit int) ([]ClaimRow, error) {
	at, id := "", ""
	if after != nil {
		at, id = after.ClaimedAt, after.ID
	}
	return db.claims(ctx, `WHERE phase IN `+openPhases+` AND resolved_at = ''
		AND (claimed_at > ? OR (claimed_at = ? AND id > ?)) ORDER BY claimed_at, id LIMIT ?`, at, at, id, limit)
}

// LatestEnded is each job's newest claim that ended (any phase but
// claimed and dispatched), by job.
func (db *DB) LatestEnded(ctx context.Context) (map[string]ClaimRow, error) {
	rows, err := db.claims(ctx, `c WHERE claimed_at = (SELECT max(claimed_at) FROM claims WHERE job = c.job
		AND phase NOT IN ('`+string(ClaimClaimed)+`', '`+string(ClaimDispatched)+`')) ORDER BY job, id`)
	if err != nil {
		return nil, err
	}
	out := make(map[string]ClaimRow, len(rows))
	for _, r := range rows {
		out[r.Job] = r
	}
	return out, nil
}

// unknownClaims lists the unknown claims nobody resolved, for plans.
func unknownClaims(ctx context.Context, q queryer) ([]plan.UnknownClaim, error) {
	rows, err := collect(ctx, q, "unknown claims", `SELECT id, job, workspace, effective_connection, connection, scheduled_at,
		dispatched_at FROM claims WHERE phase = '`+string(ClaimUnknown)+`' AND resolved_at = '' ORDER BY dispatched_at, id`, nil,
		func(rows *sql.Rows, u *plan.UnknownClaim) error {
			var asked string
			err := rows.Scan(&u.ID, &u.Job, &u.Workspace, &u.Connection, &asked, &u.ScheduledAt, &u.At)
			if u.Connection == "" {
				u.Connection = asked
			}
			return err
		})
	return rows, err
}

// UnknownClaims lists the unknown claims nobody resolved.
func (db *DB) UnknownClaims(ctx context.Context) ([]plan.UnknownClaim, error) {
	return unknownClaims(ctx, db.rdb)
}

// MarkClaimUnknown marks a dispatched claim whose process is proven gone
// and whose end was never recorded unknown. It reports whether it did (a
// claim that ended meanwhile keeps its end).
func (db *DB) MarkClaimUnknown(ctx context.Context, id, why string) (bool, error) {
	return db.EndClaim(ctx, id, ClaimDispatched, ClaimUnknown, reason.OutcomeUnknown, why)
}

// ResolveClaim records a person's decision on an unknown claim: what
// happened, who says so and how they know. It releases the claim's
// workflow lock and never runs anything.
func (db *DB) ResolveClaim(ctx context.Context, id string, outcome ClaimOutcome, actor, why string) error {
	return db.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE claims SET resolved_outcome = ?, resolved_by = ?, resolved_reason = ?, resolved_at = ?
			WHERE id = ? AND phase = ? AND resolved_at = ''`, outcome, actor, why, db.stamp(), id, ClaimUnknown)
		if err != nil {
			return fmt.Errorf("resolve claim %s: %w", id, err)
		}
		if n, _ := res.RowsAffected(); n != 1 {
			return reason.New(reason.ClaimNotUnknown, "claim %s has no unknown outcome to resolve", id)
		}
		return nil
	})
}

// Cursors is each job's cursor: every occurrence at or before it was
// handled.
func (db *DB) Cursors(ctx context.Context) (map[string]time.Time, error) {
	type cur struct {
		job string
		at  string
	}
	rows, err := collect(ctx, db.rdb, "job cursors", `SELECT job, cursor FROM job_cursors`, nil,
		func(rows *sql.Rows, c *cur) error { return rows.Scan(&c.job, &c.at) })
	if err != nil {
		return nil, err
	}
	out := make(map[string]time.Time, len(rows))
	for _, c := range rows {
		t, err := time.Parse(time.RFC3339Nano, c.at)
		if err != nil {
			return nil, fmt.Errorf("job %s: cursor %q: %w", c.job, c.at, err)
		}
		out[c.job] = t
	}
	return out, nil
}

// SetCursor moves a job's cursor.
func (db *DB) SetCursor(ctx context.Context, job string, at time.Time) error {
	return db.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO job_cursors (job, cursor, updated_at) VALUES (?, ?, ?)
			ON CONFLICT (job) DO UPDATE SET cursor = excluded.cursor, updated_at = excluded.updated_at`,
			job, FormatInstant(at), db.stamp())
		if err != nil {
			return fmt.Errorf("job %s: cursor: %w", job, err)
		}
		return nil
	})
}

// ServeLockedError means another nlx serve holds the serve lock.
type ServeLockedError struct{ Holder procid.Identity }

func (e *ServeLockedError) Error() string {
	return fmt.Sprintf("%s: nlx serve %s already serves this state; one serve per state", reason.ServeLocked, e.Holder)
}

// As presents the error as serve_locked.
func (e *ServeLockedError) As(target any) bool {
	return reason.Present(target, &reason.Error{Code: reason.ServeLocked,
		Msg: fmt.Sprintf("nlx serve %s already serves this state; one serve per state", e.Holder), Err: e, Details: e.Holder})
}

// ServeLock takes the serve lock for this process: one nlx serve per
// state, apart from the apply lock. A holder proven gone is taken over
// (returned); a live one fails with *ServeLockedError.
func (db *DB) ServeLock(ctx context.Context) (lockID string, tookOver *procid.Identity, err error) {
	self, err := procid.Self()
	if err != nil {
		return "", nil, fmt.Errorf("identify this process: %w", err)
	}
	if lockID, err = newLockID(); err != nil {
		return "", nil, err
	}
	err = db.write(ctx, func(tx *sql.Tx) error {
		var h procid.Identity
		err := tx.QueryRowContext(ctx, `SELECT pid, pid_start, pid_ns, boot_id, host, user FROM serve_lock WHERE id = 1`).
			Scan(&h.PID, &h.Start, &h.PidNS, &h.Boot, &h.Host, &h.User)
		switch {
		case err == nil:
			gone, err := procid.Gone(h)
			if err != nil {
				return fmt.Errorf("check serve lock holder: %w", err)
			}
			if !gone {
				return &ServeLockedError{Holder: h}
			}
			tookOver = &h
			if _, err := tx.ExecContext(ctx, `DELETE FROM serve_lock WHERE id = 1`); err != nil {
				return fmt.Errorf("take over serve lock: %w", err)
			}
		case !errors.Is(err, sql.ErrNoRows):
			return fmt.Errorf("read serve lock: %w", err)
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO serve_lock (id, lock_id, pid, pid_start, pid_ns, boot_id, host, user, acquired_at)
			VALUES (1, ?, ?, ?, ?, ?, ?, ?, ?)`, lockID, self.PID, self.Start, self.PidNS, self.Boot, self.Host, self.User, db.stamp())
		if err != nil {
			return fmt.Errorf("take serve lock: %w", err)
		}
		return nil
	})
	if err != nil {
		return "", nil, err
	}
	return lockID, tookOver, nil
}

// ServeUnlock releases the serve lock lockID.
func (db *DB) ServeUnlock(ctx context.Context, lockID string) error {
	return db.write(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM serve_lock WHERE id = 1 AND lock_id = ?`, lockID); err != nil {
			return fmt.Errorf("release serve lock: %w", err)
		}
		return nil
	})
}
