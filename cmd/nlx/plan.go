package main

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/nlx-dev/nlx"
	"github.com/nlx-dev/nlx/images"
	"github.com/nlx-dev/nlx/plan"
	"github.com/nlx-dev/nlx/preserve"
	"github.com/nlx-dev/nlx/reconcile"
	"github.com/nlx-dev/nlx/schema"
)

type planOptions struct {
	dir          string
	out          string
	detailedExit bool
	actor        string
	key          string
	stateFrom    string
	push         string
}

func newPlanCmd(a *app) *cobra.Command {
	opts := &planOptions{}
	cmd := &cobra.Command{
		Use:   "plan [DIR]",
		Short: "Show what applying the config in DIR would change",
		Long: `Plan loads the CUE package in DIR (default "."), diffs it against the state and
prints the changes. --out saves the plan for nlx apply; the saved plan binds
the exact config bytes and the state serial it was made from.`,
		Args:        cobra.MaximumNArgs(1),
		Annotations: withMarkdown,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.dir = "."
			if len(args) == 1 {
				opts.dir = args[0]
			}
			return planRun(cmd.Context(), a, opts)
		},
	}
	cmd.Flags().StringVar(&opts.out, "out", "", "write the plan file to `FILE`")
	cmd.Flags().BoolVar(&opts.detailedExit, "detailed-exitcode", false, "exit 2 when there are changes, 3 when some need approval or are refused (0 none, 1 error)")
	cmd.Flags().StringVar(&opts.actor, "actor", "", "who makes the plan, for the two-person rule (default $NLX_ACTOR, else the actor the OS user proves, else the OS user)")
	cmd.Flags().StringVar(&opts.stateFrom, "state-from", "", "plan against a published state: a registry `REF` (nlx state publish) or a file (nlx state export --out), instead of the local state")
	cmd.Flags().StringVar(&opts.push, "push", "", "push the plan, with its config inputs, to registry `REF`, for nlx approve --sign --push and nlx follow")
	keyFlag(cmd, &opts.key)
	return cmd
}

func planRun(ctx context.Context, a *app, opts *planOptions) error {
	p, _, err := makePlan(ctx, a, planRequest{dir: opts.dir, actor: opts.actor, key: opts.key, stateFrom: opts.stateFrom})
	if err != nil {
		return err
	}
	pushed := ""
	if opts.push != "" {
		if pushed, err = pushPlan(ctx, p, opts.dir, opts.push); err != nil {
			return err
		}
		fmt.Fprintf(a.io.Err, "Pushed the plan to %s\n", pushed)
	}
	if a.view.Format() == formatText {
		// The text view does not show plan_hash: print it while the plan
		// file is encoded and written.
		written := make(chan error, 1)
		go func() {
			if opts.out == "" {
				written <- nil
				return
			}
			written <- plan.WriteFile(opts.out, p)
		}()
		rerr := a.renderPlan(p, opts.out, pushed)
		if err := <-written; err != nil {
			return err
		}
		if rerr != nil {
			return rerr
		}
	} else {
		if opts.out != "" {
			if err := plan.WriteFile(opts.out, p); err != nil {
				return err
			}
		} else if _, err := plan.Encode(p); err != nil { // fills plan_hash for the views
			return err
		}
		if err := a.renderPlan(p, opts.out, pushed); err != nil {
			return err
		}
	}
	if !p.Empty() {
		planHint(a.io.Err, p, opts.out)
	}
	// A refused change means the config can never be applied: fail the
	// pipeline whatever the flags.
	if p.Summary.Refused > 0 {
		return exitStatus(ExitApproval)
	}
	if opts.detailedExit && p.Summary.Gated > 0 {
		return exitStatus(ExitApproval)
	}
	if opts.detailedExit && !p.Empty() {
		return exitStatus(ExitChanges)
	}
	return nil
}

// planHint tells what comes next, in the order it must happen: a refused
// change is the config's to fix; approvals come before apply, which
// refuses until they are recorded; then apply exactly the saved plan.
func planHint(w io.Writer, p *plan.Plan, file string) {
	switch {
	case p.Summary.Refused > 0:
		fmt.Fprintf(w, "\nThe plan holds %d refused change(s): nlx apply refuses it whatever is approved; change the config and plan again.\n", p.Summary.Refused)
	case file == "" && p.Summary.Gated > 0:
		fmt.Fprintf(w, "\n%d change(s) need a named approver, and only a saved plan can be approved: plan again with --out FILE.\n", p.Summary.Gated)
	case file == "":
	case p.Summary.Gated > 0:
		fmt.Fprintf(w, "\nSaved the plan to %s. nlx apply refuses it until %d change(s) are approved by a named approver:\n", file, p.Summary.Gated)
		for i := range p.Changes {
			if c := &p.Changes[i]; c.NeedsApproval() && len(c.Refused) == 0 {
				fmt.Fprintf(w, "  %s\n", plan.ApproveCommand(file, c))
			}
		}
		fmt.Fprintf(w, "Then apply exactly this plan:\n  nlx apply %s\n", plan.ShellQuote(file))
	default:
		fmt.Fprintf(w, "\nSaved the plan to %s. To apply exactly this plan, run:\n  nlx apply %s\n", file, plan.ShellQuote(file))
	}
}

// planDocument is plan p in every view; planFile is where it was saved.
func (a *app) planDocument(p *plan.Plan, planFile, pushed string) document {
	in := func(f plan.Format, color bool) func(io.Writer) error {
		return func(w io.Writer) error {
			return plan.View{Format: f, Color: color, PlanFile: planFile, Pushed: pushed}.Render(w, p)
		}
	}
	return document{
		EncodeJSON: in(plan.FormatJSON, false),
		Text:       in(plan.FormatText, a.color()),
		Markdown:   in(plan.FormatMarkdown, false),
	}
}

// renderPlan prints p in the command's view.
func (a *app) renderPlan(p *plan.Plan, planFile, pushed string) error {
	if err := a.view.Render(a.planDocument(p, planFile, pushed)); err != nil {
		return fmt.Errorf("print plan: %w", err)
	}
	return nil
}

// makePlan loads the config in dir and diffs it against the state, read
// only; it returns the config too, which apply DIR derives the plan from
// again under the lock. The state is read while CUE evaluates.
func makePlan(ctx context.Context, a *app, req planRequest) (*plan.Plan, *schema.Config, error) {
	dir := req.dir
	type snapshot struct {
		snap *reconcile.Snapshot
		err  error
	}
	done := make(chan snapshot, 1)
	go func() {
		if req.stateFrom != "" {
			snap, err := loadSnapshot(ctx, req.stateFrom)
			done <- snapshot{snap, err}
			return
		}
		snap, err := a.planSnapshot(ctx)
		done <- snapshot{snap, err}
	}()
	// CUE evaluates in a child process under a budget: its memory is the
	// child's and gone when it exits, so none of it adds to the plan's.
	cfg, err := schema.LoadBudgeted(ctx, dir, schema.DefaultBudget())
	st := <-done
	if err != nil {
		return nil, nil, err
	}
	if st.err != nil {
		return nil, nil, st.err
	}
	pins, err := resolveImages(ctx, a, cfg, dir)
	if err != nil {
		return nil, nil, err
	}
	imports, err := preserve.Imports(ctx, cfg, nil)
	if err != nil {
		return nil, nil, err
	}
	actor, proof, err := planActor(st.snap, req)
	if err != nil {
		return nil, nil, err
	}
	p, err := reconcile.Plan(reconcile.PlanInput{Config: cfg, Snapshot: st.snap, ConfigDir: dir, NlxVersion: nlxVersion(), Actor: actor, ActorProof: proof, Images: pins, Imports: imports})
	return p, cfg, err
}

// planRequest is what a plan is made from: the config directory, the
// actor who makes it (and the key that proves them), and the state: the
// local one, or a published one (--state-from).
type planRequest struct {
	dir, actor, key, stateFrom string
}

// planActor names who makes the plan and, when the caller proves it in the
// state planned against, how. An unproven author is still recorded: under
// the two-person rule it only keeps that name from approving the plan.
func planActor(snap *reconcile.Snapshot, req planRequest) (string, string, error) {
	auth, err := reconcile.NewAuthority(snap.Resources)
	if err != nil {
		return "", "", err
	}
	c, err := callerOf(req.key)
	if err != nil {
		return "", "", err
	}
	actor := actorFor(req.actor, auth, c)
	proof, err := auth.Prove(actor, c)
	if err != nil && req.key != "" {
		return "", "", err // a key given to prove the author must prove them
	}
	return actor, proof, nil
}

// resolveImages pins every image a workspace uses: built ones are built
// (from the layer cache when unchanged) into the image store.
func resolveImages(ctx context.Context, a *app, cfg *schema.Config, dir string) (map[string]plan.ImagePin, error) {
	if len(cfg.Images) == 0 {
		return nil, nil
	}
	store, epoch, err := a.buildInputs()
	if err != nil {
		return nil, err
	}
	prog := a.newProgress()
	defer prog.Wait()
	r := &images.Resolver{Store: store, ConfigDir: dir, Self: nlx.Source, SelfEmbedded: true, Epoch: epoch, Progress: prog.Step}
	return r.Resolve(ctx, cfg)
}
