package main

import (
	"github.com/spf13/cobra"

	"github.com/nlx-dev/nlx/state"
)

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
			return a.withState(ctx, func(db *state.DB) error {
				if err := db.Unlock(ctx, args[0]); err != nil {
					return err
				}
				return a.say(versionStateUnlock, map[string]any{"released": args[0]}, "Released state lock %s.", args[0])
			})
		},
	}
}
