package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/nlx-dev/nlx/state"
)

func newStateHistoryCmd(a *app) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "history",
		Short: "Show every apply: plan, actor, approvals used, outcomes",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			a.output = output
			ctx := cmd.Context()
			return a.readState(ctx, func(db *state.DB) error { return historyRun(ctx, a, db, output) })
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "text", "output format: text or json")
	return cmd
}

func historyRun(ctx context.Context, a *app, db *state.DB, output string) error {
	applies, err := db.History(ctx)
	if err != nil {
		return err
	}
	if output == "json" {
		if applies == nil {
			applies = []state.ApplyRecord{}
		}
		return a.writeJSON(map[string]any{"applies": applies})
	}
	for _, r := range applies {
		fmt.Fprintf(a.io.Out, "apply %d by %s, %s at %s: serial %d -> %d, plan %s\n",
			r.ID, r.Actor, r.Status, r.StartedAt, r.SerialBefore, r.SerialAfter, r.PlanHash)
		fmt.Fprintf(a.io.Out, "  %d committed, %d failed, %d unknown\n", r.Committed, r.Failed, r.Unknown)
		for _, ap := range r.Approvals {
			fmt.Fprintf(a.io.Out, "  approval: %s\n", ap)
		}
		if r.Error != "" {
			fmt.Fprintf(a.io.Out, "  error: %s\n", r.Error)
		}
	}
	return nil
}
