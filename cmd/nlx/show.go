package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/nlx-dev/nlx/internal/reason"
	"github.com/nlx-dev/nlx/plan"
	"github.com/nlx-dev/nlx/state"
)

func newShowCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:         "show PLANFILE",
		Short:       "Render a saved plan",
		Long:        "Show verifies a plan file's hash and prints it as text, JSON or markdown.",
		Args:        cobra.ExactArgs(1),
		Annotations: withMarkdown,
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := plan.ReadFile(args[0])
			if err != nil {
				return err
			}
			if err := a.renderPlan(p, args[0], ""); err != nil {
				return err
			}
			if why := a.staleness(cmd.Context(), p); why != "" {
				fmt.Fprintf(a.io.Err, "\nThis plan is stale: %s. nlx apply will refuse it (%s); plan again.\n", why, reason.StalePlan)
			}
			return nil
		},
	}
	return cmd
}

// staleness says why plan p no longer matches the state ("" when it still
// does, or the state cannot be read): nlx show warns before anyone
// approves or applies it.
func (a *app) staleness(ctx context.Context, p *plan.Plan) string {
	var lineage string
	var serial int64
	err := a.readState(ctx, func(db *state.DB) error {
		var err error
		lineage, serial, err = db.Meta(ctx)
		return err
	})
	switch {
	case errors.Is(err, state.ErrNoState):
		if p.State.Lineage != "" {
			return "it was made against state " + p.State.Lineage + ", and there is no state here"
		}
		return ""
	case err != nil:
		return ""
	case lineage != p.State.Lineage:
		return fmt.Sprintf("it was made against state %s, not this one (%s)", orNone(p.State.Lineage), lineage)
	case serial != p.State.Serial:
		return fmt.Sprintf("it was made at serial %d and the state is at serial %d", p.State.Serial, serial)
	}
	return ""
}
