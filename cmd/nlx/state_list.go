package main

import (
	"encoding/json"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"
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
			db, err := a.openState(ctx, true)
			if err != nil {
				return err
			}
			defer db.Close()
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
				data, _ := json.Marshal(struct {
					FormatVersion int    `json:"format_version"`
					Lineage       string `json:"lineage"`
					Serial        int64  `json:"serial"`
					Resources     []item `json:"resources"`
				}{1, lineage, serial, items})
				fmt.Fprintln(a.io.Out, string(data))
				return nil
			}
			fmt.Fprintf(a.io.Err, "state %s: lineage %s, serial %d, %d resources\n", db.Path(), lineage, serial, len(rows))
			tw := tabwriter.NewWriter(a.io.Out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ADDRESS\tSTATUS\tSERIAL\tSPEC HASH")
			for _, r := range rows {
				fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", r.Address, r.Status, r.Serial, shortHash(r.Hash))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "text", "output format: text or json")
	return cmd
}

func shortHash(h string) string {
	if len(h) > 19 {
		return h[:19]
	}
	return h
}
