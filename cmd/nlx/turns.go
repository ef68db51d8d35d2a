package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/nlx-dev/nlx/state"
)

func newTurnsCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "turns",
		Short: "List and show provider turns: binding, providers, result, usage",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, args []string) error { return cmd.Help() },
	}
	var limit int
	list := &cobra.Command{
		Use:   "list",
		Short: "List turns, newest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			return a.readState(ctx, func(db *state.DB) error { return turnsList(ctx, a, db, limit) })
		},
	}
	list.Flags().IntVar(&limit, "limit", 50, "at most this many (0: all)")
	show := &cobra.Command{
		Use:   "show ID",
		Short: "Show one turn: its binding, requested and effective provider, result, usage and permission requests",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			return a.readState(ctx, func(db *state.DB) error { return turnsShow(ctx, a, db, args[0]) })
		},
	}
	cmd.AddCommand(list, show)
	return cmd
}

func turnsList(ctx context.Context, a *app, db *state.DB, limit int) error {
	rows, err := db.Turns(ctx, limit)
	if err != nil {
		return err
	}
	if rows == nil {
		rows = []state.TurnRow{}
	}
	return a.view.Render(document{Version: versionTurns, JSON: map[string]any{"turns": rows}, Text: func(w io.Writer) error {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "TURN\tSTARTED\tWORKSPACE\tCONNECTION\tACTOR\tPROVIDER\tSTATUS")
		for _, t := range rows {
			status := string(t.Status)
			if t.ErrorCode != "" {
				status += " (" + t.ErrorCode + ")"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", t.ID, t.StartedAt, t.Workspace, t.Connection, t.Actor, providers(t), status)
		}
		return tw.Flush()
	}})
}

// providers is the effective provider, with the requested one when a
// fallback replaced it.
func providers(t state.TurnRow) string {
	if t.RequestedProvider != t.EffectiveProvider {
		return t.EffectiveProvider + " (requested " + t.RequestedProvider + ")"
	}
	return t.EffectiveProvider
}

func turnsShow(ctx context.Context, a *app, db *state.DB, id string) error {
	t, err := db.Turn(ctx, id)
	if err != nil {
		return err
	}
	perms, err := db.Permissions(ctx, true, id)
	if err != nil {
		return err
	}
	if perms == nil {
		perms = []state.PermissionRow{}
	}
	// A turn whose resume the provider refused ran in a second launch.
	conns, err := db.Egress(ctx, slices.Compact([]string{strings.TrimSuffix(t.LaunchID, "-2"), t.LaunchID})...)
	if err != nil {
		return err
	}
	if conns == nil {
		conns = []state.EgressRow{}
	}
	calls, err := db.ToolCalls(ctx, id)
	if err != nil {
		return err
	}
	if calls == nil {
		calls = []state.ToolCallRow{}
	}
	doc := struct {
		*state.TurnRow
		Usage       json.RawMessage       `json:"usage"`
		Permissions []state.PermissionRow `json:"permissions"`
		Connections []state.EgressRow     `json:"connections"`
		ToolCalls   []state.ToolCallRow   `json:"tool_calls"`
	}{t, json.RawMessage(t.Usage), perms, conns, calls}
	return a.view.Render(document{Version: versionTurn, JSON: doc, Text: func(w io.Writer) error {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		line := fieldLine(tw)
		line("turn", t.ID)
		line("status", string(t.Status))
		line("error", strings.TrimSpace(t.ErrorCode+" "+t.ErrorMessage))
		line("workspace", t.Workspace)
		line("connection", fmt.Sprintf("%s (generation %d, %s billing, credentials of %s)", t.Connection, t.Generation, t.Billing, t.CredentialOwner))
		line("conversation", t.Conversation)
		line("actor", t.Actor)
		line("provider", providers(*t)+versionOf(t.ProviderVersion))
		line("fallback", t.FallbackReason)
		line("policy", t.Policy)
		line("launch", t.LaunchID)
		line("started", t.StartedAt)
		line("ended", t.EndedAt)
		line("usage", t.Usage)
		line("note", t.Note)
		line("stale", oneLine(t.Stale))
		tw.Flush()
		if t.Result != "" {
			fmt.Fprintf(w, "\n%s\n", strings.TrimRight(t.Result, "\n"))
		}
		if len(perms) > 0 {
			fmt.Fprintln(w, "\npermission requests:")
			permissionTable(w, perms)
		}
		if len(conns) > 0 {
			fmt.Fprintln(w, "\nconnections (inference egress):")
			tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "HOST\tPORT\tMETHOD\tDECISION\tUP\tDOWN\tREASON")
			for _, c := range conns {
				fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%d\t%d\t%s\n", c.Host, c.Port, c.Method, c.Decision, c.BytesUp, c.BytesDown, c.Reason)
			}
			tw.Flush()
		}
		if len(calls) > 0 {
			fmt.Fprintln(w, "\ntool calls:")
			tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "STARTED\tTOOL\tOUTCOME\tARGUMENTS\tREASON")
			for _, c := range calls {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", c.StartedAt, c.Tool, c.Outcome, c.ArgsDigest, c.ReasonCode)
			}
			tw.Flush()
			for _, c := range calls {
				if c.Report != "" {
					fmt.Fprintf(w, "\nreport: %s\n", c.Report)
				}
			}
		}
		return nil
	}})
}

// fieldLine writes one "key: value" line of a show view to tw, aligned;
// an empty value writes nothing.
func fieldLine(tw io.Writer) func(k, v string) {
	return func(k, v string) {
		if v != "" {
			fmt.Fprintf(tw, "%s:\t%s\n", k, v)
		}
	}
}

func versionOf(v string) string {
	if v == "" {
		return ""
	}
	return " " + v
}
