package main

import (
	"context"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/nlx-dev/nlx/reconcile/state"
)

func newStateListCmd(a *app) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the resources in the state",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			a.output = output
			ctx := cmd.Context()
			return a.withState(ctx, func(db *state.DB) error { return listRun(ctx, a, db, output) })
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "text", "output format: text or json")
	return cmd
}

func listRun(ctx context.Context, a *app, db *state.DB, output string) error {
	lineage, serial, err := db.Meta(ctx)
	if err != nil {
		return err
	}
	rows, err := db.Rows(ctx)
	if err != nil {
		return err
	}
	if output == "json" {
		type item struct {
			Address  string `json:"address"`
			Kind     string `json:"kind"`
			Name     string `json:"name"`
			Status   string `json:"status"`
			Serial   int64  `json:"serial"`
			SpecHash string `json:"spec_hash"`
		}
		items := []item{}
		for _, r := range rows {
			items = append(items, item{r.Address, string(r.Kind), r.Name, r.Status, r.Serial, r.Hash})
		}
		return a.writeJSON(struct {
			Lineage   string `json:"lineage"`
			Serial    int64  `json:"serial"`
			Resources []item `json:"resources"`
		}{lineage, serial, items})
	}
	fmt.Fprintf(a.io.Err, "state %s: lineage %s, serial %d, %d resources\n", db.Path(), lineage, serial, len(rows))
	tw := tabwriter.NewWriter(a.io.Out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ADDRESS\tSTATUS\tSERIAL\tSPEC HASH")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", r.Address, r.Status, r.Serial, shortHash(r.Hash))
	}
	return tw.Flush()
}

func shortHash(h string) string {
	if len(h) > 19 {
		return h[:19]
	}
	return h
}
