package main

import (
	"github.com/spf13/cobra"

	"github.com/nlx-dev/nlx/schema"
)

func newSchemaCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "schema",
		Short: "Work with the nlx configuration schema",
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "export",
		Short: "Print the CUE schema nlx checks configs with",
		Long: `Export prints the embedded schema as a standalone CUE file, so that the cue
tool itself can check a config's structure:

  nlx schema export > nlx_schema.cue
  cue export ./config --out json | cue vet -c -d '#Config' nlx_schema.cue json: -

Cross-references (a job's connection belongs to its workspace, ...),
credentials in env, sizes and skill packages are checked by nlx validate,
not by the schema alone; nlx validate never prints a secret value.`,
		Args:        cobra.NoArgs,
		Annotations: textOnly,
		RunE: func(cmd *cobra.Command, args []string) error {
			_, err := a.io.Out.Write(schema.Export())
			return err
		},
	})
	return cmd
}
