package main

import (
	"github.com/spf13/cobra"

	"github.com/nlx-dev/nlx/reconcile"
	"github.com/nlx-dev/nlx/state"
)

func newResolveCmd(a *app) *cobra.Command {
	var outcome, actor, reason, key string
	cmd := &cobra.Command{
		Use:   "resolve ADDRESS --outcome applied|not-applied --actor NAME --reason TEXT",
		Short: "Record what happened to an effect whose outcome is unknown",
		Long: `An effect an apply dispatched without recording its outcome (the process
died) is unknown: nlx never carries it out again, and every plan touching
that resource carries unknown_claim until someone who knows resolves it.

--outcome applied records in the state what was dispatched, as if the apply
had committed it; not-applied records that nothing happened, so the next
plan does it again. Resolve never carries anything out. The actor must be a
host operator or an admin of the resource's workspace in the applied state,
and prove it: the calling OS user is the actor's, or --key is one of the
actor's keys (host.actors); else actor_unproven.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			return a.withState(ctx, func(db *state.DB) error {
				caller, err := callerOf(key)
				if err != nil {
					return err
				}
				n, serial, err := reconcile.Resolve(ctx, db, args[0], outcome, actor, reason, caller)
				if err != nil {
					return err
				}
				return a.say(versionResolve, map[string]any{"address": args[0], "outcome": outcome, "resolved": n, "serial": serial},
					"Resolved %d unknown outcome(s) of %s as %s. State serial %d.", n, args[0], outcome, serial)
			})
		},
	}
	cmd.AddCommand(newResolveClaimCmd(a), newResolveRefreshCmd(a))
	resolveFlags(cmd, "applied or not-applied", &outcome, &actor, &reason, &key)
	return cmd
}

// resolveFlags declares the flags every resolve command takes: the
// outcome (outcomes names its values), who resolves, how they know, and the
// key that proves the actor.
func resolveFlags(cmd *cobra.Command, outcomes string, outcome, actor, why, key *string) {
	cmd.Flags().StringVar(outcome, "outcome", "", outcomes+" (required)")
	cmd.Flags().StringVar(actor, "actor", "", "who resolves (required)")
	cmd.Flags().StringVar(why, "reason", "", "how you know (required)")
	keyFlag(cmd, key)
	for _, f := range []string{"outcome", "actor", "reason"} {
		_ = cmd.MarkFlagRequired(f)
	}
}
