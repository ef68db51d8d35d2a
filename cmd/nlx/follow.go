package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/nlx-dev/nlx/internal/atomicfile"
	"github.com/nlx-dev/nlx/internal/reason"
	"github.com/nlx-dev/nlx/publish"
	"github.com/nlx-dev/nlx/reconcile"
	"github.com/nlx-dev/nlx/state"
)

func newStateExportCmd(a *app) *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "export [--out FILE]",
		Short: "Write the state's snapshot: what a plan is made from, nothing secret",
		Long: `Export writes the applied state as nlx plan --state-from reads it: lineage,
serial, every resource's spec, hash and status, the unknown outcomes and
claims, the held imports, and basis, the content hash of all of it. Specs
hold secret references, never values. A plan made from it records its
basis; apply refuses a plan whose basis is not the state's at that serial.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			return a.readState(ctx, func(db *state.DB) error {
				snap, err := db.Snapshot(ctx)
				if err != nil {
					return err
				}
				data, basis, err := reconcile.EncodeSnapshot(snap)
				if err != nil {
					return err
				}
				if out == "" || out == "-" {
					_, err := a.io.Out.Write(data)
					return err
				}
				if err := atomicfile.Write(out, data, 0o600); err != nil {
					return err
				}
				fmt.Fprintf(a.io.Err, "Exported state %s serial %d (%d resources, basis %s) to %s\n", snap.Lineage, snap.Serial, len(snap.Resources), basis, out)
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "write to `FILE` (default stdout)")
	return cmd
}

func newStatePublishCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "publish REF",
		Short: "Push the state's snapshot to a registry, for plans made in CI",
		Long: `Publish pushes what nlx state export writes to registry REF as an OCI
artifact (artifactType application/vnd.nlx.state.v1), for nlx plan
--state-from REF on a machine with no access to the host. nlx serve
--publish REF does it after every apply it sees.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			return a.readState(ctx, func(db *state.DB) error {
				digest, snap, basis, err := publishState(ctx, db, args[0])
				if err != nil {
					return err
				}
				return a.say(versionStatePublish, map[string]any{"ref": args[0], "digest": digest, "lineage": snap.Lineage, "serial": snap.Serial, "basis": basis, "resources": len(snap.Resources)},
					"Published state %s serial %d (%d resources, basis %s) to %s@%s", snap.Lineage, snap.Serial, len(snap.Resources), basis, publish.Repository(args[0]), digest)
			})
		},
	}
}

func newPromoteCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "promote SRC DST",
		Short: "Point a registry tag at a pushed plan (on merge: the tag nlx follow watches)",
		Long: `Promote points DST (a tag in the same repository) at the plan SRC refers to,
after reading it as a plan: no blob is uploaded again, and the signed
approvals attached to the plan stay attached (they refer to its digest).`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			pp, err := pullPlan(ctx, args[0])
			if err != nil {
				return err
			}
			if err := publish.Tag(ctx, pp.Ref, args[1]); err != nil {
				return err
			}
			return a.say(versionPromote, map[string]any{"plan": pp.Ref, "plan_hash": pp.Plan.PlanHash, "tag": args[1]},
				"%s now points at plan %s (%s)", args[1], pp.Plan.PlanHash, pp.Ref)
		},
	}
}

// FollowStatus is what one look at a followed reference found.
type FollowStatus string

// The follow statuses.
const (
	FollowApplied     FollowStatus = "applied"            // this look applied the plan
	FollowDone        FollowStatus = "already_applied"    // an earlier apply carried it out
	FollowStale       FollowStatus = "stale"              // made from another serial: never applied
	FollowAwaiting    FollowStatus = "awaiting_approvals" // risky changes lack valid approvals
	FollowRefused     FollowStatus = "refused"            // apply refused it (code says why)
	FollowEmpty       FollowStatus = "no_changes"         // the plan changes nothing
	FollowNone        FollowStatus = "no_plan"            // nothing is published at the reference
	FollowUnreachable FollowStatus = "unreachable"        // the registry could not be read
)

// followReport is one look, as nlx follow --output json prints it.
type followReport struct {
	At       string       `json:"at"`
	Ref      string       `json:"ref"`
	Plan     string       `json:"plan,omitempty"` // the digest reference read
	PlanHash string       `json:"plan_hash,omitempty"`
	Status   FollowStatus `json:"status"`
	Code     reason.Code  `json:"code,omitempty"`
	Reason   string       `json:"reason,omitempty"`
	Serial   int64        `json:"serial,omitempty"` // the state's serial after the look
}

func newFollowCmd(a *app) *cobra.Command {
	var once bool
	var interval time.Duration
	cmd := &cobra.Command{
		Use:   "follow REF [--once] [--interval D]",
		Short: "Apply the plans published at a registry reference once their approvals are attached",
		Long: `Follow polls registry REF (the tag CI moves on merge) and applies the plan
published there once every risky change carries a valid signed approval
attached to it: signature, key and role in the applied state, plan hash,
change, risk, expiry, single use. A plan that is stale, refused or short of
approvals is reported with its code and never applied; a plan is applied at
most once (the state's serial moves, and the applies table remembers it).
Pull-based: the host needs no inbound connection. Registry outages are
reported and retried at the next look.

--once looks once and exits: 0 when the plan was applied, already applied
or changes nothing; otherwise the code's exit status.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if once {
				r := followOnce(ctx, a, args[0], nil)
				if err := a.printFollow(r); err != nil {
					return err
				}
				return r.exit()
			}
			return followLoop(ctx, a, args[0], interval, a.io.Err)
		},
	}
	cmd.Flags().BoolVar(&once, "once", false, "look once, print what was found and exit")
	cmd.Flags().DurationVar(&interval, "interval", 30*time.Second, "how often to look")
	return cmd
}

// exit is the status --once exits with.
func (r followReport) exit() error {
	switch r.Status {
	case FollowApplied, FollowDone, FollowEmpty:
		return nil
	case FollowUnreachable, FollowNone:
		return exitStatus(ExitError)
	}
	if r.Code != "" {
		return exitStatus(reason.ExitOf(r.Code))
	}
	return exitStatus(ExitError)
}

func (a *app) printFollow(r followReport) error {
	return a.view.Render(document{Version: versionFollow, JSON: r, Text: func(w io.Writer) error {
		return followText(w, r)
	}})
}

func followText(w io.Writer, r followReport) error {
	what := r.Plan
	if what == "" {
		what = r.Ref
	}
	line := fmt.Sprintf("%s %s: %s", r.At, what, r.Status)
	if r.Code != "" {
		line += " (" + string(r.Code) + ")"
	}
	if r.Serial != 0 {
		line += fmt.Sprintf(", state serial %d", r.Serial)
	}
	if r.Reason != "" {
		line += "\n  " + r.Reason
	}
	_, err := fmt.Fprintln(w, line)
	return err
}

// followLoop looks every interval until ctx ends, printing a line each
// time what it found changes.
func followLoop(ctx context.Context, a *app, ref string, interval time.Duration, progress io.Writer) error {
	if interval <= 0 {
		return reason.New(reason.InvalidUsage, "--interval must be positive")
	}
	last := ""
	memo := &followMemo{}
	for {
		r := followOnce(ctx, a, ref, memo)
		if key := string(r.Status) + r.Plan + string(r.Code) + r.Reason; key != last {
			last = key
			if err := a.printFollow(r); err != nil {
				return err
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(interval):
		}
	}
}

// followMemo keeps the verdict of the last look that could not apply for
// a reason only new evidence changes (approvals missing or refused): the
// next look with the same plan, state serial and approvals reports it
// again instead of loading the config and re-deriving the plan again.
type followMemo struct {
	key    string
	report followReport
}

// followOnce looks at ref once and applies what it finds when it may;
// memo, when not nil, spares re-trying what cannot have changed.
func followOnce(ctx context.Context, a *app, ref string, memo *followMemo) followReport {
	r := followReport{At: time.Now().UTC().Format(time.RFC3339), Ref: ref}
	fail := func(s FollowStatus, err error) followReport {
		r.Status, r.Code, r.Reason = s, reason.CodeOf(err), err.Error()
		if r.Code == reason.Failure {
			r.Code = ""
		}
		return r
	}
	pctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	pp, err := pullPlan(pctx, ref)
	switch {
	case err != nil && isNotFound(err):
		r.Status, r.Reason = FollowNone, err.Error()
		return r
	case err != nil && reason.Of(err) != nil:
		return fail(FollowRefused, err)
	case err != nil:
		return fail(FollowUnreachable, err)
	}
	r.Plan, r.PlanHash = pp.Ref, pp.Plan.PlanHash
	var serial, applied int64
	var basis string
	err = a.readState(ctx, func(db *state.DB) error {
		_, s, err := db.Meta(ctx)
		serial = s
		if err != nil {
			return err
		}
		if applied, _, err = db.AppliedPlan(ctx, pp.Plan.PlanHash); err != nil || memo == nil {
			return err
		}
		snap, err := db.Snapshot(ctx)
		if err == nil {
			basis, err = snap.Basis()
		}
		return err
	})
	if err != nil && !isNoState(err) {
		return fail(FollowRefused, err)
	}
	r.Serial = serial
	switch {
	case applied != 0:
		r.Status, r.Reason = FollowDone, fmt.Sprintf("apply %d carried this plan out", applied)
		return r
	case pp.Plan.Empty():
		r.Status = FollowEmpty
		return r
	case pp.Plan.State.Serial != serial:
		r.Status, r.Code = FollowStale, reason.StalePlan
		r.Reason = fmt.Sprintf("the plan was made at state serial %d, but the state is at serial %d: it is never applied; plan again", pp.Plan.State.Serial, serial)
		return r
	}
	signed, err := attachedApprovals(pctx, pp.Ref)
	if err != nil {
		if reason.Of(err) != nil {
			return fail(FollowRefused, err)
		}
		return fail(FollowUnreachable, err)
	}
	key := fmt.Sprintf("%s %d %s", pp.Ref, serial, basis)
	for _, s := range signed {
		key += " " + s.Signature
	}
	if memo != nil && memo.key == key {
		again := memo.report
		again.At = r.At
		return again
	}
	ledger, err := applyPulled(ctx, a, pp, signed, "", true)
	if ledger != nil {
		r.Serial = ledger.SerialNow
	}
	switch {
	case err == nil:
		r.Status = FollowApplied
		r.Reason = fmt.Sprintf("%d change(s) applied with %d approval(s)", len(ledger.Entries), len(ledger.Approvals))
	case reason.CodeOf(err) == reason.ApprovalMissing:
		r = fail(FollowAwaiting, err)
	default:
		r = fail(FollowRefused, err)
	}
	// Only a refusal about the approvals is kept: a locked state or a
	// failed read is tried again.
	if memo != nil && r.Code != "" && reason.ExitOf(r.Code) == reason.ExitApproval {
		memo.key, memo.report = key, r
	}
	return r
}

func isNotFound(err error) bool { return errors.Is(err, publish.ErrNotFound) }

func isNoState(err error) bool { return errors.Is(err, state.ErrNoState) }
