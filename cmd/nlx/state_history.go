package main

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/nlx-dev/nlx/state"
)

func newStateHistoryCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "history",
		Short: "Show every apply: plan, actor, approvals used, outcomes",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			return a.readState(ctx, func(db *state.DB) error { return historyRun(ctx, a, db) })
		},
	}
	return cmd
}

func historyRun(ctx context.Context, a *app, db *state.DB) error {
	applies, err := db.History(ctx)
	if err != nil {
		return err
	}
	jsonDoc := func() any {
		if applies == nil {
			applies = []state.ApplyRecord{}
		}
		return (map[string]any{"applies": applies})
	}()
	return a.view.Render(document{Version: versionStateHistory, JSON: jsonDoc, Text: func(w io.Writer) error {
		for _, r := range applies {
			fmt.Fprintf(w, "apply %d by %s, %s at %s: serial %d -> %d, plan %s\n",
				r.ID, r.Actor, r.Status, r.StartedAt, r.SerialBefore, r.SerialAfter, r.PlanHash)
			fmt.Fprintf(w, "  %d committed, %d failed, %d unknown\n", r.Committed, r.Failed, r.Unknown)
			for _, ap := range r.Approvals {
				fmt.Fprintf(w, "  approval: %s\n", ap)
			}
			if r.Error != "" {
				fmt.Fprintf(w, "  error: %s\n", r.Error)
			}
		}
		return nil
	}})
}
