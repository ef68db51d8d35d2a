package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/nlx-dev/nlx/plan"
	"github.com/nlx-dev/nlx/state"
)

func newStateShowCmd(a *app) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "show ADDRESS",
		Short: "Show one resource as applied (kind.name)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			a.output = output
			ctx := cmd.Context()
			return a.readState(ctx, func(db *state.DB) error { return showStateRun(ctx, a, db, args[0], output) })
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "text", "output format: text or json")
	return cmd
}

func showStateRun(ctx context.Context, a *app, db *state.DB, address, output string) error {
	r, err := db.Resource(ctx, address)
	if err != nil {
		return err
	}
	if r == nil {
		return plan.Refusef("not_in_state", "no resource %s in the state (addresses are kind.name, see nlx state list)", address)
	}
	if output == "json" {
		return a.writeJSON(map[string]any{
			"address": r.Address, "kind": r.Kind, "name": r.Name, "status": r.Status,
			"serial": r.Serial, "updated_at": r.UpdatedAt, "spec_hash": r.Hash, "spec": json.RawMessage(r.Spec),
		})
	}
	var pretty bytes.Buffer
	if err := json.Indent(&pretty, r.Spec, "", "  "); err != nil {
		return fmt.Errorf("stored spec of %s: %w", r.Address, err)
	}
	fmt.Fprintf(a.io.Out, "# %s\n# status %s, written at serial %d (%s)\n# spec %s\n%s\n", r.Address, r.Status, r.Serial, r.UpdatedAt, r.Hash, pretty.String())
	return nil
}
