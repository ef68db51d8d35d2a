package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/nlx-dev/nlx/plan"
)

func newStateCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "state",
		Short: "Inspect and repair the state",
	}
	cmd.AddCommand(newStateListCmd(a), newStateShowCmd(a), newStateUnlockCmd(a))
	return cmd
}

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

func newStateShowCmd(a *app) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "show ADDRESS",
		Short: "Show one resource as applied (kind.name)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			a.output = output
			ctx := cmd.Context()
			db, err := a.openState(ctx, true)
			if err != nil {
				return err
			}
			defer db.Close()
			r, err := db.Resource(ctx, args[0])
			if err != nil {
				return err
			}
			if r == nil {
				return plan.Refusef("not_in_state", "no resource %s in the state (addresses are kind.name, see nlx state list)", args[0])
			}
			if output == "json" {
				data, _ := json.Marshal(map[string]any{
					"format_version": 1, "address": r.Address, "kind": r.Kind, "name": r.Name, "status": r.Status,
					"serial": r.Serial, "updated_at": r.UpdatedAt, "spec_hash": r.Hash, "spec": json.RawMessage(r.Spec),
				})
				fmt.Fprintln(a.io.Out, string(data))
				return nil
			}
			var pretty bytes.Buffer
			if err := json.Indent(&pretty, r.Spec, "", "  "); err != nil {
				return fmt.Errorf("stored spec of %s: %w", r.Address, err)
			}
			fmt.Fprintf(a.io.Out, "# %s\n# status %s, written at serial %d (%s)\n# spec %s\n%s\n", r.Address, r.Status, r.Serial, r.UpdatedAt, r.Hash, pretty.String())
			return nil
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "text", "output format: text or json")
	return cmd
}

func newStateUnlockCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "unlock LOCK_ID",
		Short: "Release a state lock left by a run that is gone",
		Long: `Unlock releases the state lock with the given id (shown by the run that was
refused with state_locked). Use it only when the holder is gone: nlx takes
over a lock by itself when it can prove the holder dead on this host.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			db, err := a.openState(ctx, true)
			if err != nil {
				return err
			}
			defer db.Close()
			if err := db.Unlock(ctx, args[0]); err != nil {
				return err
			}
			fmt.Fprintf(a.io.Out, "Released state lock %s.\n", args[0])
			return nil
		},
	}
}
