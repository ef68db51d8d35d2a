package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/nlx-dev/nlx/internal/reason"
	"github.com/nlx-dev/nlx/state"
	"github.com/nlx-dev/nlx/turn"
)

func newPermissionsCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "permissions",
		Short: "List and decide the permission requests of running turns",
		Long: `A provider's request to run a command or change files is stored before nlx
answers it, and waits for a decision. Who may decide is read from the
applied state at decision time: the actor of a personal workspace's turn,
an admin of a team workspace.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return cmd.Help() },
	}
	var all bool
	var turnID string
	list := &cobra.Command{
		Use:   "list",
		Short: "List pending permission requests (--all: every one)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			return a.readState(ctx, func(db *state.DB) error {
				rows, err := db.Permissions(ctx, all, turnID)
				if err != nil {
					return err
				}
				if rows == nil {
					rows = []state.PermissionRow{}
				}
				return a.view.Render(document{Version: versionPermissions, JSON: map[string]any{"permissions": rows},
					Text: func(w io.Writer) error { return permissionTable(w, rows) }})
			})
		},
	}
	list.Flags().BoolVar(&all, "all", false, "also decided requests")
	list.Flags().StringVar(&turnID, "turn", "", "only this turn's")
	cmd.AddCommand(list, newDecideCmd(a, true), newDecideCmd(a, false))
	return cmd
}

func newDecideCmd(a *app, allow bool) *cobra.Command {
	var actor, why, key string
	verb := "deny"
	if allow {
		verb = "allow"
	}
	cmd := &cobra.Command{
		Use:   verb + " ID --actor A [--reason R]",
		Short: map[bool]string{true: "Allow a pending permission request", false: "Deny a pending permission request"}[allow],
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if !allow && why == "" {
				return reason.New(reason.InvalidUsage, "deny needs --reason: the provider is told why")
			}
			return a.withState(ctx, func(db *state.DB) error {
				if err := proveActor(ctx, db, actor, key); err != nil {
					return err
				}
				return decide(ctx, a, db, args[0], actor, allow, why)
			})
		},
	}
	cmd.Flags().StringVar(&actor, "actor", "", "who decides (required)")
	cmd.Flags().StringVar(&why, "reason", "", "why (required to deny; the provider sees it)")
	keyFlag(cmd, &key)
	_ = cmd.MarkFlagRequired("actor")
	return cmd
}

func decide(ctx context.Context, a *app, db *state.DB, id, actor string, allow bool, why string) error {
	if err := turn.Decide(ctx, db, id, actor, allow, why); err != nil {
		return err
	}
	p, err := db.Permission(ctx, id)
	if err != nil {
		return err
	}
	return a.say(versionPermission, p, "permission %s %s by %s", p.ID, p.Status, p.DecidedBy)
}

func permissionTable(w io.Writer, rows []state.PermissionRow) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTURN\tKIND\tSUBJECT\tDECIDER\tSTATUS\tBY")
	for _, p := range rows {
		status := string(p.Status)
		if p.DecisionCode != "" {
			status += " (" + p.DecisionCode + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", p.ID, p.TurnID, p.Kind, oneLine(p.Subject), p.Decider, status, p.DecidedBy)
	}
	return tw.Flush()
}
