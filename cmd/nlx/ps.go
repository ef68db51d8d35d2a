package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/nlx-dev/nlx/isolate"
	"github.com/nlx-dev/nlx/state"
	"github.com/spf13/cobra"
)

func newPsCmd(a *app) *cobra.Command {
	var all bool
	cmd := &cobra.Command{
		Use:   "ps",
		Short: "List recorded provider processes",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			return a.readState(ctx, func(db *state.DB) error { return psRun(ctx, a, db, all) })
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "also stopped launches, with their stop receipts")
	return cmd
}

func psRun(ctx context.Context, a *app, db *state.DB, all bool) error {
	rows, err := db.Processes(ctx, all)
	if err != nil {
		return err
	}
	// A launch recorded as running whose tree is proven gone was left so
	// by an nlx that died before it could stop it (nlx ps never writes:
	// the next nlx exec, or nlx stop, records its receipt).
	gone := map[string]bool{}
	for _, r := range rows {
		var id isolate.Identity
		if r.Status == state.ProcessRunning && json.Unmarshal([]byte(r.Identity), &id) == nil {
			gone[r.LaunchID], _ = isolate.Gone(id)
		}
	}
	jsonDoc := func() any {
		type item struct {
			LaunchID  string          `json:"launch_id"`
			Workspace string          `json:"workspace"`
			Status    string          `json:"status"`
			Gone      bool            `json:"gone,omitempty"` // running, but its tree is proven gone
			Identity  json.RawMessage `json:"identity"`
			Receipt   json.RawMessage `json:"receipt,omitempty"`
		}
		items := []item{}
		for _, r := range rows {
			it := item{LaunchID: r.LaunchID, Workspace: r.Workspace, Status: string(r.Status), Gone: gone[r.LaunchID], Identity: json.RawMessage(r.Identity)}
			if r.Receipt != "" {
				it.Receipt = json.RawMessage(r.Receipt)
			}
			items = append(items, it)
		}
		return (map[string]any{"processes": items})
	}()
	return a.view.Render(document{Version: versionProcesses, JSON: jsonDoc, Text: func(w io.Writer) error {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "LAUNCH\tWORKSPACE\tBACKEND\tPID\tSTARTED\tSTATUS")
		for _, r := range rows {
			var id isolate.Identity
			json.Unmarshal([]byte(r.Identity), &id)
			status := string(r.Status)
			if gone[r.LaunchID] {
				status += " (gone: nlx stopped watching it; nlx stop " + r.LaunchID + " records its receipt)"
			}
			if r.Receipt != "" {
				var rc isolate.Receipt
				if json.Unmarshal([]byte(r.Receipt), &rc) == nil {
					status += " (" + string(rc.Outcome) + ")"
				}
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", r.LaunchID, r.Workspace, id.Backend, r.PID, id.Started.UTC().Format(time.RFC3339), status)
		}
		return tw.Flush()
	}})
}
