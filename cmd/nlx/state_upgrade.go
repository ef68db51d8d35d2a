package main

import (
	"github.com/spf13/cobra"

	"github.com/nlx-dev/nlx/state"
)

func newStateUpgradeCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "upgrade",
		Short: "Bring the state's schema up to this nlx's version",
		Long: `Upgrade applies the state migrations this nlx knows and the state lacks,
each in the same transaction, keeping its lineage and serial. Reading
commands (plan, state list, ...) never migrate a state and refuse an older
one with state_outdated; writing commands (apply, approve, resolve, exec)
upgrade it first, as this command does.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			return a.withState(ctx, func(db *state.DB) error {
				ms, err := db.Migrations(ctx)
				if err != nil {
					return err
				}
				return a.say(versionStateUpgrade, map[string]any{"state": db.Path(), "schema_version": len(ms)},
					"State %s is at schema version %d.", db.Path(), len(ms))
			})
		},
	}
}
