package state

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/nlx-dev/nlx/internal/procid"
	"github.com/nlx-dev/nlx/internal/reason"
)

// ToolCallRow is one call through a launch's tool proxy.
type ToolCallRow struct {
	ID         string `json:"id"`
	LaunchID   string `json:"launch_id"`
	TurnID     string `json:"turn_id,omitempty"`
	Workspace  string `json:"workspace"`
	Tool       string `json:"tool"`
	Server     string `json:"server,omitempty"`
	ArgsDigest string `json:"args_digest"`
	Outcome    string `json:"outcome"` // a toolproxy.Outcome
	ReasonCode string `json:"reason_code,omitempty"`
	Message    string `json:"message,omitempty"`
	Report     string `json:"report,omitempty"` // nlx_report's result, JSON
	StartedAt  string `json:"started_at"`
	EndedAt    string `json:"ended_at"`
}

// RecordToolCalls writes calls, in one transaction.
func (db *DB) RecordToolCalls(ctx context.Context, calls []ToolCallRow) error {
	if len(calls) == 0 {
		return nil
	}
	return db.write(ctx, func(tx *sql.Tx) error {
		st, err := tx.PrepareContext(ctx, `INSERT INTO tool_calls (id, launch_id, turn_id, workspace, tool, server, args_digest,
			outcome, reason_code, message, report, started_at, ended_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (id) DO NOTHING`)
		if err != nil {
			return fmt.Errorf("record tool calls: %w", err)
		}
		defer st.Close()
		for _, c := range calls {
			if _, err := st.ExecContext(ctx, c.ID, c.LaunchID, c.TurnID, c.Workspace, c.Tool, c.Server, c.ArgsDigest, c.Outcome,
				c.ReasonCode, c.Message, c.Report, c.StartedAt, c.EndedAt); err != nil {
				return fmt.Errorf("record tool call %s of launch %s: %w", c.ID, c.LaunchID, err)
			}
		}
		return nil
	})
}

// ToolCalls lists the calls of a turn, in order.
func (db *DB) ToolCalls(ctx context.Context, turnID string) ([]ToolCallRow, error) {
	return db.toolCalls(ctx, `WHERE turn_id = ? AND turn_id != '' ORDER BY started_at, id`, turnID)
}

// LaunchToolCalls lists the calls of a launch, in order.
func (db *DB) LaunchToolCalls(ctx context.Context, launchID string) ([]ToolCallRow, error) {
	return db.toolCalls(ctx, `WHERE launch_id = ? ORDER BY started_at, id`, launchID)
}

func (db *DB) toolCalls(ctx context.Context, where string, args ...any) ([]ToolCallRow, error) {
	return collect(ctx, db.rdb, "tool calls", `SELECT id, launch_id, turn_id, workspace, tool, server, args_digest, outcome,
		reason_code, message, report, started_at, ended_at FROM tool_calls `+where, args,
		func(rows *sql.Rows, c *ToolCallRow) error {
			return rows.Scan(&c.ID, &c.LaunchID, &c.TurnID, &c.Workspace, &c.Tool, &c.Server, &c.ArgsDigest, &c.Outcome,
				&c.ReasonCode, &c.Message, &c.Report, &c.StartedAt, &c.EndedAt)
		})
}

// RefreshPhase is where a catalog refresh attempt is.
type RefreshPhase string

// The phases of an attempt: deferred (the worker runs a turn: it is
// refreshed once idle), dispatched (recorded before anything that changes
// the worker is sent), then one end. Unknown is a write or reload whose
// acknowledgment was lost: never retried, it blocks further refreshes of
// its worker until resolved.
const (
	RefreshDeferred    RefreshPhase = "deferred"
	RefreshDispatched  RefreshPhase = RefreshPhase(PhaseDispatched)
	RefreshDone        RefreshPhase = "catalog_refreshed"
	RefreshConflict    RefreshPhase = "conflict"
	RefreshUnknown     RefreshPhase = RefreshPhase(PhaseUnknown)
	RefreshFailed      RefreshPhase = "failed"
	RefreshUnsupported RefreshPhase = RefreshPhase(reason.RefreshUnsupported)
	RefreshSuperseded  RefreshPhase = "superseded" // a newer attempt of the worker replaced it while it waited
	RefreshReleased    RefreshPhase = "released"   // the worker was released before it ran
)

// Terminal reports whether an attempt in phase p has ended (unknown
// counts, though it blocks its worker until resolved).
func (p RefreshPhase) Terminal() bool { return p != RefreshDeferred && p != RefreshDispatched }

// Ended is the attempt's phase and, when it has one, its reason code:
// "failed (worker_not_proven)".
func (r RefreshRow) Ended() string {
	if r.ReasonCode == "" {
		return string(r.Phase)
	}
	return string(r.Phase) + " (" + r.ReasonCode + ")"
}

// RefreshTrigger is what started an attempt.
type RefreshTrigger string

// The triggers: an apply that changed the workspace's tools (nlx serve
// saw its serial), or a person (nlx refresh).
const (
	RefreshOnApply RefreshTrigger = "apply"
	RefreshManual  RefreshTrigger = RefreshTrigger(TriggerManual)
)

// RefreshOutcome is what a person resolved an unknown attempt as.
type RefreshOutcome string

// The outcomes of nlx resolve refresh: the write took (the worker has the
// new configuration), or it did not.
const (
	RefreshOutcomeApplied    RefreshOutcome = "applied"
	RefreshOutcomeNotApplied RefreshOutcome = "not-applied"
)

// NextTurnUnverified is what a refreshed attempt says of the worker's next
// turn: its catalog is verified, what the model will be offered is not.
// It stays so, whatever a later turn uses.
const NextTurnUnverified = "unverified"

// RefreshRow is one attempt to refresh one worker's catalog.
type RefreshRow struct {
	ID             string         `json:"id"`
	LaunchID       string         `json:"launch_id"`
	Workspace      string         `json:"workspace"`
	Conversation   string         `json:"conversation"`
	ProviderKind   string         `json:"provider_kind"`
	Trigger        RefreshTrigger `json:"trigger"`
	RequestID      string         `json:"request_id,omitempty"`
	Actor          string         `json:"actor,omitempty"`
	Serial         int64          `json:"serial"`
	Catalog        string         `json:"catalog,omitempty"` // the projection's digest
	Tools          string         `json:"tools,omitempty"`   // the projection's tools, a JSON list
	Phase          RefreshPhase   `json:"phase"`
	ReadVersion    string         `json:"read_version,omitempty"`
	WrittenVersion string         `json:"written_version,omitempty"`
	NextTurnTools  string         `json:"next_turn_tools,omitempty"`
	ReasonCode     string         `json:"reason_code,omitempty"`
	Reason         string         `json:"reason,omitempty"`
	Owner          string         `json:"owner"`
	CreatedAt      string         `json:"created_at"`
	DispatchedAt   string         `json:"dispatched_at,omitempty"`
	EndedAt        string         `json:"ended_at,omitempty"`

	ResolvedOutcome RefreshOutcome `json:"resolved_outcome,omitempty"`
	ResolvedBy      string         `json:"resolved_by,omitempty"`
	ResolvedReason  string         `json:"resolved_reason,omitempty"`
	ResolvedAt      string         `json:"resolved_at,omitempty"`

	owner procid.Identity
}

// OwnerIdentity is the process that made the attempt.
func (r *RefreshRow) OwnerIdentity() procid.Identity { return r.owner }

// Blocked reports whether the attempt blocks its worker's refreshes: an
// unknown outcome nobody resolved.
func (r *RefreshRow) Blocked() bool { return r.Phase == RefreshUnknown && r.ResolvedAt == "" }

// ErrNoRefresh means no attempt has that id.
var ErrNoRefresh = &reason.Error{Code: reason.NoSuchRefresh, Msg: "no such catalog refresh"}

// BeginRefresh records an attempt before anything is sent to its worker,
// made by this process, in r.Phase: deferred, dispatched, or an end (an
// attempt refused before it began). An earlier attempt of the worker that
// still waits (deferred) is superseded by it. While an attempt of the
// worker is unknown and unresolved, the new one is recorded failed with
// refresh_unknown_unresolved and that error is returned: nothing may be
// sent.
func (db *DB) BeginRefresh(ctx context.Context, r RefreshRow) (RefreshRow, error) {
	self, err := selfIdentity()
	if err != nil {
		return r, fmt.Errorf("identify this process: %w", err)
	}
	var blocked error
	err = db.write(ctx, func(tx *sql.Tx) error {
		blocked = nil
		var held RefreshRow
		err := tx.QueryRowContext(ctx, `SELECT id, phase FROM catalog_refreshes WHERE launch_id = ? AND
			(phase IN ('`+string(RefreshDeferred)+`', '`+string(RefreshDispatched)+`') OR (phase = '`+string(RefreshUnknown)+`' AND resolved_at = ''))`,
			r.LaunchID).Scan(&held.ID, &held.Phase)
		switch {
		case errors.Is(err, sql.ErrNoRows):
		case err != nil:
			return fmt.Errorf("refresh of launch %s: %w", r.LaunchID, err)
		case held.Phase == RefreshUnknown:
			blocked = reason.New(reason.RefreshUnknownUnresolved, "catalog refresh %s of launch %s has an outcome nobody knows: "+
				"nothing more is sent to that worker until it is resolved (nlx resolve refresh %s)", held.ID, r.LaunchID, held.ID)
		case held.Phase == RefreshDispatched:
			blocked = reason.New(reason.RefreshFailed, "catalog refresh %s of launch %s is in flight", held.ID, r.LaunchID)
		default:
			if _, err := tx.ExecContext(ctx, `UPDATE catalog_refreshes SET phase = ?, reason = ?, ended_at = ? WHERE id = ? AND phase = ?`,
				RefreshSuperseded, "refresh "+r.ID+" replaced it while the worker ran a turn", db.stamp(), held.ID, RefreshDeferred); err != nil {
				return fmt.Errorf("supersede refresh %s: %w", held.ID, err)
			}
		}
		if blocked != nil {
			e := reason.Of(blocked)
			r.Phase, r.ReasonCode, r.Reason = RefreshFailed, string(e.Code), e.Msg
		}
		now := db.stamp()
		r.CreatedAt = now
		if r.Phase == RefreshDispatched {
			r.DispatchedAt = now
		}
		if r.Phase.Terminal() {
			r.EndedAt = now
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO catalog_refreshes (id, launch_id, workspace, conversation, provider_kind, trigger,
			request_id, actor, serial, catalog, tools, phase, reason_code, reason, owner_pid, owner_start, owner_boot, created_at,
			dispatched_at, ended_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			r.ID, r.LaunchID, r.Workspace, r.Conversation, r.ProviderKind, r.Trigger, r.RequestID, r.Actor, r.Serial, r.Catalog,
			r.Tools, r.Phase, r.ReasonCode, r.Reason, self.PID, self.Start, self.Boot, r.CreatedAt, r.DispatchedAt, r.EndedAt)
		if err != nil {
			return fmt.Errorf("record refresh %s of launch %s: %w", r.ID, r.LaunchID, err)
		}
		return nil
	})
	if err != nil {
		return r, err
	}
	return r, blocked
}

// RefreshUpdate is what an attempt's step records.
type RefreshUpdate struct {
	Catalog, Tools string // the projection, once known ("" keeps it)
	ReadVersion    string
	WrittenVersion string
	NextTurnTools  string
	Code           reason.Code
	Reason         string
}

// MoveRefresh moves attempt id from phase from to phase to, recording u.
// It reports whether the attempt was in from.
func (db *DB) MoveRefresh(ctx context.Context, id string, from, to RefreshPhase, u RefreshUpdate) (bool, error) {
	var moved bool
	err := db.write(ctx, func(tx *sql.Tx) error {
		now := db.stamp()
		dispatched, ended := "", ""
		if to == RefreshDispatched {
			dispatched = now
		}
		if to.Terminal() {
			ended = now
		}
		res, err := tx.ExecContext(ctx, `UPDATE catalog_refreshes SET phase = ?,
			catalog = CASE WHEN ? = '' THEN catalog ELSE ? END, tools = CASE WHEN ? = '' THEN tools ELSE ? END,
			read_version = CASE WHEN ? = '' THEN read_version ELSE ? END,
			written_version = CASE WHEN ? = '' THEN written_version ELSE ? END,
			next_turn_tools = CASE WHEN ? = '' THEN next_turn_tools ELSE ? END,
			reason_code = ?, reason = ?,
			dispatched_at = CASE WHEN ? = '' THEN dispatched_at ELSE ? END,
			ended_at = CASE WHEN ? = '' THEN ended_at ELSE ? END
			WHERE id = ? AND phase = ?`,
			to, u.Catalog, u.Catalog, u.Tools, u.Tools, u.ReadVersion, u.ReadVersion, u.WrittenVersion, u.WrittenVersion,
			u.NextTurnTools, u.NextTurnTools, u.Code, u.Reason, dispatched, dispatched, ended, ended, id, from)
		if err != nil {
			return fmt.Errorf("refresh %s: %s -> %s: %w", id, from, to, err)
		}
		n, _ := res.RowsAffected()
		moved = n == 1
		return nil
	})
	return moved, err
}

// Refresh reads one attempt.
func (db *DB) Refresh(ctx context.Context, id string) (RefreshRow, error) {
	rows, err := db.refreshes(ctx, `WHERE id = ?`, id)
	if err != nil {
		return RefreshRow{}, err
	}
	if len(rows) == 0 {
		return RefreshRow{}, fmt.Errorf("%w: %s", ErrNoRefresh, id)
	}
	return rows[0], nil
}

// Refreshes lists attempts, newest first: of a workspace ("" for every
// one), of a request (when set), at most limit (0: every one).
func (db *DB) Refreshes(ctx context.Context, workspace, requestID string, limit int) ([]RefreshRow, error) {
	var where []string
	var args []any
	if workspace != "" {
		where, args = append(where, "workspace = ?"), append(args, workspace)
	}
	if requestID != "" {
		where, args = append(where, "request_id = ?"), append(args, requestID)
	}
	q := ""
	if len(where) > 0 {
		q = "WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY created_at DESC, id DESC"
	if limit > 0 {
		q += fmt.Sprintf(" LIMIT %d", limit)
	}
	return db.refreshes(ctx, q, args...)
}

// OpenRefreshes lists the attempts not over: deferred or dispatched (what
// a dead serve may have left), oldest first.
func (db *DB) OpenRefreshes(ctx context.Context) ([]RefreshRow, error) {
	return db.refreshes(ctx, `WHERE phase IN ('`+string(RefreshDeferred)+`', '`+string(RefreshDispatched)+`') ORDER BY created_at, id`)
}

// UnresolvedRefreshes lists the unknown attempts nobody resolved, oldest
// first.
func (db *DB) UnresolvedRefreshes(ctx context.Context) ([]RefreshRow, error) {
	return db.refreshes(ctx, `WHERE phase = '`+string(RefreshUnknown)+`' AND resolved_at = '' ORDER BY created_at, id`)
}

func (db *DB) refreshes(ctx context.Context, where string, args ...any) ([]RefreshRow, error) {
	return collect(ctx, db.rdb, "catalog refreshes", `SELECT id, launch_id, workspace, conversation, provider_kind, trigger,
		request_id, actor, serial, catalog, tools, phase, read_version, written_version, next_turn_tools, reason_code, reason,
		owner_pid, owner_start, owner_boot, created_at, dispatched_at, ended_at, resolved_outcome, resolved_by, resolved_reason,
		resolved_at FROM catalog_refreshes `+where, args,
		func(rows *sql.Rows, r *RefreshRow) error {
			if err := rows.Scan(&r.ID, &r.LaunchID, &r.Workspace, &r.Conversation, &r.ProviderKind, &r.Trigger, &r.RequestID,
				&r.Actor, &r.Serial, &r.Catalog, &r.Tools, &r.Phase, &r.ReadVersion, &r.WrittenVersion, &r.NextTurnTools,
				&r.ReasonCode, &r.Reason, &r.owner.PID, &r.owner.Start, &r.owner.Boot, &r.CreatedAt, &r.DispatchedAt,
				&r.EndedAt, &r.ResolvedOutcome, &r.ResolvedBy, &r.ResolvedReason, &r.ResolvedAt); err != nil {
				return err
			}
			r.Owner = fmt.Sprintf("pid %d", r.owner.PID)
			return nil
		})
}

// ResolveRefresh records what happened to an unknown attempt, who says so
// and why: its worker may be refreshed again.
func (db *DB) ResolveRefresh(ctx context.Context, id string, outcome RefreshOutcome, actor, why string) error {
	return db.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE catalog_refreshes SET resolved_outcome = ?, resolved_by = ?, resolved_reason = ?,
			resolved_at = ? WHERE id = ? AND phase = ? AND resolved_at = ''`, outcome, actor, why, db.stamp(), id, RefreshUnknown)
		if err != nil {
			return fmt.Errorf("resolve refresh %s: %w", id, err)
		}
		if n, _ := res.RowsAffected(); n != 1 {
			return reason.New(reason.RefreshNotUnknown, "catalog refresh %s has no unknown outcome to resolve", id)
		}
		return nil
	})
}

// RefreshRequestRow is a person's nlx refresh of a workspace.
type RefreshRequestRow struct {
	ID          string `json:"id"`
	Workspace   string `json:"workspace"`
	Actor       string `json:"actor"`
	RequestedAt string `json:"requested_at"`
	TakenAt     string `json:"taken_at,omitempty"`
	Workers     int    `json:"workers"`
	DoneAt      string `json:"done_at,omitempty"`
}

// RequestRefresh records a person's request to refresh the workspace's
// running workers, for the serve that holds them.
func (db *DB) RequestRefresh(ctx context.Context, id, workspace, actor string) error {
	return db.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO refresh_requests (id, workspace, actor, requested_at) VALUES (?, ?, ?, ?)`,
			id, workspace, actor, db.stamp())
		if err != nil {
			return fmt.Errorf("request a refresh of workspace %s: %w", workspace, err)
		}
		return nil
	})
}

// OpenRefreshRequests lists the requests not done, oldest first.
func (db *DB) OpenRefreshRequests(ctx context.Context) ([]RefreshRequestRow, error) {
	return db.refreshRequests(ctx, `WHERE done_at = '' ORDER BY requested_at, id`)
}

// RefreshRequest reads one request.
func (db *DB) RefreshRequest(ctx context.Context, id string) (RefreshRequestRow, error) {
	rows, err := db.refreshRequests(ctx, `WHERE id = ?`, id)
	if err != nil {
		return RefreshRequestRow{}, err
	}
	if len(rows) == 0 {
		return RefreshRequestRow{}, fmt.Errorf("%w: request %s", ErrNoRefresh, id)
	}
	return rows[0], nil
}

func (db *DB) refreshRequests(ctx context.Context, where string, args ...any) ([]RefreshRequestRow, error) {
	return collect(ctx, db.rdb, "refresh requests", `SELECT id, workspace, actor, requested_at, taken_at, workers, done_at
		FROM refresh_requests `+where, args,
		func(rows *sql.Rows, r *RefreshRequestRow) error {
			return rows.Scan(&r.ID, &r.Workspace, &r.Actor, &r.RequestedAt, &r.TakenAt, &r.Workers, &r.DoneAt)
		})
}

// TakeRefreshRequest marks a request taken, with the number of workers
// found; done marks it done too. It reports whether it was open.
func (db *DB) TakeRefreshRequest(ctx context.Context, id string, workers int, done bool) (bool, error) {
	var taken bool
	err := db.write(ctx, func(tx *sql.Tx) error {
		now := db.stamp()
		doneAt := ""
		if done {
			doneAt = now
		}
		res, err := tx.ExecContext(ctx, `UPDATE refresh_requests SET taken_at = CASE WHEN taken_at = '' THEN ? ELSE taken_at END,
			workers = ?, done_at = ? WHERE id = ? AND done_at = ''`, now, workers, doneAt, id)
		if err != nil {
			return fmt.Errorf("take refresh request %s: %w", id, err)
		}
		n, _ := res.RowsAffected()
		taken = n == 1
		return nil
	})
	return taken, err
}

// ServeHolder is the nlx serve holding the state's serve lock, if any
// (it may have died since: procid.Gone tells).
func (db *DB) ServeHolder(ctx context.Context) (procid.Identity, bool, error) {
	var h procid.Identity
	err := db.rdb.QueryRowContext(ctx, `SELECT pid, pid_start, pid_ns, boot_id, host, user FROM serve_lock WHERE id = 1`).
		Scan(&h.PID, &h.Start, &h.PidNS, &h.Boot, &h.Host, &h.User)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return h, false, nil
	case err != nil:
		return h, false, fmt.Errorf("read serve lock: %w", err)
	}
	return h, true, nil
}
