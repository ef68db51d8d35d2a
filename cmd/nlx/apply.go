package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/nlx-dev/nlx/host"
	"github.com/nlx-dev/nlx/images"
	"github.com/nlx-dev/nlx/internal/reason"
	"github.com/nlx-dev/nlx/plan"
	"github.com/nlx-dev/nlx/preserve"
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
	yes       bool
	actor     string
	approvals []string
}

func newApplyCmd(a *app) *cobra.Command {
	opts := &applyOptions{}
	cmd := &cobra.Command{
		Use:   "apply [PLANFILE|REF|DIR] [--approvals DIR]",
		Short: "Carry out a saved plan, or plan and apply a config directory",
		Long: `Apply carries out PLANFILE exactly, without asking: it refuses a plan whose
file was changed (plan_hash_mismatch), whose state is another one
(lineage_mismatch) or has moved on (stale_plan), or whose config changed
(config_changed). Nothing is written when apply refuses.

Given a DIR (default "."), apply plans, prints the plan and asks for
confirmation; --yes answers it. Without a terminal and without --yes it
refuses (confirmation_required).

A plan pushed to a registry (nlx plan --push) is applied by its REF: its
config inputs come with it, and the signed approvals attached to it are
used. --approvals DIR (repeatable) adds signed approvals from files
(nlx approve --sign --out DIR). Each is checked against the applied state.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.target = "."
			if len(args) == 1 {
				opts.target = args[0]
			}
			return applyRun(cmd.Context(), a, opts)
		},
	}
	cmd.Flags().StringVar(&opts.configDir, "config", "", "config `DIR` a plan file is checked against (default: the directory it was planned from)")
	cmd.Flags().BoolVarP(&opts.yes, "yes", "y", false, "apply a directory's plan without asking (never approves a risk)")
	cmd.Flags().StringVar(&opts.actor, "actor", "", "who applies, as recorded (default $NLX_ACTOR, else the OS user)")
	cmd.Flags().StringArrayVar(&opts.approvals, "approvals", nil, "use the signed approvals in `DIR` (nlx approve --sign --out DIR; repeatable)")
	// Smaller batches give crash tests a journal step between more changes.
	cmd.Flags().IntVar(&opts.batchSize, "batch-size", reconcile.DefaultBatchSize, "state-only changes per transaction")
	_ = cmd.Flags().MarkHidden("batch-size")
	return cmd
}

func applyRun(ctx context.Context, a *app, opts *applyOptions) error {
	var signed []reconcile.SignedApproval
	for _, dir := range opts.approvals {
		s, err := dirApprovals(dir)
		if err != nil {
			return err
		}
		signed = append(signed, s...)
	}
	if isRegistryRef(opts.target) {
		pp, err := pullPlan(ctx, opts.target)
		if err != nil {
			return err
		}
		attached, err := attachedApprovals(ctx, pp.Ref)
		if err != nil {
			return err
		}
		_, err = applyPulled(ctx, a, pp, append(signed, attached...), opts.actor, false)
		return err
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
		if p, cfg, err = makePlan(ctx, a, planRequest{dir: opts.target, actor: opts.actor}); err != nil {
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
			return reason.New(reason.LineageMismatch, "the plan was made against state lineage %s, but there is no state at %s", p.State.Lineage, mustState(a))
		}
	}
	if err != nil {
		return err
	}
	defer db.Close()
	_, err = applyPlan(ctx, a, db, p, applyTarget{configDir: configDir, planFile: planFile, load: load, actor: opts.actor, batchSize: opts.batchSize, signed: signed})
	return err
}

// applyTarget is what applyPlan carries a plan out with.
type applyTarget struct {
	configDir, planFile, actor string
	load                       func(ctx context.Context) (*schema.Config, error)
	batchSize                  int
	signed                     []reconcile.SignedApproval
	quiet                      bool // print nothing (nlx follow reports itself)
}

// applyPlan applies p to db and prints the ledger.
func applyPlan(ctx context.Context, a *app, db *state.DB, p *plan.Plan, t applyTarget) (*reconcile.Ledger, error) {
	configDir, planFile, load := t.configDir, t.planFile, t.load
	effects := &host.Effects{WorkspaceRoot: host.DefaultWorkspaceRoot(db.Path()),
		CredentialRoot: host.DefaultCredentialRoot(db.Path()),
		SkillRoot:      host.DefaultSkillRoot(db.Path()), ConfigDir: configDir, Owner: host.ProviderUser}
	defer effects.Close()
	store, err := a.imageStore()
	if err != nil {
		return nil, err
	}
	c, _ := callerOf("")
	ledger, err := reconcile.Apply(ctx, db, p, reconcile.ApplyOptions{ConfigDir: configDir, Config: load,
		Actor: actorFor(t.actor, nil, c), Effects: effects, BatchSize: t.batchSize, PlanFile: planFile,
		Images: &images.Checker{Store: store}, Imports: applyImports(p), Signed: t.signed})
	if t.quiet {
		return ledger, err
	}
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
		printLedger(a, ledger, err)
	}
	return ledger, err
}

// applyPulled applies a plan read from a registry: its config inputs are
// unpacked into a fresh directory beside the state, the plan re-derived
// from exactly them.
func applyPulled(ctx context.Context, a *app, pp *pulledPlan, signed []reconcile.SignedApproval, actor string, quiet bool) (*reconcile.Ledger, error) {
	db, err := a.openState(ctx, pp.Plan.State.Lineage != "")
	if errors.Is(err, state.ErrNoState) {
		return nil, reason.New(reason.LineageMismatch, "the plan was made against state lineage %s, but there is no state at %s", pp.Plan.State.Lineage, mustState(a))
	}
	if err != nil {
		return nil, err
	}
	defer db.Close()
	dir, err := os.MkdirTemp(filepath.Dir(db.Path()), "plan-config-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	cfgDir := filepath.Join(dir, "config")
	if err := unpackConfig(pp.Config, pp.Plan, cfgDir); err != nil {
		return nil, err
	}
	return applyPlan(ctx, a, db, pp.Plan, applyTarget{configDir: cfgDir, planFile: pp.Ref, actor: actor, signed: signed,
		load: func(ctx context.Context) (*schema.Config, error) { return loadConfig(ctx, cfgDir) }, quiet: quiet})
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
	if a.view.Format() == formatJSON {
		out, color = a.io.Err, false
	}
	if a.view.Format() == formatText || !opts.yes {
		if err := (plan.View{Format: plan.FormatText, Color: color}).Render(out, p); err != nil {
			return err
		}
	}
	if p.Empty() || opts.yes {
		return nil
	}
	if !a.io.InTerminal {
		return reason.New(reason.ConfirmationRequired, "no terminal to confirm on; review the plan and pass --yes, or save it with nlx plan --out and apply the file")
	}
	fmt.Fprint(a.io.Err, "\nDo you want to perform these actions?\n  Only 'yes' will be accepted to approve.\n\n  Enter a value: ")
	line, _ := bufio.NewReader(a.io.In).ReadString('\n')
	if strings.TrimSpace(line) != "yes" {
		return reason.New(reason.ConfirmationRequired, "apply cancelled: the answer was not yes")
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
// after a partial failure alike. In JSON the ledger document carries the
// apply's error: the one document on stdout.
func printLedger(a *app, l *reconcile.Ledger, applyErr error) {
	doc := struct {
		*reconcile.Ledger
		Complete bool       `json:"complete"`
		Error    *errorBody `json:"error,omitempty"`
	}{Ledger: l, Complete: applyErr == nil}
	if applyErr != nil {
		code, _ := classify(applyErr)
		doc.Error = newErrorBody(applyErr, code)
	}
	_ = a.view.Render(document{Version: versionLedger, JSON: doc, Text: func(w io.Writer) error { return ledgerText(w, l, applyErr) }})
}

// ledgerText is the ledger for people, change by change.
func ledgerText(w io.Writer, l *reconcile.Ledger, applyErr error) error {
	if len(l.Entries) == 0 {
		_, err := fmt.Fprintln(w, "No changes. Nothing to apply.")
		return err
	}
	bw := bufio.NewWriterSize(w, 64<<10)
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
		return bw.Flush()
	}
	fmt.Fprintf(bw, "\nApply complete! Resources: %d added, %d changed, %d destroyed. State serial %d.\n", s.Add, s.Change, s.Destroy, l.SerialAfter)
	return bw.Flush()
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

// applyImports reads each preservation's export again for the apply of p:
// an export p imports is proved whole record by record and must still be
// the source revision p pins; the others are read by their manifests.
func applyImports(p *plan.Plan) func(ctx context.Context, cfg *schema.Config) (map[string]*reconcile.Import, error) {
	pinned := map[string]string{}
	for _, c := range p.Changes {
		if c.Kind != schema.KindPreservation || c.Action == plan.Delete {
			continue
		}
		var after schema.Preservation
		if reconcile.Importing(&c) && json.Unmarshal(c.After, &after) == nil {
			pinned[c.Name] = after.Import.Manifest
		}
	}
	return func(ctx context.Context, cfg *schema.Config) (map[string]*reconcile.Import, error) {
		imports, err := preserve.Imports(ctx, cfg, func(name string) bool { return pinned[name] != "" })
		if err != nil {
			return nil, err
		}
		for name, want := range pinned {
			im := imports[name]
			switch {
			case im == nil:
				return nil, reason.New(reason.PreservationRevisionChanged, "the plan imports preservation %s from source revision %s, but its export is gone; nothing was applied", name, want)
			case im.Manifest != want:
				return nil, reason.New(reason.PreservationRevisionChanged, "the plan imports preservation %s from source revision %s, but its export now holds %s; nothing was applied (plan again)", name, want, im.Manifest)
			}
		}
		return imports, nil
	}
}
