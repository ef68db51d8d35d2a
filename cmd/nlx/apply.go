package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/nlx-dev/nlx/host"
	"github.com/nlx-dev/nlx/images"
	"github.com/nlx-dev/nlx/plan"
	"github.com/nlx-dev/nlx/reconcile"
	"github.com/nlx-dev/nlx/schema"
	"github.com/nlx-dev/nlx/state"
)

// loadConfig evaluates the config in dir for apply's re-derivation of a
// plan, under the same budget as nlx plan.
func loadConfig(ctx context.Context, dir string) (*schema.Config, error) {
	return schema.LoadBudgeted(ctx, dir, schema.DefaultBudget())
}

type applyOptions struct {
	batchSize int
	target    string
	configDir string
	output    string
	yes       bool
	actor     string
}

func newApplyCmd(a *app) *cobra.Command {
	opts := &applyOptions{}
	cmd := &cobra.Command{
		Use:   "apply [PLANFILE|DIR]",
		Short: "Carry out a saved plan, or plan and apply a config directory",
		Long: `Apply carries out PLANFILE exactly, without asking: it refuses a plan whose
file was changed (plan_hash_mismatch), whose state is another one
(lineage_mismatch) or has moved on (stale_plan), or whose config changed
(config_changed). Nothing is written when apply refuses.

Given a DIR (default "."), apply plans, prints the plan and asks for
confirmation; --yes answers it. Without a terminal and without --yes it
refuses (confirmation_required).`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.target = "."
			if len(args) == 1 {
				opts.target = args[0]
			}
			a.output = opts.output
			return applyRun(cmd.Context(), a, opts)
		},
	}
	cmd.Flags().StringVar(&opts.configDir, "config", "", "config `DIR` a plan file is checked against (default: the directory it was planned from)")
	cmd.Flags().StringVarP(&opts.output, "output", "o", "text", "output format: text or json")
	cmd.Flags().BoolVarP(&opts.yes, "yes", "y", false, "apply a directory's plan without asking (never approves a risk)")
	cmd.Flags().StringVar(&opts.actor, "actor", "", "who applies (default $NLX_ACTOR, else $USER)")
	// Smaller batches give crash tests a journal step between more changes.
	cmd.Flags().IntVar(&opts.batchSize, "batch-size", reconcile.DefaultBatchSize, "state-only changes per transaction")
	_ = cmd.Flags().MarkHidden("batch-size")
	return cmd
}

func applyRun(ctx context.Context, a *app, opts *applyOptions) error {
	if opts.output != "text" && opts.output != "json" {
		return fmt.Errorf("unknown output format %q (want text or json)", opts.output)
	}
	info, err := os.Stat(opts.target)
	if err != nil {
		return fmt.Errorf("apply: %w", err)
	}
	var (
		p         *plan.Plan
		configDir string
		planFile  string
		db        *state.DB
		// load gives the config the plan is derived from again, under
		// the lock: the one just planned from, or the plan file's.
		load func(ctx context.Context) (*schema.Config, error)
	)
	if info.IsDir() {
		var cfg *schema.Config
		if p, cfg, err = makePlan(ctx, a, opts.target, actorName(opts.actor)); err != nil {
			return err
		}
		if _, err := plan.Encode(p); err != nil {
			return err
		}
		if err := confirm(a, opts, p); err != nil {
			return err
		}
		if p.Empty() {
			return nil
		}
		configDir = opts.target
		load = func(context.Context) (*schema.Config, error) { return cfg, nil }
		db, err = a.openState(ctx, p.State.Lineage != "")
	} else {
		if p, err = plan.ReadFile(opts.target); err != nil {
			return err
		}
		planFile = opts.target
		configDir = opts.configDir
		if configDir == "" {
			configDir = p.Inputs.ConfigDir
		}
		load = func(ctx context.Context) (*schema.Config, error) { return loadConfig(ctx, configDir) }
		// A plan made before there was a state creates it; any other
		// needs the state it was made against.
		db, err = a.openState(ctx, p.State.Lineage != "")
		if errors.Is(err, state.ErrNoState) {
			return plan.Refusef(reconcile.CodeLineageMismatch, "the plan was made against state lineage %s, but there is no state at %s", p.State.Lineage, mustState(a))
		}
	}
	if err != nil {
		return err
	}
	defer db.Close()
	effects := &host.Effects{WorkspaceRoot: host.DefaultWorkspaceRoot(db.Path()),
		SkillRoot: host.DefaultSkillRoot(db.Path()), ConfigDir: configDir, Owner: host.ProviderUser}
	defer effects.Close()
	store, err := a.imageStore()
	if err != nil {
		return err
	}
	ledger, err := reconcile.Apply(ctx, db, p, reconcile.ApplyOptions{ConfigDir: configDir, Config: load,
		Actor: actorName(opts.actor), Effects: effects, BatchSize: opts.batchSize, PlanFile: planFile,
		Images: &images.Checker{Store: store}})
	if ledger != nil && ledger.TookOverLock != nil {
		fmt.Fprintf(a.io.Err, "Took over the state lock from %s: that process is gone.\n", ledger.TookOverLock)
	}
	if ledger != nil {
		for _, u := range ledger.Unknown {
			fmt.Fprintf(a.io.Err, "Marked unknown: %s (%s dispatched by apply %d at %s never recorded an outcome; it will not be replayed).\n",
				u.Address, u.Action, u.ApplyID, u.At)
		}
	}
	if ledger != nil && (err == nil || ledger.SerialAfter != ledger.SerialBefore) {
		printLedger(a, opts.output, ledger, err)
	}
	return err
}

func mustState(a *app) string {
	p, _ := a.resolveState()
	return p
}

// confirm prints the plan of a directory apply and asks for "yes".
func confirm(a *app, opts *applyOptions, p *plan.Plan) error {
	// In JSON mode stdout carries only the ledger; people read the plan on
	// stderr before they answer.
	out, color := a.io.Out, a.color()
	if opts.output == "json" {
		out, color = a.io.Err, false
	}
	if opts.output == "text" || !opts.yes {
		if err := (plan.View{Format: plan.FormatText, Color: color}).Render(out, p); err != nil {
			return err
		}
	}
	if p.Empty() || opts.yes {
		return nil
	}
	if !a.io.InTerminal {
		return plan.Refusef(codeConfirmation, "no terminal to confirm on; review the plan and pass --yes, or save it with nlx plan --out and apply the file")
	}
	fmt.Fprint(a.io.Err, "\nDo you want to perform these actions?\n  Only 'yes' will be accepted to approve.\n\n  Enter a value: ")
	line, _ := bufio.NewReader(a.io.In).ReadString('\n')
	if strings.TrimSpace(line) != "yes" {
		return plan.Refusef(codeConfirmation, "apply cancelled: the answer was not yes")
	}
	return nil
}

var pastTense = map[plan.Action]string{
	plan.Create:  "created",
	plan.Update:  "updated",
	plan.Delete:  "destroyed",
	plan.Replace: "replaced",
}

// printLedger reports what the apply actually did; it runs on success and
// after a partial failure alike.
func printLedger(a *app, output string, l *reconcile.Ledger, applyErr error) {
	if output == "json" {
		type failure struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		}
		doc := struct {
			FormatVersion int `json:"format_version"`
			*reconcile.Ledger
			Complete bool     `json:"complete"`
			Error    *failure `json:"error,omitempty"`
		}{FormatVersion: 1, Ledger: l, Complete: applyErr == nil}
		if applyErr != nil {
			code, _ := classify(applyErr)
			doc.Error = &failure{code, applyErr.Error()}
			a.jsonReported = true // one document on stdout, not two
		}
		data, _ := json.Marshal(doc)
		fmt.Fprintln(a.io.Out, string(data))
		return
	}
	w := a.io.Out
	if len(l.Entries) == 0 {
		fmt.Fprintln(w, "No changes. Nothing to apply.")
		return
	}
	bw := bufio.NewWriterSize(w, 64<<10)
	defer bw.Flush()
	for _, e := range l.Entries {
		switch e.Phase {
		case reconcile.LedgerCommitted:
			fmt.Fprintf(bw, "%s: %s\n", e.Address, pastTense[e.Action])
		case reconcile.LedgerFailed:
			fmt.Fprintf(bw, "%s: FAILED: %s\n", e.Address, e.Error)
		}
	}
	for _, used := range l.Approvals {
		fmt.Fprintf(bw, "approval used: %s\n", used)
	}
	if l.Bootstrap != nil {
		fmt.Fprintf(bw, "Bootstrapped the operators from the config (the state had none): %s\n", orNone(strings.Join(l.Bootstrap, ", ")))
	}
	s := l.Summary
	if applyErr != nil {
		fmt.Fprintf(bw, "\nApply stopped. Resources: %d added, %d changed, %d destroyed; %d change(s) not applied. State serial %d.\n",
			s.Add, s.Change, s.Destroy, notApplied(l), l.SerialNow)
		if l.SerialNow != l.SerialAfter {
			fmt.Fprintf(bw, "This apply set serial %d; another run took its lock over and moved the state on since.\n", l.SerialAfter)
		}
		return
	}
	fmt.Fprintf(bw, "\nApply complete! Resources: %d added, %d changed, %d destroyed. State serial %d.\n", s.Add, s.Change, s.Destroy, l.SerialAfter)
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

func notApplied(l *reconcile.Ledger) int {
	n := 0
	for _, e := range l.Entries {
		if e.Phase != reconcile.LedgerCommitted {
			n++
		}
	}
	return n
}
