package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/nlx-dev/nlx/plan"
	"github.com/nlx-dev/nlx/reconcile"
)

type approveOptions struct {
	file    string
	actor   string
	reason  string
	changes []string
	expires time.Duration
}

func newApproveCmd(a *app) *cobra.Command {
	opts := &approveOptions{}
	cmd := &cobra.Command{
		Use:   "approve PLANFILE --actor NAME --reason TEXT [--change ADDR ...]",
		Short: "Record a named approval of a saved plan's risky changes",
		Long: `Approve records, in the state, an approval by --actor of every risk of the
chosen changes (--change, repeatable; default every change that needs one),
for exactly this plan: its hash, each change's address and each risk.

The actor must be a host operator, or an admin of every workspace the change
is inside, in the applied state (never in the plan). Under the host's
two-person rule the plan's author cannot approve it. Approvals expire
(--expires, default 24h) and are used up by the apply that relies on them.

Refusals: approver_not_admin, two_person_rule, stale_plan, lineage_mismatch,
approval_not_needed, not_in_plan, and a refused change's own code.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.file = args[0]
			return approveRun(cmd.Context(), a, opts)
		},
	}
	cmd.Flags().StringVar(&opts.actor, "actor", "", "who approves (required)")
	cmd.Flags().StringVar(&opts.reason, "reason", "", "why this is safe (required)")
	cmd.Flags().StringArrayVar(&opts.changes, "change", nil, "approve only this change `ADDRESS` (repeatable)")
	cmd.Flags().DurationVar(&opts.expires, "expires", 24*time.Hour, "how long the approval stays valid")
	_ = cmd.MarkFlagRequired("actor")
	_ = cmd.MarkFlagRequired("reason")
	return cmd
}

func approveRun(ctx context.Context, a *app, opts *approveOptions) error {
	p, err := plan.ReadFile(opts.file)
	if err != nil {
		return err
	}
	db, err := a.openState(ctx, true)
	if err != nil {
		return err
	}
	defer db.Close()
	approvals, err := reconcile.Approve(ctx, db, p, reconcile.ApproveOptions{
		Actor: opts.actor, Reason: opts.reason, Changes: opts.changes, Expires: opts.expires,
	})
	if err != nil {
		return err
	}
	jsonDoc := func() any {
		type item struct {
			Address   string        `json:"address"`
			Risk      plan.RiskCode `json:"risk"`
			Actor     string        `json:"actor"`
			ExpiresAt string        `json:"expires_at"`
		}
		items := []item{}
		for _, ap := range approvals {
			items = append(items, item{ap.Address, ap.Risk, ap.Actor, ap.ExpiresAt.UTC().Format(time.RFC3339)})
		}
		return (struct {
			PlanHash  string `json:"plan_hash"`
			Approvals []item `json:"approvals"`
		}{p.PlanHash, items})
	}()
	return a.view.Render(document{Version: versionApprove, JSON: jsonDoc, Text: func(w io.Writer) error {
		for _, ap := range approvals {
			fmt.Fprintf(w, "approved %s %s by %s until %s\n", ap.Address, ap.Risk, ap.Actor, ap.ExpiresAt.UTC().Format(time.RFC3339))
		}
		fmt.Fprintf(w, "%d approval(s) recorded for plan %s.\n", len(approvals), p.PlanHash)
		return nil
	}})
}
