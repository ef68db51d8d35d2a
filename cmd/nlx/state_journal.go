package main

import (
	"context"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/nlx-dev/nlx/state"
)

func newStateJournalCmd(a *app) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "journal",
		Short: "List the journal of every apply, phase by phase",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			a.output = output
			ctx := cmd.Context()
			return a.readState(ctx, func(db *state.DB) error { return journalRun(ctx, a, db, output) })
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "text", "output format: text or json")
	return cmd
}

func journalRun(ctx context.Context, a *app, db *state.DB, output string) error {
	entries, err := db.Journal(ctx)
	if err != nil {
		return err
	}
	if output == "json" {
		if entries == nil {
			entries = []state.JournalEntry{}
		}
		return a.writeJSON(map[string]any{"journal": entries})
	}
	tw := tabwriter.NewWriter(a.io.Out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tAPPLY\tADDRESS\tACTION\tPHASE\tAT\tRESOLUTION")
	for _, e := range entries {
		fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%s\t%s\t%s\n", e.ID, e.ApplyID, e.Address, e.Action, e.Phase, e.At, e.Resolution)
	}
	return tw.Flush()
}
