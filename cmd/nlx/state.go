package main

import (
	"github.com/spf13/cobra"
)

func newStateCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "state",
		Short: "Inspect and repair the state",
	}
	cmd.AddCommand(newStateListCmd(a), newStateShowCmd(a), newStateUnlockCmd(a), newStateJournalCmd(a), newStateHistoryCmd(a), newStateUpgradeCmd(a), newStateExportCmd(a), newStatePublishCmd(a))
	return cmd
}
