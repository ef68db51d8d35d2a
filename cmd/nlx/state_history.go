package main

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/nlx-dev/nlx/reconcile/state"
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
			db, err := a.openState(ctx, true)
			if err != nil {
				return err
			}
			defer db.Close()
			applies, err := db.History(ctx)
			if err != nil {
				return err
			}
			if output == "json" {
				if applies == nil {
					applies = []state.ApplyRecord{}
				}
				data, _ := json.Marshal(struct {
					FormatVersion int                 `json:"format_version"`
					Applies       []state.ApplyRecord `json:"applies"`
				}{1, applies})
				fmt.Fprintln(a.io.Out, string(data))
				return nil
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
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "text", "output format: text or json")
	return cmd
}
