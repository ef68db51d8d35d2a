package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/nlx-dev/nlx/internal/reason"
	"github.com/nlx-dev/nlx/state"
)

func newStateShowCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "show ADDRESS",
		Short: "Show one resource as applied (kind.name)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			return a.readState(ctx, func(db *state.DB) error { return showStateRun(ctx, a, db, args[0]) })
		},
	}
	return cmd
}

func showStateRun(ctx context.Context, a *app, db *state.DB, address string) error {
	r, err := db.Resource(ctx, address)
	if err != nil {
		return err
	}
	if r == nil {
		return reason.New(reason.NotInState, "no resource %s in the state (addresses are kind.name, see nlx state list)", address)
	}
	jsonDoc := func() any {
		return (map[string]any{
			"address": r.Address, "kind": r.Kind, "name": r.Name, "status": r.Status,
			"serial": r.Serial, "updated_at": r.UpdatedAt, "spec_hash": r.Hash, "spec": json.RawMessage(r.Spec),
		})
	}()
	return a.view.Render(document{Version: versionStateShow, JSON: jsonDoc, Text: func(w io.Writer) error {
		var pretty bytes.Buffer
		if err := json.Indent(&pretty, r.Spec, "", "  "); err != nil {
			return fmt.Errorf("stored spec of %s: %w", r.Address, err)
		}
		fmt.Fprintf(w, "# %s\n# status %s, written at serial %d (%s)\n# spec %s\n%s\n", r.Address, r.Status, r.Serial, r.UpdatedAt, r.Hash, pretty.String())
		return nil
	}})
}
