package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/nlx-dev/nlx/internal/procid"
	"github.com/nlx-dev/nlx/internal/reason"
	"github.com/nlx-dev/nlx/reconcile"
	"github.com/nlx-dev/nlx/schema"
	"github.com/nlx-dev/nlx/serve"
	"github.com/nlx-dev/nlx/state"
)

func newRefreshCmd(a *app) *cobra.Command {
	var actor, key string
	var wait time.Duration
	cmd := &cobra.Command{
		Use:   "refresh WORKSPACE --actor NAME",
		Short: "Give the running workers of a workspace its current tools, through their own connections",
		Long: `Refresh asks the nlx serve that runs the workspace's workers to give each
its current tools (the applied workspace's, through nlx's tool proxy), as
serve does by itself after an apply that changes them: through the
worker's original connection, never a new one, without a turn, a restart,
or a new or resumed thread. A worker running a turn is refreshed once its
turn ended. Every attempt is recorded before anything is sent; one whose
write or reload lost its acknowledgment is unknown, never retried, and no
further refresh of that worker runs until nlx resolve refresh.

Without a running nlx serve no worker runs: every launch gets the current
tools, and there is nothing to refresh. The actor must be a host operator
or an admin of the workspace in the applied state, and prove it.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			return a.withState(ctx, func(db *state.DB) error { return refreshRun(ctx, a, db, args[0], actor, key, wait) })
		},
	}
	cmd.Flags().StringVar(&actor, "actor", "", "who asks (required)")
	cmd.Flags().DurationVar(&wait, "wait", 2*time.Minute, "how long to wait for nlx serve's answer")
	keyFlag(cmd, &key)
	_ = cmd.MarkFlagRequired("actor")
	return cmd
}

func refreshRun(ctx context.Context, a *app, db *state.DB, workspace, actor, key string, wait time.Duration) error {
	if !schema.ValidName(actor) {
		return reason.New(reason.InvalidUsage, "--actor %q is not an actor name", actor)
	}
	if err := proveActor(ctx, db, actor, key); err != nil {
		return err
	}
	if _, status, found, err := db.AppliedSpec(ctx, string(schema.KindWorkspace)+"."+workspace); err != nil {
		return err
	} else if !found || status != reconcile.StatusActive {
		return reason.New(reason.NotApplied, "workspace.%s is not in the applied state", workspace)
	}
	if err := operatorOrAdmin(ctx, db, actor, workspace); err != nil {
		return err
	}
	holder, held, err := db.ServeHolder(ctx)
	if err != nil {
		return err
	}
	if gone, _ := procid.Gone(holder); !held || gone {
		return a.say(versionRefresh, map[string]any{"workspace": workspace, "serve": false, "attempts": []state.RefreshRow{}},
			"No nlx serve runs on this state: no worker of %s runs, and every launch gets the current tools.", workspace)
	}
	id := "rq-" + serve.NewID()
	if err := db.RequestRefresh(ctx, id, workspace, actor); err != nil {
		return err
	}
	deadline := time.Now().Add(wait)
	for {
		q, err := db.RefreshRequest(ctx, id)
		if err != nil {
			return err
		}
		if q.DoneAt != "" {
			break
		}
		if time.Now().After(deadline) {
			return reason.New(reason.Failure, "nlx serve (pid %d) did not answer refresh %s within %s; nlx refreshes %s shows its attempts later", holder.PID, id, wait, workspace)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	rows, err := db.Refreshes(ctx, workspace, id, 0)
	if err != nil {
		return err
	}
	if rows == nil {
		rows = []state.RefreshRow{}
	}
	err = a.view.Render(document{Version: versionRefresh, JSON: map[string]any{"workspace": workspace, "serve": true, "request": id, "attempts": rows},
		Text: func(w io.Writer) error {
			if len(rows) == 0 {
				_, err := fmt.Fprintf(w, "No worker of %s runs: every launch gets the current tools.\n", workspace)
				return err
			}
			refreshTable(w, rows)
			return nil
		}})
	if err != nil {
		return err
	}
	// A worker not refreshed is the command's failure, with its code.
	for _, r := range rows {
		switch r.Phase {
		case state.RefreshDone, state.RefreshDeferred:
		default:
			code := reason.Code(r.ReasonCode)
			if code == "" {
				code = reason.RefreshFailed
			}
			return reason.New(code, "refresh %s of launch %s: %s", r.ID, r.LaunchID, r.Reason)
		}
	}
	return nil
}

// refreshTable lists attempts.
func refreshTable(w io.Writer, rows []state.RefreshRow) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "REFRESH\tCREATED\tWORKSPACE\tLAUNCH\tCONVERSATION\tPROVIDER\tTRIGGER\tPHASE\tREASON")
	for _, r := range rows {
		phase := string(r.Phase)
		if r.Blocked() {
			phase += " (blocks its worker)"
		} else if r.ResolvedAt != "" {
			phase += " (resolved " + string(r.ResolvedOutcome) + " by " + r.ResolvedBy + ")"
		}
		why := r.ReasonCode
		if r.Phase == state.RefreshDone {
			why = "next turn's tools " + r.NextTurnTools
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.ID, r.CreatedAt, r.Workspace, r.LaunchID, r.Conversation, r.ProviderKind,
			r.Trigger, phase, why)
	}
	tw.Flush()
}

func newRefreshesCmd(a *app) *cobra.Command {
	var limit int
	cmd := &cobra.Command{
		Use:   "refreshes [WORKSPACE]",
		Short: "List catalog refresh attempts, newest first (unknown ones block their worker until resolved)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			ws := ""
			if len(args) == 1 {
				ws = args[0]
			}
			return a.readState(ctx, func(db *state.DB) error {
				rows, err := db.Refreshes(ctx, ws, "", limit)
				if err != nil {
					return err
				}
				if rows == nil {
					rows = []state.RefreshRow{}
				}
				return a.view.Render(document{Version: versionRefreshes, JSON: map[string]any{"refreshes": rows}, Text: func(w io.Writer) error {
					refreshTable(w, rows)
					for _, r := range rows {
						if r.Reason != "" {
							fmt.Fprintf(w, "\n%s: %s", r.ID, r.Reason)
						}
					}
					if len(rows) > 0 {
						fmt.Fprintln(w)
					}
					return nil
				}})
			})
		},
	}
	cmd.Flags().IntVar(&limit, "limit", 50, "at most this many (0: all)")
	return cmd
}

func newResolveRefreshCmd(a *app) *cobra.Command {
	var outcome, actor, why, key string
	cmd := &cobra.Command{
		Use:   "refresh ID --outcome applied|not-applied --actor NAME --reason TEXT",
		Short: "Record what happened to a catalog refresh whose outcome is unknown",
		Long: `A catalog refresh whose write or reload lost its acknowledgment is unknown:
it is never retried, and no further refresh of its worker runs. Resolve
refresh records whether the worker took it (applied: its configuration
has the entry; not-applied: it has not), who says so and how they know.
It sends nothing: the worker is refreshed again by the next apply that
changes its tools, or nlx refresh. The actor must be a host operator or an
admin of the workspace in the applied state.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			return a.withState(ctx, func(db *state.DB) error {
				o := state.RefreshOutcome(outcome)
				switch o {
				case state.RefreshOutcomeApplied, state.RefreshOutcomeNotApplied:
				default:
					return reason.New(reason.InvalidUsage, "--outcome %q: want applied or not-applied", outcome)
				}
				if err := resolver(ctx, db, actor, why, key); err != nil {
					return err
				}
				r, err := db.Refresh(ctx, args[0])
				if err != nil {
					return err
				}
				if err := operatorOrAdmin(ctx, db, actor, r.Workspace); err != nil {
					return err
				}
				if err := db.ResolveRefresh(ctx, r.ID, o, actor, why); err != nil {
					return err
				}
				return a.say(versionResolveRefresh, map[string]any{"refresh": r.ID, "launch": r.LaunchID, "outcome": o, "actor": actor},
					"Resolved refresh %s of launch %s as %s: its worker may be refreshed again; nothing was sent.", r.ID, r.LaunchID, o)
			})
		},
	}
	resolveFlags(cmd, "applied or not-applied", &outcome, &actor, &why, &key)
	return cmd
}
