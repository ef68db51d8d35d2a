package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/nlx-dev/nlx/internal/reason"
	"github.com/nlx-dev/nlx/isolate"
	"github.com/nlx-dev/nlx/schema"
	"github.com/nlx-dev/nlx/serve"
	"github.com/nlx-dev/nlx/state"
	"github.com/nlx-dev/nlx/turn"
)

func newJobsCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "jobs",
		Short: "List the applied jobs: status, why blocked, next due time, last outcome",
		Long: `Jobs shows every applied job as nlx serve sees it, from the state alone
(nothing is launched): scheduled, running, queued, done (a one-time job
past its instant), disabled, held, or blocked with the reason its next
occurrence would not run (a provider disabled without a fallback, a
personal connection without backgroundAuthority, an actor no longer a
member, a conversation locked by an unknown claim, a turn waiting on a
permission), its next due time and how its latest occurrence ended.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			return a.readState(ctx, func(db *state.DB) error { return jobsList(ctx, a, db) })
		},
	}
	var limit int
	show := &cobra.Command{
		Use:   "show NAME",
		Short: "Show one job: its status and its latest occurrences (claims)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			return a.readState(ctx, func(db *state.DB) error { return jobsShow(ctx, a, db, args[0], limit) })
		},
	}
	show.Flags().IntVar(&limit, "limit", 20, "at most this many occurrences (0: all)")
	cmd.AddCommand(show)
	return cmd
}

func jobStatuses(ctx context.Context, a *app, db *state.DB) ([]serve.JobStatus, error) {
	r, err := runner(db, nil)
	if err != nil {
		return nil, err
	}
	return serve.Jobs(ctx, db, r, time.Now())
}

func jobsList(ctx context.Context, a *app, db *state.DB) error {
	jobs, err := jobStatuses(ctx, a, db)
	if err != nil {
		return err
	}
	return a.view.Render(document{Version: versionJobs, JSON: map[string]any{"jobs": jobs}, Text: func(w io.Writer) error {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "JOB\tWORKSPACE\tSTATUS\tREASON\tNEXT DUE\tLAST OUTCOME")
		for _, j := range jobs {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", j.Name, j.Workspace, j.State, dash(j.Code), dash(j.Next), lastOutcome(j.Last))
		}
		return tw.Flush()
	}})
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func lastOutcome(o *serve.Outcome) string {
	if o == nil {
		return "-"
	}
	s := string(o.Phase)
	if o.Code != "" {
		s += " (" + o.Code + ")"
	}
	if o.Resolved != "" {
		s += ", resolved " + o.Resolved
	}
	return s + " " + o.EndedAt
}

func jobsShow(ctx context.Context, a *app, db *state.DB, name string, limit int) error {
	jobs, err := jobStatuses(ctx, a, db)
	if err != nil {
		return err
	}
	var st *serve.JobStatus
	for i := range jobs {
		if jobs[i].Name == name {
			st = &jobs[i]
		}
	}
	if st == nil {
		return reason.New(reason.NoSuchJob, "no job %s is applied", name)
	}
	claims, err := db.Claims(ctx, name, limit)
	if err != nil {
		return err
	}
	if claims == nil {
		claims = []state.ClaimRow{}
	}
	report, err := lastReport(ctx, db, claims)
	if err != nil {
		return err
	}
	doc := struct {
		*serve.JobStatus
		Claims []state.ClaimRow `json:"claims"`
		// LastReport is the structured result the newest occurrence
		// that made one reported with nlx_report.
		LastReport json.RawMessage `json:"last_report,omitempty"`
	}{st, claims, report}
	return a.view.Render(document{Version: versionJob, JSON: doc, Text: func(w io.Writer) error {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		line := fieldLine(tw)
		line("job", st.Name)
		line("status", string(st.State))
		if st.Code != "" {
			line("reason", st.Code+": "+st.Reason)
		}
		line("workspace", st.Workspace)
		line("connection", st.Connection)
		line("conversation", st.Conversation)
		line("schedule", st.Schedule)
		line("next due", st.Next)
		line("occurrence", st.Claim)
		line("last outcome", strings.TrimPrefix(lastOutcome(st.Last), "-"))
		line("last report", string(report))
		tw.Flush()
		if len(claims) > 0 {
			fmt.Fprintln(w, "\noccurrences:")
			claimTable(w, claims)
		}
		return nil
	}})
}

// lastReport is the newest nlx_report result of the occurrences' turns
// (newest first), or nil.
func lastReport(ctx context.Context, db *state.DB, claims []state.ClaimRow) (json.RawMessage, error) {
	for _, c := range claims {
		if c.TurnID == "" {
			continue
		}
		calls, err := db.ToolCalls(ctx, c.TurnID)
		if err != nil {
			return nil, err
		}
		for i := len(calls) - 1; i >= 0; i-- {
			if calls[i].Report != "" {
				return json.RawMessage(calls[i].Report), nil
			}
		}
	}
	return nil, nil
}

func claimTable(w io.Writer, claims []state.ClaimRow) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CLAIM\tDUE\tTRIGGER\tACTOR\tCONNECTION\tPHASE\tTURN")
	for _, c := range claims {
		phase := string(c.Phase)
		if c.ReasonCode != "" {
			phase += " (" + c.ReasonCode + ")"
		}
		if c.ResolvedOutcome != "" {
			phase += ", resolved " + c.ResolvedOutcome + " by " + c.ResolvedBy
		}
		conn := c.Connection
		if c.EffectiveConnection != "" && c.EffectiveConnection != c.Connection {
			conn += " (ran on " + c.EffectiveConnection + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", c.ID, c.ScheduledAt, c.Trigger, c.Actor, conn, phase, dash(c.TurnID))
	}
	return tw.Flush()
}

func newRunCmd(a *app) *cobra.Command {
	var actor, connection, backend, key string
	var wait, permissionWait, idleTimeout, timeout time.Duration
	cmd := &cobra.Command{
		Use:   "run JOB --actor A [--connection C]",
		Short: "Run one occurrence of a job now, claimed like a scheduled one",
		Long: `Run claims one occurrence of the applied job now (trigger manual, with the
initiating actor and connection recorded) and runs its turn here, through
the same serialization as nlx serve: it waits (up to --wait) while another
turn of the job's conversation runs, and refuses while an unknown claim
locks it. The turn runs for the actor, who must be a member of the job's
workspace; --connection runs it on another connection of that workspace
(a personal one only by its owner). The job's scheduled binding in the
state is never changed by it. A disabled job can be run by hand; a held
one cannot.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			return a.withState(ctx, func(db *state.DB) error {
				r, err := runner(db, nil)
				if err != nil {
					return err
				}
				base := turn.Request{PermissionWait: permissionWait, IdleTimeout: idleTimeout, Timeout: timeout,
					HostEnv: os.Environ(), Backend: isolate.Backend(backend)}
				actor, err := actingActor(ctx, db, actor, key)
				if err != nil {
					return err
				}
				fmt.Fprintf(a.io.Err, "nlx run: claiming an occurrence of job %s for %s\n", args[0], actor)
				claim, out, err := serve.RunNow(ctx, db, r, serve.Manual{Job: args[0], Actor: actor, Connection: connection, Wait: wait}, base)
				if err != nil {
					return err
				}
				doc := map[string]any{"claim": claim, "turn": out.TurnID, "result": out.Result}
				if err := a.say(versionRun, doc, "Job %s: claim %s %s (turn %s).\n%s", args[0], claim.ID, claim.Phase, out.TurnID,
					strings.TrimRight(out.Result.Text, "\n")); err != nil {
					return err
				}
				return out.Err()
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&actor, "actor", "", "who runs it, proven by the OS user or --key (default $NLX_ACTOR, else the actor the OS user proves)")
	keyFlag(cmd, &key)
	f.StringVar(&connection, "connection", "", "a connection of the job's workspace to run on (default the job's)")
	f.DurationVar(&wait, "wait", 10*time.Minute, "how long to wait for another turn of the conversation to end")
	f.DurationVar(&permissionWait, "permission-wait", 0, "how long a permission request waits for a decision (0: denied at once)")
	f.DurationVar(&idleTimeout, "idle-timeout", 10*time.Minute, "interrupt the turn when the provider sends nothing this long (0: never)")
	f.DurationVar(&timeout, "timeout", 0, "interrupt the turn after this long (0: never)")
	f.StringVar(&backend, "backend", "", "bwrap or runc (default: bwrap where it works, else runc)")
	return cmd
}

func newResolveClaimCmd(a *app) *cobra.Command {
	var outcome, actor, why, key string
	cmd := &cobra.Command{
		Use:   "claim ID --outcome succeeded|failed|not-run --actor NAME --reason TEXT",
		Short: "Record what happened to a job occurrence whose outcome is unknown",
		Long: `A job occurrence nlx serve dispatched and whose process is gone without a
recorded end is unknown: it is never run again and nothing else runs in its
conversation. Resolve claim records what happened (succeeded, failed or
not-run), who says so and how they know, and releases the conversation's
workflow lock. It never runs anything: a one-time job resolved not-run is
run again only by nlx run. The actor must be a host operator or an admin of
the job's workspace in the applied state.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			return a.withState(ctx, func(db *state.DB) error {
				o := state.ClaimOutcome(outcome)
				switch o {
				case state.ClaimOutcomeSucceeded, state.ClaimOutcomeFailed, state.ClaimOutcomeNotRun:
				default:
					return reason.New(reason.InvalidUsage, "--outcome %q: want succeeded, failed or not-run", outcome)
				}
				if err := resolver(ctx, db, actor, why, key); err != nil {
					return err
				}
				c, err := db.ClaimByID(ctx, args[0])
				if err != nil {
					return err
				}
				if err := operatorOrAdmin(ctx, db, actor, c.Workspace); err != nil {
					return err
				}
				if err := db.ResolveClaim(ctx, c.ID, o, actor, why); err != nil {
					return err
				}
				return a.say(versionResolveClaim, map[string]any{"claim": c.ID, "job": c.Job, "outcome": o, "actor": actor},
					"Resolved claim %s of job %s as %s. Conversation %s is unlocked; nothing was run.", c.ID, c.Job, o, c.Conversation)
			})
		},
	}
	resolveFlags(cmd, "succeeded, failed or not-run", &outcome, &actor, &why, &key)
	return cmd
}

// resolver checks a resolution's actor (a name, proven) and its reason
// (how they know).
func resolver(ctx context.Context, db *state.DB, actor, why, key string) error {
	if !schema.ValidName(actor) {
		return reason.New(reason.InvalidUsage, "--actor %q is not an actor name", actor)
	}
	if strings.TrimSpace(why) == "" {
		return reason.New(reason.InvalidUsage, "--reason is required: say how you know")
	}
	return proveActor(ctx, db, actor, key)
}

// operatorOrAdmin refuses an actor who is neither a host operator nor an
// admin of workspace in the applied state.
func operatorOrAdmin(ctx context.Context, db *state.DB, actor, workspace string) error {
	auth, err := db.Authority(ctx)
	if err != nil {
		return err
	}
	if !auth.Operators[actor] && !auth.Admins[workspace][actor] {
		return reason.New(reason.ApproverNotAdmin, "%s is neither a host operator nor an admin of workspace %s in the applied state", actor, workspace)
	}
	return nil
}
