package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/nlx-dev/nlx/plan"
)

func newShowCmd(a *app) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "show PLANFILE",
		Short: "Render a saved plan",
		Long:  "Show verifies a plan file's hash and prints it as text, JSON or markdown.",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			a.output = output
			format, err := plan.ParseFormat(output)
			if err != nil {
				return err
			}
			p, err := plan.ReadFile(args[0])
			if err != nil {
				return err
			}
			if err := (plan.View{Format: format, Color: a.color()}).Render(a.io.Out, p); err != nil {
				return fmt.Errorf("print plan: %w", err)
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "text", "output format: text, json or markdown")
	return cmd
}
