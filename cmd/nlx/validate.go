package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/nlx-dev/nlx/schema"
)

func newValidateCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "validate [DIR]",
		Short: "Check a config without reading the state",
		Long: `Validate loads the CUE package in DIR (default "."), unifies it with the
nlx schema and checks every cross-reference. Each error names file:line:col.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir := "."
			if len(args) == 1 {
				dir = args[0]
			}
			cfg, err := schema.LoadBudgeted(cmd.Context(), dir, schema.DefaultBudget())
			if err != nil {
				return err
			}
			counts := map[string]int{
				"host": 1, "providers": len(cfg.Providers), "images": len(cfg.Images), "tools": len(cfg.Tools), "workspaces": len(cfg.Workspaces),
				"connections": len(cfg.Connections), "skills": len(cfg.Skills), "jobs": len(cfg.Jobs),
				"preservations": len(cfg.Preservations),
			}
			total := 0
			for _, n := range counts {
				total += n
			}
			return a.view.Render(document{
				Version: versionValidate,
				JSON: struct {
					Valid      bool           `json:"valid"`
					Resources  int            `json:"resources"`
					Kinds      map[string]int `json:"kinds"`
					ConfigHash string         `json:"config_hash"`
				}{true, total, counts, cfg.Inputs.Hash},
				Text: func(w io.Writer) error {
					_, err := fmt.Fprintf(w, "The configuration is valid: %s (%s).\n", plural(total, "resource"), strings.Join([]string{
						plural(1, "host"), plural(counts["providers"], "provider"), plural(counts["images"], "image"), plural(counts["tools"], "tool"),
						plural(counts["workspaces"], "workspace"), plural(counts["connections"], "connection"),
						plural(counts["skills"], "skill"), plural(counts["jobs"], "job"), plural(counts["preservations"], "preservation"),
					}, ", "))
					return err
				},
			})
		},
	}
	return cmd
}

// plural is n and noun, in the plural unless n is 1.
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
