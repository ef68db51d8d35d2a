package serve

import (
	"context"
	"sort"
	"time"

	"github.com/nlx-dev/nlx/internal/reason"
	"github.com/nlx-dev/nlx/reconcile"
	"github.com/nlx-dev/nlx/state"
	"github.com/nlx-dev/nlx/turn"
)

// JobState is what a job is doing, as nlx jobs shows it.
type JobState string

// The states of a job.
const (
	JobScheduled JobState = "scheduled"                 // runs at its next occurrence
	JobRunning   JobState = JobState(state.TurnRunning) // an occurrence's turn runs
	JobQueued    JobState = "queued"                    // an occurrence waits for its conversation
	JobBlocked   JobState = JobState(state.TurnBlocked) // its next occurrence would not run; Reason says why
	JobDisabled  JobState = "disabled"                  // enabled: false
	JobHeld      JobState = JobState(reason.Held)       // an import under review
	JobDone      JobState = "done"                      // a one-time job whose occurrence has passed
)

// Outcome is how a job's latest ended occurrence went.
type Outcome struct {
	Claim       string             `json:"claim"`
	ScheduledAt string             `json:"scheduled_at"`
	Trigger     state.ClaimTrigger `json:"trigger"`
	Phase       state.ClaimPhase   `json:"phase"`
	Code        string             `json:"reason_code,omitempty"`
	Reason      string             `json:"reason,omitempty"`
	Turn        string             `json:"turn,omitempty"`
	EndedAt     string             `json:"ended_at"`
	Resolved    string             `json:"resolved_outcome,omitempty"`
}

// JobStatus is one job as nlx jobs shows it.
type JobStatus struct {
	Name         string   `json:"name"`
	Workspace    string   `json:"workspace"`
	Connection   string   `json:"connection"`
	Conversation string   `json:"conversation"`
	Schedule     string   `json:"schedule"`
	State        JobState `json:"status"`
	Code         string   `json:"reason_code,omitempty"`
	Reason       string   `json:"reason,omitempty"`
	Next         string   `json:"next_due,omitempty"`
	Claim        string   `json:"claim,omitempty"` // the occurrence running or queued
	Permission   string   `json:"permission,omitempty"`
	Last         *Outcome `json:"last_outcome,omitempty"`
}

// Jobs is the status of every applied job at now, from the state alone:
// nothing is launched.
func Jobs(ctx context.Context, db *state.DB, r Runner, now time.Time) ([]JobStatus, error) {
	jobs, err := AppliedJobs(ctx, db)
	if err != nil {
		return nil, err
	}
	open, err := db.OpenClaims(ctx)
	if err != nil {
		return nil, err
	}
	last, err := db.LatestEnded(ctx)
	if err != nil {
		return nil, err
	}
	cursors, err := db.Cursors(ctx)
	if err != nil {
		return nil, err
	}
	perms, err := db.Permissions(ctx, false, "")
	if err != nil {
		return nil, err
	}
	waiting := map[string]string{} // turn -> pending permission
	for _, p := range perms {
		waiting[p.TurnID] = p.ID
	}
	out := make([]JobStatus, 0, len(jobs))
	for _, j := range jobs {
		st := JobStatus{Name: j.Name, Workspace: j.Spec.Workspace, Connection: j.Spec.Connection,
			Conversation: j.Conversation(), Schedule: describe(j), State: JobScheduled}
		if l, ok := last[j.Name]; ok {
			st.Last = &Outcome{Claim: l.ID, ScheduledAt: l.ScheduledAt, Trigger: l.Trigger, Phase: l.Phase, Code: l.ReasonCode,
				Reason: l.Reason, Turn: l.TurnID, EndedAt: l.EndedAt, Resolved: l.ResolvedOutcome}
		}
		var next time.Time
		hasNext := false
		if j.Schedule != nil {
			from, ok := cursors[j.Name]
			if !ok || from.Before(now) {
				from = now
			}
			next, hasNext = j.Schedule.Next(from)
			if hasNext {
				st.Next = next.UTC().Format(time.RFC3339)
			}
		}
		var mine *state.ClaimRow
		for i := range open {
			if c := &open[i]; c.Job == j.Name && (mine == nil || c.Phase == state.ClaimDispatched) {
				mine = c
			}
		}
		block := func(e *reason.Error) { st.State, st.Code, st.Reason = JobBlocked, string(e.Code), e.Msg }
		switch {
		case j.Status == reconcile.StatusHeld:
			// Held first: an imported job keeps its enabled flag as it
			// was, and nothing runs it either way until it is released.
			st.State, st.Code, st.Reason = JobHeld, string(reason.JobHeld), "an import under review: a reviewed plan releases it"
			if !j.Spec.Enabled {
				st.Reason += " (imported with enabled: false)"
			}
		case !j.Spec.Enabled:
			st.State, st.Code, st.Reason = JobDisabled, string(reason.JobDisabled), "enabled: false in the applied state"
		case j.Err != nil:
			block(reason.Wrap(reason.InvalidAppliedSpec, j.Err, "job %s", j.Name))
		case mine != nil && mine.Phase == state.ClaimDispatched:
			st.State, st.Claim = JobRunning, mine.ID
			if p, ok := waiting[mine.TurnID]; ok {
				st.Permission = p
				block(reason.New(reason.PermissionRequired, "turn %s waits for a decision on permission %s (nlx permissions allow|deny %s)", mine.TurnID, p, p))
			}
		case mine != nil && mine.Phase == state.ClaimClaimed:
			st.State, st.Claim = JobQueued, mine.ID
		default:
			if b := Blocked(ctx, db, r, j, turn.Request{Workspace: j.Spec.Workspace, Connection: j.Spec.Connection,
				Fallback: j.Spec.FallbackConnection, Conversation: j.Conversation()}, true); b != nil {
				block(b)
			} else if !hasNext {
				st.State = JobDone
			}
		}
		out = append(out, st)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Name < out[b].Name })
	return out, nil
}

// describe is a job's schedule as the config writes it.
func describe(j *Job) string {
	s := j.Spec.Schedule
	switch {
	case s.Cron != "":
		return "cron " + s.Cron + " " + s.Timezone
	case s.Every != "":
		return "every " + s.Every
	}
	return "at " + s.At
}
