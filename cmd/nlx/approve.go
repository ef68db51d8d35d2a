package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/nlx-dev/nlx/approval"
	"github.com/nlx-dev/nlx/internal/reason"
	"github.com/nlx-dev/nlx/plan"
	"github.com/nlx-dev/nlx/reconcile"
)

type approveOptions struct {
	file    string
	actor   string
	reason  string
	changes []string
	expires time.Duration
	key     string
	sign    bool
	out     string
	push    bool
}

func newApproveCmd(a *app) *cobra.Command {
	opts := &approveOptions{}
	cmd := &cobra.Command{
		Use:   "approve PLAN --actor NAME --reason TEXT [--change ADDR ...] [--sign --key KEY [--out DIR] [--push]]",
		Short: "Record a named approval of a saved plan's risky changes",
		Long: `Approve records, in the state, an approval by --actor of every risk of the
chosen changes (--change, repeatable; default every change that needs one),
for exactly this plan: its hash, each change's address and each risk.

The actor must be a host operator, or an admin of every workspace the change
is inside, in the applied state (never in the plan). Under the host's
two-person rule the plan's author cannot approve it. Approvals expire
(--expires, default 24h) and are used up by the apply that relies on them.

On the host the actor proves who they are: the calling OS user is the
actor's (host.actors in the applied state), or --key is one of the actor's
keys; anything else is actor_unproven.

With --sign nothing is recorded and no state is read: nlx signs, with --key,
one statement per risk (plan hash, change, risk, actor, reason, expiry) in
the SSH signature format (namespace nlx-approval; ssh-keygen -Y verify
checks it) and writes each into --out (default approvals/), for nlx apply
--approvals DIR. PLAN may be a registry reference (nlx plan --push); --push
attaches the signatures to it there, where nlx follow finds them. Apply
checks each against the applied state: the key is the actor's, the actor
may approve, not expired, used once.

Refusals: approver_not_admin, two_person_rule, actor_unproven, stale_plan,
lineage_mismatch, approval_not_needed, not_in_plan, and a refused change's
own code.`,
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
	keyFlag(cmd, &opts.key)
	cmd.Flags().BoolVar(&opts.sign, "sign", false, "sign the approvals with --key into --out instead of recording them in the state")
	cmd.Flags().StringVar(&opts.out, "out", "approvals", "with --sign, the `DIR` the signed approvals are written to")
	cmd.Flags().BoolVar(&opts.push, "push", false, "with --sign and a registry PLAN, attach the signatures to the plan there")
	_ = cmd.MarkFlagRequired("actor")
	_ = cmd.MarkFlagRequired("reason")
	return cmd
}

// readPlanArg reads a plan argument: a plan file, or a registry reference
// to a pushed plan.
func readPlanArg(ctx context.Context, arg string) (*plan.Plan, *pulledPlan, error) {
	if isRegistryRef(arg) {
		pp, err := pullPlan(ctx, arg)
		if err != nil {
			return nil, nil, err
		}
		return pp.Plan, pp, nil
	}
	p, err := plan.ReadFile(arg)
	return p, nil, err
}

func approveRun(ctx context.Context, a *app, opts *approveOptions) error {
	p, pulled, err := readPlanArg(ctx, opts.file)
	if err != nil {
		return err
	}
	if opts.sign {
		return approveSign(ctx, a, p, pulled, opts)
	}
	if opts.push {
		return reason.New(reason.InvalidUsage, "--push attaches signatures: it needs --sign")
	}
	db, err := a.openState(ctx, true)
	if err != nil {
		return err
	}
	defer db.Close()
	caller, err := callerOf(opts.key)
	if err != nil {
		return err
	}
	approvals, err := reconcile.Approve(ctx, db, p, reconcile.ApproveOptions{
		Actor: opts.actor, Reason: opts.reason, Changes: opts.changes, Expires: opts.expires, Caller: caller,
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

// approveSign signs one statement per risk of the chosen changes with
// --key and writes them into --out (and, with --push, attaches them to the
// plan in its registry). It reads no state: the host checks every one
// against its applied state when it applies.
func approveSign(ctx context.Context, a *app, p *plan.Plan, pulled *pulledPlan, opts *approveOptions) error {
	if opts.key == "" {
		return reason.New(reason.InvalidUsage, "--sign needs --key: the SSH private key (or, with ssh-agent, its .pub) to sign with")
	}
	if opts.push && pulled == nil {
		return reason.New(reason.InvalidUsage, "--push needs PLAN to be a registry reference (nlx plan --push)")
	}
	statements, err := reconcile.ApprovalStatements(p, reconcile.ApproveOptions{
		Actor: opts.actor, Reason: opts.reason, Changes: opts.changes, Expires: opts.expires,
	})
	if err != nil {
		return err
	}
	signer, err := approval.LoadSigner(opts.key)
	if err != nil {
		return reason.Wrap(reason.InvalidUsage, err, "--key %s", opts.key)
	}
	type item struct {
		Address   string        `json:"address"`
		Risk      plan.RiskCode `json:"risk"`
		Actor     string        `json:"actor"`
		ExpiresAt string        `json:"expires_at"`
		File      string        `json:"file"`
		Key       string        `json:"key"`
	}
	items := []item{}
	for _, ap := range statements {
		st := approval.Statement{Version: approval.StatementVersion, PlanHash: ap.PlanHash, Address: ap.Address, Risk: ap.Risk,
			Actor: ap.Actor, Reason: ap.Reason, ExpiresAt: ap.ExpiresAt.UTC().Truncate(time.Second).Format(time.RFC3339)}
		signed, err := approval.Sign(st, signer)
		if err != nil {
			return err
		}
		file, err := approval.WriteFile(opts.out, signed)
		if err != nil {
			return err
		}
		if opts.push {
			if err := attachApproval(ctx, pulled.Ref, signed); err != nil {
				return err
			}
		}
		items = append(items, item{ap.Address, ap.Risk, ap.Actor, st.ExpiresAt, file, signed.Fingerprint})
	}
	doc := struct {
		PlanHash  string `json:"plan_hash"`
		Pushed    string `json:"pushed,omitempty"`
		Approvals []item `json:"approvals"`
	}{PlanHash: p.PlanHash, Approvals: items}
	if opts.push {
		doc.Pushed = pulled.Ref
	}
	return a.view.Render(document{Version: versionApprove, JSON: doc, Text: func(w io.Writer) error {
		for _, it := range items {
			fmt.Fprintf(w, "signed %s %s by %s until %s with %s: %s\n", it.Address, it.Risk, it.Actor, it.ExpiresAt, it.Key, it.File)
		}
		where := "nlx apply --approvals " + opts.out
		if opts.push {
			where = "attached to " + pulled.Ref
		}
		fmt.Fprintf(w, "%d signed approval(s) of plan %s (%s).\n", len(items), p.PlanHash, where)
		return nil
	}})
}
