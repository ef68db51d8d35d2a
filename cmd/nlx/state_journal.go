package main

import (
	"encoding/json"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/nlx-dev/nlx/reconcile/state"
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
			db, err := a.openState(ctx, true)
			if err != nil {
				return err
			}
			defer db.Close()
			entries, err := db.Journal(ctx)
			if err != nil {
				return err
			}
			if output == "json" {
				if entries == nil {
					entries = []state.JournalEntry{}
				}
				data, _ := json.Marshal(struct {
					FormatVersion int                  `json:"format_version"`
					Journal       []state.JournalEntry `json:"journal"`
				}{1, entries})
				fmt.Fprintln(a.io.Out, string(data))
				return nil
			}
			tw := tabwriter.NewWriter(a.io.Out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tAPPLY\tADDRESS\tACTION\tPHASE\tAT\tRESOLUTION")
			for _, e := range entries {
				fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%s\t%s\t%s\n", e.ID, e.ApplyID, e.Address, e.Action, e.Phase, e.At, e.Resolution)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "text", "output format: text or json")
	return cmd
}
