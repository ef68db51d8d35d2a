package state

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/nlx-dev/nlx/internal/reason"
)

// TurnStatus is where a provider turn is.
type TurnStatus string

// The turn statuses: running until the turn ends, then how it ended (the
// provider package's result statuses).
const (
	TurnRunning     TurnStatus = "running"
	TurnCompleted   TurnStatus = "completed"
	TurnInterrupted TurnStatus = "interrupted"
	TurnFailed      TurnStatus = "failed"
	TurnBlocked     TurnStatus = "blocked"
)

// PermissionStatus is where a permission request is.
type PermissionStatus string

// The permission statuses. Only a pending request can be decided; every
// other status is final.
const (
	PermissionPending   PermissionStatus = "pending"
	PermissionAllowed   PermissionStatus = "allowed"
	PermissionDenied    PermissionStatus = "denied"
	PermissionTimedOut  PermissionStatus = "timed_out" // nobody decided in time: denied
	PermissionCancelled PermissionStatus = "cancelled" // the turn ended first: denied
)

// TurnRow is one provider turn: its binding, written before the provider
// starts, and its end.
type TurnRow struct {
	ID                string     `json:"id"`
	Workspace         string     `json:"workspace"`
	Connection        string     `json:"connection"`
	Conversation      string     `json:"conversation"`
	Actor             string     `json:"actor"`
	CredentialOwner   string     `json:"credential_owner"`
	RequestedProvider string     `json:"requested_provider"`
	EffectiveProvider string     `json:"effective_provider"`
	FallbackReason    string     `json:"fallback_reason,omitempty"`
	Billing           string     `json:"billing"`
	Generation        int64      `json:"generation"`
	Policy            string     `json:"policy"`
	ProviderVersion   string     `json:"provider_version,omitempty"`
	LaunchID          string     `json:"launch_id"`
	Session           string     `json:"-"` // the native handle: metadata, never a label
	Status            TurnStatus `json:"status"`
	Result            string     `json:"result,omitempty"`
	ErrorCode         string     `json:"error_code,omitempty"`
	ErrorMessage      string     `json:"error_message,omitempty"`
	Note              string     `json:"note,omitempty"`
	Stale             string     `json:"stale,omitempty"`
	Usage             string     `json:"-"` // JSON
	StartedAt         string     `json:"started_at"`
	EndedAt           string     `json:"ended_at,omitempty"`
	// ClaimID is the occurrence claim the turn carries out (nlx serve,
	// nlx run): BeginTurn dispatches it and EndTurn ends it, in the same
	// transactions. Resumed is the native session the turn continues.
	ClaimID string `json:"claim_id,omitempty"`
	Resumed string `json:"-"`
}

// TurnEnd is how a turn ended.
type TurnEnd struct {
	Status       TurnStatus
	Result       string
	ErrorCode    string
	ErrorMessage string
	Note         string
	Stale        string
	Usage        string // JSON
}

// ErrNoTurn means no turn has that id.
var ErrNoTurn = &reason.Error{Code: reason.NoSuchTurn, Msg: "no such turn"}

// BeginTurn records a turn's binding before its provider starts. A turn
// of a claim dispatches the claim in the same transaction, which fails
// (nothing recorded) when another claim holds the conversation.
func (db *DB) BeginTurn(ctx context.Context, t TurnRow) error {
	return db.write(ctx, func(tx *sql.Tx) error {
		at := db.stamp()
		if t.ClaimID != "" {
			if err := dispatch(ctx, tx, t, at); err != nil {
				return err
			}
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO turns (id, workspace, connection, conversation, actor, credential_owner,
			requested_provider, effective_provider, fallback_reason, billing, generation, policy, provider_version,
			launch_id, status, started_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			t.ID, t.Workspace, t.Connection, t.Conversation, t.Actor, t.CredentialOwner, t.RequestedProvider,
			t.EffectiveProvider, t.FallbackReason, t.Billing, t.Generation, t.Policy, t.ProviderVersion, t.LaunchID,
			TurnRunning, at)
		if err != nil {
			return fmt.Errorf("record turn %s: %w", t.ID, err)
		}
		return nil
	})
}

// SetTurnSession records the native session handle of a running turn.
func (db *DB) SetTurnSession(ctx context.Context, id, session string) error {
	return db.write(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `UPDATE turns SET session = ? WHERE id = ?`, session, id); err != nil {
			return fmt.Errorf("turn %s: session: %w", id, err)
		}
		return nil
	})
}

// EndTurn records how a running turn ended; a turn already ended keeps its
// end (the first one stands). The claim the turn carries out, if any,
// ends in the same transaction: a turn's end and its occurrence's are
// never apart.
func (db *DB) EndTurn(ctx context.Context, id string, e TurnEnd) error {
	if e.Usage == "" {
		e.Usage = "{}"
	}
	return db.write(ctx, func(tx *sql.Tx) error {
		at := db.stamp()
		res, err := tx.ExecContext(ctx, `UPDATE turns SET status = ?, result = ?, error_code = ?, error_message = ?, note = ?,
			stale = ?, usage = ?, ended_at = ? WHERE id = ? AND status = ?`,
			e.Status, e.Result, e.ErrorCode, e.ErrorMessage, e.Note, e.Stale, e.Usage, at, id, TurnRunning)
		if err != nil {
			return fmt.Errorf("end turn %s: %w", id, err)
		}
		if n, _ := res.RowsAffected(); n != 1 {
			return nil
		}
		_, err = tx.ExecContext(ctx, `UPDATE claims SET phase = ?, reason_code = ?, reason = ?, ended_at = ? WHERE turn_id = ? AND phase = ?`,
			endOfTurn(e.Status), e.ErrorCode, e.ErrorMessage, at, id, ClaimDispatched)
		if err != nil {
			return fmt.Errorf("end the claim of turn %s: %w", id, err)
		}
		return nil
	})
}

// Turn reads one turn.
func (db *DB) Turn(ctx context.Context, id string) (*TurnRow, error) {
	rows, err := db.turns(ctx, `WHERE id = ?`, id)
	if err != nil {
		return nil, err
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("%w: %s", ErrNoTurn, id)
	}
	return &rows[0], nil
}

// Turns lists turns, newest first, at most limit of them (0: all).
func (db *DB) Turns(ctx context.Context, limit int) ([]TurnRow, error) {
	if limit > 0 {
		return db.turns(ctx, `ORDER BY started_at DESC, id LIMIT ?`, limit)
	}
	return db.turns(ctx, `ORDER BY started_at DESC, id`)
}

func (db *DB) turns(ctx context.Context, tail string, args ...any) ([]TurnRow, error) {
	return collect(ctx, db.rdb, "turns", `SELECT id, workspace, connection, conversation, actor, credential_owner,
		requested_provider, effective_provider, fallback_reason, billing, generation, policy, provider_version, launch_id,
		session, status, result, error_code, error_message, note, stale, usage, started_at, ended_at FROM turns `+tail, args,
		func(rows *sql.Rows, t *TurnRow) error {
			return rows.Scan(&t.ID, &t.Workspace, &t.Connection, &t.Conversation, &t.Actor, &t.CredentialOwner,
				&t.RequestedProvider, &t.EffectiveProvider, &t.FallbackReason, &t.Billing, &t.Generation, &t.Policy,
				&t.ProviderVersion, &t.LaunchID, &t.Session, &t.Status, &t.Result, &t.ErrorCode, &t.ErrorMessage, &t.Note,
				&t.Stale, &t.Usage, &t.StartedAt, &t.EndedAt)
		})
}

// ConversationRow is a conversation of a workspace and connection: the
// provider's native handle (opaque) and nlx's summary of it.
type ConversationRow struct {
	Workspace  string
	Connection string
	Name       string
	Provider   string
	Handle     string
	Summary    string
	UpdatedAt  string
}

// Conversation reads a conversation; found is false when it has none yet.
func (db *DB) Conversation(ctx context.Context, workspace, connection, name string) (c ConversationRow, found bool, err error) {
	rows, err := collect(ctx, db.rdb, "conversations", `SELECT workspace, connection, name, provider, handle, summary, updated_at
		FROM conversations WHERE workspace = ? AND connection = ? AND name = ?`, []any{workspace, connection, name},
		func(rows *sql.Rows, c *ConversationRow) error {
			return rows.Scan(&c.Workspace, &c.Connection, &c.Name, &c.Provider, &c.Handle, &c.Summary, &c.UpdatedAt)
		})
	if err != nil || len(rows) == 0 {
		return c, false, err
	}
	return rows[0], true, nil
}

// SaveConversation writes a conversation's handle and summary.
func (db *DB) SaveConversation(ctx context.Context, c ConversationRow) error {
	return db.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO conversations (workspace, connection, name, provider, handle, summary, updated_at)
			VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (workspace, connection, name) DO UPDATE SET provider = excluded.provider,
			handle = excluded.handle, summary = excluded.summary, updated_at = excluded.updated_at`,
			c.Workspace, c.Connection, c.Name, c.Provider, c.Handle, c.Summary, db.stamp())
		if err != nil {
			return fmt.Errorf("save conversation %s/%s/%s: %w", c.Workspace, c.Connection, c.Name, err)
		}
		return nil
	})
}

// PermissionRow is one permission request of a provider, stored before nlx
// answers it.
type PermissionRow struct {
	ID           string           `json:"id"`
	TurnID       string           `json:"turn"`
	Kind         string           `json:"kind"`
	Tool         string           `json:"tool,omitempty"`
	Subject      string           `json:"subject"` // the command, or the paths one per line
	Cwd          string           `json:"cwd,omitempty"`
	Reason       string           `json:"reason,omitempty"`
	Decider      string           `json:"decider"` // actor:NAME or admin:WORKSPACE
	Status       PermissionStatus `json:"status"`
	DecidedBy    string           `json:"decided_by,omitempty"`
	DecisionCode string           `json:"decision_code,omitempty"`
	DecisionNote string           `json:"decision_note,omitempty"`
	CreatedAt    string           `json:"created_at"`
	DecidedAt    string           `json:"decided_at,omitempty"`
}

// ErrNoPermission means no permission request has that id.
var ErrNoPermission = &reason.Error{Code: reason.NoSuchPermission, Msg: "no such permission request"}

// AddPermission stores a pending permission request.
func (db *DB) AddPermission(ctx context.Context, p PermissionRow) error {
	return db.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO permission_requests (id, turn_id, kind, tool, subject, cwd, reason, decider,
			status, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			p.ID, p.TurnID, p.Kind, p.Tool, p.Subject, p.Cwd, p.Reason, p.Decider, PermissionPending, db.stamp())
		if err != nil {
			return fmt.Errorf("record permission request %s: %w", p.ID, err)
		}
		return nil
	})
}

// DecidePermission moves a pending request to status; a request already
// decided is permission_decided, and keeps its first decision.
func (db *DB) DecidePermission(ctx context.Context, id string, status PermissionStatus, by, code, note string) error {
	return db.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE permission_requests SET status = ?, decided_by = ?, decision_code = ?,
			decision_note = ?, decided_at = ? WHERE id = ? AND status = ?`, status, by, code, note, db.stamp(), id, PermissionPending)
		if err != nil {
			return fmt.Errorf("decide permission request %s: %w", id, err)
		}
		if n, _ := res.RowsAffected(); n == 1 {
			return nil
		}
		var cur PermissionStatus
		switch err := tx.QueryRowContext(ctx, `SELECT status FROM permission_requests WHERE id = ?`, id).Scan(&cur); {
		case err == sql.ErrNoRows:
			return fmt.Errorf("%w: %s", ErrNoPermission, id)
		case err != nil:
			return fmt.Errorf("decide permission request %s: %w", id, err)
		}
		return reason.New(reason.PermissionDecided, "permission request %s is already %s", id, cur)
	})
}

// Permission reads one permission request.
func (db *DB) Permission(ctx context.Context, id string) (*PermissionRow, error) {
	rows, err := db.permissions(ctx, `WHERE id = ?`, id)
	if err != nil {
		return nil, err
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("%w: %s", ErrNoPermission, id)
	}
	return &rows[0], nil
}

// Permissions lists permission requests, oldest first: the pending ones,
// or every one; of one turn when turnID is set.
func (db *DB) Permissions(ctx context.Context, all bool, turnID string) ([]PermissionRow, error) {
	where, args := `WHERE 1`, []any{}
	if !all {
		// In the SQL text so that SQLite uses the partial index.
		where += ` AND status = '` + string(PermissionPending) + `'`
	}
	if turnID != "" {
		where += ` AND turn_id = ?`
		args = append(args, turnID)
	}
	return db.permissions(ctx, where, args...)
}

func (db *DB) permissions(ctx context.Context, where string, args ...any) ([]PermissionRow, error) {
	return collect(ctx, db.rdb, "permission requests", `SELECT id, turn_id, kind, tool, subject, cwd, reason, decider, status,
		decided_by, decision_code, decision_note, created_at, decided_at FROM permission_requests `+where+
		` ORDER BY created_at, id`, args,
		func(rows *sql.Rows, p *PermissionRow) error {
			return rows.Scan(&p.ID, &p.TurnID, &p.Kind, &p.Tool, &p.Subject, &p.Cwd, &p.Reason, &p.Decider, &p.Status,
				&p.DecidedBy, &p.DecisionCode, &p.DecisionNote, &p.CreatedAt, &p.DecidedAt)
		})
}

// ProbedVersion returns the version last probed for program with identity;
// found is false when it was never probed, or the program changed since.
func (db *DB) ProbedVersion(ctx context.Context, program, identity string) (version string, found bool, err error) {
	rows, err := collect(ctx, db.rdb, "provider probes", `SELECT version FROM provider_probes WHERE program = ? AND identity = ?`,
		[]any{program, identity}, func(rows *sql.Rows, v *string) error { return rows.Scan(v) })
	if err != nil || len(rows) == 0 {
		return "", false, err
	}
	return rows[0], true, nil
}

// RecordProbe stores the version program (with identity) printed.
func (db *DB) RecordProbe(ctx context.Context, program, identity, version string) error {
	return db.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO provider_probes (program, identity, version, probed_at) VALUES (?, ?, ?, ?)
			ON CONFLICT (program) DO UPDATE SET identity = excluded.identity, version = excluded.version, probed_at = excluded.probed_at`,
			program, identity, version, db.stamp())
		if err != nil {
			return fmt.Errorf("record the version of %s: %w", program, err)
		}
		return nil
	})
}

// SetTurnLaunch records the launch a turn runs in now (a resume the
// provider refused starts a second one).
func (db *DB) SetTurnLaunch(ctx context.Context, id, launchID string) error {
	return db.write(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `UPDATE turns SET launch_id = ? WHERE id = ?`, launchID, id); err != nil {
			return fmt.Errorf("turn %s: launch: %w", id, err)
		}
		return nil
	})
}
