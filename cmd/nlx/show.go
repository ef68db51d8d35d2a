package main

import (
	"github.com/spf13/cobra"

	"github.com/nlx-dev/nlx/plan"
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
			return a.renderPlan(p, "")
		},
	}
	return cmd
}
