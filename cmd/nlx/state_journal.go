package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/nlx-dev/nlx/state"
)

func newStateJournalCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "journal",
		Short: "List the journal of every apply, phase by phase",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			return a.readState(ctx, func(db *state.DB) error { return journalRun(ctx, a, db) })
		},
	}
	return cmd
}

func journalRun(ctx context.Context, a *app, db *state.DB) error {
	entries, err := db.Journal(ctx)
	if err != nil {
		return err
	}
	jsonDoc := func() any {
		if entries == nil {
			entries = []state.JournalEntry{}
		}
		return (map[string]any{"journal": entries})
	}()
	return a.view.Render(document{Version: versionStateJournal, JSON: jsonDoc, Text: func(w io.Writer) error {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tAPPLY\tADDRESS\tACTION\tPHASE\tAT\tRESOLUTION")
		for _, e := range entries {
			fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%s\t%s\t%s\n", e.ID, e.ApplyID, e.Address, e.Action, e.Phase, e.At, e.Resolution)
		}
		return tw.Flush()
	}})
}
