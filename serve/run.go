package serve

import (
	"context"
	"time"

	"github.com/nlx-dev/nlx/internal/reason"
	"github.com/nlx-dev/nlx/reconcile"
	"github.com/nlx-dev/nlx/state"
	"github.com/nlx-dev/nlx/turn"
)

// Manual is a run of a job asked for by a person (nlx run).
type Manual struct {
	Job   string
	Actor string // the initiating actor: the turn runs for them
	// Connection is the connection to run on; the job's own when empty.
	// The job's scheduled binding never changes.
	Connection string
	// Wait bounds how long the run waits for another turn of its
	// conversation to end.
	Wait time.Duration
}

// RunNow claims one occurrence of a job now, as a manual run (the
// initiating actor and connection recorded on the claim), and runs it
// through the same serialization as the scheduled ones. base holds the
// turn's limits and environment. A refusal before dispatch is returned
// with the claim ended as skipped; nothing was launched.
func RunNow(ctx context.Context, db *state.DB, r Runner, m Manual, base turn.Request) (*state.ClaimRow, *turn.Outcome, error) {
	jobs, err := AppliedJobs(ctx, db)
	if err != nil {
		return nil, nil, err
	}
	j := jobs[m.Job]
	if j == nil {
		return nil, nil, reason.New(reason.NoSuchJob, "no job %s is applied", m.Job)
	}
	if j.Status == reconcile.StatusHeld {
		return nil, nil, reason.New(reason.JobHeld, "job %s is held (an import under review): a reviewed plan releases it first", m.Job)
	}
	conn := m.Connection
	if conn == "" {
		conn = j.Spec.Connection
	}
	if c := connectionOf(ctx, db, conn); c != nil && c.Scope == "personal" && c.Owner != m.Actor {
		return nil, nil, reason.New(reason.ConnectionNotAllowed, "connection %s is %s's personal connection: only %s runs on it", conn, c.Owner, c.Owner)
	}
	_, serial, err := db.Meta(ctx)
	if err != nil {
		return nil, nil, err
	}
	claim := state.ClaimRow{ID: NewID(), Job: j.Name, ScheduledAt: state.FormatInstant(time.Now()), Trigger: state.TriggerManual,
		Workspace: j.Spec.Workspace, Conversation: j.Conversation(), Connection: conn, Actor: m.Actor, Serial: serial}
	if _, err := db.Claim(ctx, claim); err != nil {
		return nil, nil, err
	}
	req := base
	req.Workspace, req.Connection, req.Conversation, req.Prompt = j.Spec.Workspace, conn, j.Conversation(), j.Spec.Prompt
	req.Actor, req.ClaimID = m.Actor, claim.ID
	req.Fallback = ""
	if conn == j.Spec.Connection {
		req.Fallback = j.Spec.FallbackConnection
	}
	deadline := time.Now().Add(m.Wait)
	out, err := RunClaim(ctx, db, r, j, req, false, func() error {
		if time.Now().After(deadline) {
			return reason.New(reason.ConversationBusy, "another turn of conversation %s still ran after --wait %s", j.Conversation(), m.Wait)
		}
		return nil
	})
	if err != nil {
		db.EndClaim(context.WithoutCancel(ctx), claim.ID, state.ClaimClaimed, state.ClaimSkipped, reason.CodeOf(err), errMsg(err))
		return &claim, nil, err
	}
	row, rerr := db.ClaimByID(ctx, claim.ID)
	if rerr != nil {
		return &claim, out, rerr
	}
	return row, out, nil
}
