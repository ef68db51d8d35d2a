package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/nlx-dev/nlx/isolate"
	"github.com/nlx-dev/nlx/provision"
	"github.com/nlx-dev/nlx/reconcile/state"
)

func newPsCmd(a *app) *cobra.Command {
	var output string
	var all bool
	cmd := &cobra.Command{
		Use:   "ps",
		Short: "List recorded provider processes",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			a.output = output
			ctx := cmd.Context()
			return a.readState(ctx, func(db *state.DB) error { return psRun(ctx, a, db, all, output) })
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "also stopped launches, with their stop receipts")
	cmd.Flags().StringVarP(&output, "output", "o", "text", "output format: text or json")
	return cmd
}

func psRun(ctx context.Context, a *app, db *state.DB, all bool, output string) error {
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
		if r.Status == "running" && json.Unmarshal([]byte(r.Identity), &id) == nil {
			gone[r.LaunchID], _ = isolate.Gone(id)
		}
	}
	if output == "json" {
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
			it := item{LaunchID: r.LaunchID, Workspace: r.Workspace, Status: r.Status, Gone: gone[r.LaunchID], Identity: json.RawMessage(r.Identity)}
			if r.Receipt != "" {
				it.Receipt = json.RawMessage(r.Receipt)
			}
			items = append(items, it)
		}
		return a.writeJSON(map[string]any{"processes": items})
	}
	tw := tabwriter.NewWriter(a.io.Out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "LAUNCH\tWORKSPACE\tBACKEND\tPID\tSTARTED\tSTATUS")
	for _, r := range rows {
		var id isolate.Identity
		json.Unmarshal([]byte(r.Identity), &id)
		status := r.Status
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
}

func newStopCmd(a *app) *cobra.Command {
	var grace time.Duration
	cmd := &cobra.Command{
		Use:   "stop LAUNCH_ID",
		Short: "Stop a recorded provider process and its whole tree",
		Long: `Stop sends SIGTERM to the launch's process tree (only while its pid still
has the recorded start time: a recycled pid is never signalled), waits up
to --grace, then kills everything left in its cgroup. Once the tree is
proven gone it writes a stop receipt and releases the identity.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			return a.withState(ctx, func(db *state.DB) error {
				row, err := db.Process(ctx, args[0])
				if err != nil {
					return err
				}
				if row.Status != "running" {
					return fmt.Errorf("launch %s already stopped at %s", args[0], row.StoppedAt)
				}
				var id isolate.Identity
				if err := json.Unmarshal([]byte(row.Identity), &id); err != nil {
					return fmt.Errorf("launch %s: %w", args[0], err)
				}
				rc, err := isolate.Stop(ctx, id, grace, &processRecorder{db: db})
				if err != nil {
					return err
				}
				fmt.Fprintf(a.io.Out, "Stopped %s: %s (%d terminated, %d killed).\n", args[0], rc.Outcome, rc.Terminated, rc.Killed)
				return nil
			})
		},
	}
	cmd.Flags().DurationVar(&grace, "grace", 10*time.Second, "how long the tree may take to end after SIGTERM")
	return cmd
}

func newDoctorCmd(a *app) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Report what this host can enforce for provider processes",
		Long: `Doctor checks namespaces, bubblewrap and runc (present and working), the
cgroup mode and its memory, pids and cpu controllers, and the architecture,
and says how to fix each gap. It exits 0 only when a provider can be
launched safely.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			a.output = output
			r := isolate.Doctor(cmd.Context())
			r.Findings = append(r.Findings, providerUserFinding())
			if output == "json" {
				if err := a.writeJSON(map[string]any{"can_launch": r.CanLaunch(), "report": r}); err != nil {
					return err
				}
			} else {
				printDoctor(a, r)
			}
			if !r.CanLaunch() || !r.Findings[len(r.Findings)-1].OK {
				a.jsonReported = true
				return &isolate.Refusal{Code: "cannot_launch", Msg: "this host cannot launch a provider safely; fix the gaps above"}
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "text", "output format: text or json")
	return cmd
}

func printDoctor(a *app, r isolate.Report) {
	fmt.Fprintf(a.io.Out, "architecture %s, kernel %s, cgroups %s\n\n", r.Arch, r.Kernel, r.CgroupMode)
	tw := tabwriter.NewWriter(a.io.Out, 0, 4, 2, ' ', 0)
	for _, f := range r.Findings {
		mark := "ok"
		if !f.OK {
			mark = "NO"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", mark, f.Name, f.Detail)
		if !f.OK && f.Fix != "" {
			fmt.Fprintf(tw, "\t\tfix: %s\n", f.Fix)
		}
	}
	tw.Flush()
	if r.CanLaunch() && r.Findings[len(r.Findings)-1].OK {
		fmt.Fprintln(a.io.Out, "\nA provider can be launched safely on this host.")
	}
}

// providerUserFinding reports who providers run as (last of the findings).
func providerUserFinding() isolate.Finding {
	f := isolate.Finding{Name: "provider.user"}
	if os.Geteuid() != 0 {
		f.OK, f.Detail = true, fmt.Sprintf("nlx is not root: providers run as its own user (uid %d)", os.Geteuid())
		return f
	}
	o, err := provision.FindProviderUser()
	switch {
	case err != nil:
		f.Detail = err.Error()
		f.Fix = "create it (useradd --system --user-group --no-create-home --shell /usr/sbin/nologin NAME) or set NLX_PROVIDER_USER to a user (or UID:GID) that is not root"
	case o == nil:
		f.OK, f.Detail = true, provision.DefaultProviderUser+" does not exist yet: nlx creates it at the first launch or apply"
	default:
		f.OK, f.Detail = true, fmt.Sprintf("providers run as %s (uid %d, gid %d)", o.Name, o.UID, o.GID)
	}
	return f
}
