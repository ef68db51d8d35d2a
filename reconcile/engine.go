package reconcile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nlx-dev/nlx/internal/fault"
	"github.com/nlx-dev/nlx/internal/reason"
	"github.com/nlx-dev/nlx/plan"
	"github.com/nlx-dev/nlx/schema"
)

// Reason codes of apply refusals. Nothing is written when apply refuses
// (but for marking effects unknown that an earlier apply left dispatched).
const ()

// Effects carries out what applying a change means outside the state, such
// as making a workspace's directory. Apply journals each effect dispatched
// before it and committed or failed after; an effect whose outcome was not
// recorded is unknown and never carried out again by nlx.
type Effects interface {
	// Has reports whether c has an effect outside the state.
	Has(c *plan.Change) bool
	// Do carries out the effect of c.
	Do(ctx context.Context, c *plan.Change) error
}

// ApplyOptions tune Apply.
type ApplyOptions struct {
	// ConfigDir is re-hashed before anything else, to refuse a changed
	// config at once; empty skips that (the caller has just planned from
	// it in the same process).
	ConfigDir string
	// Config loads the config the plan names (from ConfigDir), for the
	// plan's re-derivation: the loaded inputs must hash to the plan's, and
	// the plan must be exactly what nlx plans from that config and the
	// state at its serial. Apply starts it at once and takes the lock
	// while it runs. Required.
	Config func(ctx context.Context) (*schema.Config, error)
	Actor  string // who applies; recorded in the state
	// BatchSize is how many state-only changes share one transaction
	// (default DefaultBatchSize). Each change is still journaled on its own.
	BatchSize int
	// Effects carries out changes' effects outside the state; nil means
	// every change is state-only.
	Effects Effects
	// Now is the clock approvals expire by; time.Now by default.
	Now func() time.Time
	// PlanFile names the plan in the nlx approve commands refusals print.
	PlanFile string
	// Signed are signed approvals (nlx approve --sign), their signatures
	// verified by the caller; apply checks each of this plan's against the
	// applied state (the key is its actor's, the actor may approve, the
	// change and risk are the plan's, not expired, never used) and uses
	// them once. Those of other plans are ignored.
	Signed []SignedApproval
	// Images proves, before anything is written, that every image digest
	// the plan pins for a workspace can be had; nil skips the check.
	Images ImageChecker
	// Imports reads each preservation's export again, proved whole
	// against its manifest and the config's expected counts and hashes,
	// for the plan's re-derivation and for the import's records; nil
	// means the plan imports nothing (one that does is refused).
	Imports func(ctx context.Context, cfg *schema.Config) (map[string]*Import, error)
}

// ImageChecker finds out whether a pinned image can be had now.
type ImageChecker interface {
	// Available returns nil when the image of that name and pin is in the
	// local store or its registry, else a refusal (image_not_available,
	// image_ref_moved).
	Available(ctx context.Context, name string, pin plan.ImagePin) error
}

// DefaultBatchSize is the default ApplyOptions.BatchSize: large enough that
// a 14,000-change apply costs tens of transactions, not thousands.
const DefaultBatchSize = 500

// effectBatch bounds the effects dispatched together: all of a batch become
// unknown if apply dies while carrying them out.
const effectBatch = 256

func (o ApplyOptions) batchSize() int {
	if o.BatchSize > 0 {
		return o.BatchSize
	}
	return DefaultBatchSize
}

// LedgerEntry is one change as it actually ended.
type LedgerEntry struct {
	Address string      `json:"address"`
	Action  plan.Action `json:"action"`
	Phase   LedgerPhase `json:"phase"`
	Error   string      `json:"error,omitempty"`
}

// LedgerPhase is how a change of an apply ended; its values are defined
// here and only here.
type LedgerPhase string

// The ledger phases.
const (
	LedgerCommitted  LedgerPhase = "committed"   // applied to the state
	LedgerFailed     LedgerPhase = "failed"      // its commit or its effect failed
	LedgerNotStarted LedgerPhase = "not_started" // the apply ended before it
)

// Ledger is what an apply actually did; it is returned on every exit path
// once the state was touched.
type Ledger struct {
	PlanHash     string `json:"plan_hash"`
	Lineage      string `json:"lineage"`
	SerialBefore int64  `json:"serial_before"`
	SerialAfter  int64  `json:"serial_after"` // the serial this apply set
	// SerialNow is the state's serial when the apply ended: SerialAfter,
	// unless another run moved it after taking this apply's lock over.
	SerialNow int64         `json:"serial_now"`
	Entries   []LedgerEntry `json:"changes"`
	Summary   plan.Summary  `json:"summary"` // of committed changes only
	// Approvals used, as "address risk by actor".
	Approvals []string `json:"approvals_used"`
	// Bootstrap names the operators the first apply on an empty state set.
	Bootstrap []string `json:"bootstrapped_operators,omitempty"`
	// Unknown lists effects found dispatched without an outcome when this
	// apply started; they are now marked unknown.
	Unknown      []plan.Unknown `json:"marked_unknown,omitempty"`
	TookOverLock *Holder        `json:"-"`
}

func (l *Ledger) committed() int {
	n := 0
	for _, e := range l.Entries {
		if e.Phase == LedgerCommitted {
			n++
		}
	}
	return n
}

// CheckInputs proves that the config in dir is byte for byte what p was
// planned from.
func CheckInputs(dir string, p *plan.Plan) error {
	now, err := schema.Rehash(dir, p.Inputs.Dirs)
	if err != nil {
		return reason.New(reason.ConfigChanged, "config %s cannot be read as planned: %v", dir, err)
	}
	if now.Hash == p.Inputs.ConfigHash {
		return nil
	}
	planned := schema.Inputs{Files: p.Inputs.Files}
	changed := schema.Changed(planned, now)
	return reason.New(reason.ConfigChanged, "config %s changed since the plan (%s); plan again",
		dir, strings.Join(limit(changed, 10), ", "))
}

func orNew(lineage string) string {
	if lineage == "" {
		return "(none: a new state)"
	}
	return lineage
}

func limit(s []string, n int) []string {
	if len(s) <= n {
		return s
	}
	return append(s[:n:n], "and "+strconv.Itoa(len(s)-n)+" more")
}

// Apply carries out p against store. In order: it proves the config is the
// one planned, refuses plans holding refused changes, takes the lock, checks
// lineage and serial, marks effects an earlier apply left dispatched unknown,
// checks every risky change's approval (revalidating the approver against
// the applied state) and every unknown claim's resolution, bumps the serial
// once, and applies the changes batch by batch, journaled. A refusal writes
// nothing to the resources or the serial.
func Apply(ctx context.Context, store Store, p *plan.Plan, opts ApplyOptions) (*Ledger, error) {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.ConfigDir != "" {
		if err := CheckInputs(opts.ConfigDir, p); err != nil {
			return nil, err
		}
	}
	if err := checkRefused(p); err != nil {
		return nil, err
	}
	if opts.Config == nil {
		return nil, errors.New("apply: no config to derive the plan from")
	}
	if err := checkImages(ctx, opts.Images, p); err != nil {
		return nil, err
	}
	// The config evaluates (in a child process, on the other core) while
	// the lock is taken and the state read.
	type loaded struct {
		cfg *schema.Config
		err error
	}
	cfgDone := make(chan loaded, 1)
	loadCtx, cancelLoad := context.WithCancel(ctx)
	defer cancelLoad()
	go func() {
		cfg, err := opts.Config(loadCtx)
		cfgDone <- loaded{cfg, err}
	}()
	lock, err := store.Lock(ctx, "apply")
	if err != nil {
		return nil, err
	}
	defer store.Unlock(context.WithoutCancel(ctx), lock.ID)
	fault.Point("apply.locked")

	snap, err := store.SnapshotLocked(ctx, lock.ID)
	if err != nil {
		return nil, err
	}
	lineage, serial := snap.Lineage, snap.Serial
	ledger := &Ledger{PlanHash: p.PlanHash, Lineage: lineage, SerialBefore: serial, SerialAfter: serial, SerialNow: serial,
		TookOverLock: lock.TookOverFrom, Approvals: []string{}}
	switch {
	case p.State.Lineage == "" && serial == 0:
		// Planned before the state existed: any state never applied is
		// the empty state the plan was made against.
		snap.Lineage = ""
	case lineage != p.State.Lineage && p.State.Lineage != "":
		return ledger, reason.New(reason.LineageMismatch, "the plan was made against state lineage %s, but this state is lineage %s", orNew(p.State.Lineage), lineage)
	case serial != p.State.Serial:
		return ledger, reason.New(reason.StalePlan, "the plan was made at state serial %d, but the state is at serial %d; plan again", p.State.Serial, serial)
	}
	if basis, err := snap.Basis(); err != nil {
		return ledger, err
	} else if basis != p.State.Basis {
		return ledger, reason.New(reason.StateBasisMismatch, "the plan was made from a state whose content hash is %s, but this state at serial %d hashes %s (a snapshot edited after it was published, or outcomes that became unknown since); nothing was applied: plan again", orNone(p.State.Basis), serial, basis)
	}
	got := <-cfgDone
	if got.err != nil {
		return ledger, got.err
	}
	if got.cfg.Inputs.Hash != p.Inputs.ConfigHash {
		// The bytes evaluated are not the bytes planned (they changed
		// after the re-hash above, or the caller loaded another config).
		changed := schema.Changed(schema.Inputs{Files: p.Inputs.Files}, got.cfg.Inputs)
		return ledger, reason.New(reason.ConfigChanged, "config changed since the plan (%s); plan again", strings.Join(limit(changed, 10), ", "))
	}
	if opts.Images != nil {
		if err := RequirePins(p, got.cfg); err != nil {
			return ledger, err
		}
	}
	var imports map[string]*Import
	if opts.Imports != nil {
		if imports, err = opts.Imports(ctx, got.cfg); err != nil {
			return ledger, err
		}
	}
	if err := CheckDerivable(p, got.cfg, snap, imports); err != nil {
		return ledger, err
	}
	fault.Point("apply.derived")
	if ledger.Unknown, err = store.MarkUnknown(ctx, lock.ID); err != nil {
		return ledger, err
	}
	if err := checkUnknowns(ctx, store, p, ledger.Unknown); err != nil {
		return ledger, err
	}
	use, err := checkApprovals(ctx, store, p, opts.Now(), opts.PlanFile, opts.Signed)
	if err != nil {
		return ledger, err
	}
	for _, c := range p.Changes {
		ledger.Entries = append(ledger.Entries, LedgerEntry{Address: c.Address, Action: c.Action, Phase: LedgerNotStarted})
	}
	if p.Empty() {
		return ledger, nil
	}

	id, newSerial, err := store.BeginApply(ctx, lock.ID, p.PlanHash, opts.Actor, lineage, serial)
	if err != nil {
		return ledger, fmt.Errorf("begin apply: %w", err)
	}
	ledger.SerialAfter = newSerial
	fault.Point("apply.begun")
	for start, batch := 0, 1; start < len(p.Changes); batch++ {
		effect := opts.Effects != nil && opts.Effects.Has(&p.Changes[start])
		limit := opts.batchSize()
		if effect {
			limit = effectBatch
		}
		end := start + 1
		for end < len(p.Changes) && (end-start < limit || importOpen(p.Changes[start:end], p.Changes[end])) && (opts.Effects != nil && opts.Effects.Has(&p.Changes[end])) == effect {
			end++
		}
		group := p.Changes[start:end]
		if err := ctx.Err(); err != nil {
			return ledger, finish(ctx, store, id, ledger, fmt.Errorf("interrupted before %s: %w", group[0].Address, err))
		}
		if err := store.Intend(ctx, id, group); err != nil {
			return ledger, finish(ctx, store, id, ledger, fmt.Errorf("journal intents: %w", err))
		}
		fault.Point("apply.intended." + strconv.Itoa(batch))
		var applyErr error
		if effect {
			applyErr = applyEffects(ctx, store, opts.Effects, id, newSerial, group, start, batch, use, ledger)
		} else {
			applyErr = commit(ctx, store, id, newSerial, group, start, use, ledger, imports)
		}
		if applyErr != nil {
			return ledger, finish(ctx, store, id, ledger, applyErr)
		}
		fault.Point("apply.committed." + strconv.Itoa(batch))
		start = end
	}
	for _, c := range p.Changes {
		if c.Kind == schema.KindHost && c.Action == plan.Create {
			var h schema.Host
			if json.Unmarshal(c.After, &h) == nil {
				ledger.Bootstrap = append([]string{}, h.Operators...)
			}
		}
	}
	return ledger, finish(ctx, store, id, ledger, nil)
}

// commit applies state-only changes in one transaction.
func commit(ctx context.Context, store Store, id, serial int64, group []plan.Change, offset int, use approvalUse, l *Ledger, imports map[string]*Import) error {
	ids, used := use.of(group)
	if err := store.Commit(ctx, id, serial, group, ids, importsOf(group, imports)); err != nil {
		for i := range group {
			l.Entries[offset+i].Phase, l.Entries[offset+i].Error = LedgerFailed, err.Error()
		}
		return err
	}
	for i := range group {
		l.Entries[offset+i].Phase = LedgerCommitted
	}
	l.Approvals = append(l.Approvals, used...)
	return nil
}

// applyEffects dispatches a batch of effects, carries them out one by one
// and commits those that succeeded; after a failure the rest of the batch is
// journaled failed without being started.
func applyEffects(ctx context.Context, store Store, effects Effects, id, serial int64, group []plan.Change, offset, batch int, use approvalUse, l *Ledger) error {
	if err := store.Dispatch(ctx, id, group); err != nil {
		return fmt.Errorf("journal dispatch: %w", err)
	}
	fault.Point("apply.dispatched." + strconv.Itoa(batch))
	done := 0
	var effErr error
	for i := range group {
		if effErr = effects.Do(ctx, &group[i]); effErr != nil {
			effErr = fmt.Errorf("%s: %w", group[i].Address, effErr)
			break
		}
		done++
		fault.Point("apply.effect." + group[i].Address)
	}
	if done > 0 {
		if err := commit(ctx, store, id, serial, group[:done], offset, use, l, nil); err != nil {
			return err
		}
	}
	if effErr == nil {
		return nil
	}
	failed := group[done : done+1]
	if err := store.Fail(ctx, id, failed, effErr.Error()); err != nil {
		return errors.Join(effErr, err)
	}
	l.Entries[offset+done].Phase, l.Entries[offset+done].Error = LedgerFailed, effErr.Error()
	if rest := group[done+1:]; len(rest) > 0 {
		if err := store.Fail(ctx, id, rest, "not started: an earlier effect of its batch failed"); err != nil {
			return errors.Join(effErr, err)
		}
	}
	return effErr
}

// checkImages proves each image a workspace change pins can be had.
func checkImages(ctx context.Context, images ImageChecker, p *plan.Plan) error {
	if images == nil {
		return nil
	}
	checked := map[string]bool{}
	for _, c := range p.Changes {
		if c.Kind != schema.KindWorkspace || !c.Action.Creates() && c.Action != plan.Update {
			continue
		}
		var w schema.Workspace
		if err := json.Unmarshal(c.After, &w); err != nil {
			return fmt.Errorf("read %s: %w", c.Address, err)
		}
		if w.ImageDigest == "" || checked[w.Image] {
			continue
		}
		pin, ok := p.Inputs.Images[w.Image]
		if !ok || pin.Digest != w.ImageDigest {
			return reason.New(reason.InvalidPlanFile, "%s pins image %s %s, which the plan's inputs do not name", c.Address, w.Image, w.ImageDigest)
		}
		if err := images.Available(ctx, w.Image, pin); err != nil {
			return err
		}
		checked[w.Image] = true
	}
	return nil
}

// checkRefused refuses a plan holding a change no approval can apply.
func checkRefused(p *plan.Plan) error {
	var lines []string
	var code reason.Code
	for _, c := range p.Changes {
		for _, r := range c.Refused {
			if code == "" {
				code = r.Code
			}
			lines = append(lines, fmt.Sprintf("  %s: %s: %s", c.Address, r.Code, r.Reason))
		}
	}
	if code == "" {
		return nil
	}
	return reason.New(code, "the plan holds changes no approval can apply; change the config:\n%s", strings.Join(lines, "\n"))
}

// checkUnknowns refuses changes touching an outcome nobody has resolved.
func checkUnknowns(ctx context.Context, store Store, p *plan.Plan, marked []plan.Unknown) error {
	needed := false
	for _, c := range p.Changes {
		for _, r := range c.Risks {
			if r.Code == plan.RiskUnknownClaim {
				needed = true
			}
		}
	}
	if !needed && len(marked) == 0 {
		return nil
	}
	list, err := store.Unknowns(ctx)
	if err != nil {
		return err
	}
	claims, err := store.UnknownClaims(ctx)
	if err != nil {
		return err
	}
	unresolved := map[string]plan.Unknown{}
	for _, u := range list {
		unresolved[u.Address] = u
	}
	var lines []string
	for _, c := range p.Changes {
		if u, ok := unresolved[c.Address]; ok {
			lines = append(lines, fmt.Sprintf("  %s: %s dispatched by apply %d is unknown; nlx resolve %s --outcome applied|not-applied --actor NAME --reason TEXT",
				c.Address, u.Action, u.ApplyID, c.Address))
		}
	}
	for _, c := range p.Changes {
		for _, u := range claims {
			if touches(&c, u) {
				lines = append(lines, fmt.Sprintf("  %s: claim %s of job.%s is unknown; nlx resolve claim %s --outcome succeeded|failed|not-run --actor NAME --reason TEXT",
					c.Address, u.ID, u.Job, u.ID))
			}
		}
	}
	if len(lines) == 0 {
		return nil
	}
	return reason.New(reason.UnknownUnresolved, "changes touch outcomes nobody knows; nlx never replays them:\n%s", strings.Join(lines, "\n"))
}

// approvalUse maps a change address to the approvals that clear its risks.
type approvalUse map[string][]Approval

func (u approvalUse) of(group []plan.Change) (approvals []Approval, used []string) {
	for _, c := range group {
		for _, a := range u[c.Address] {
			approvals = append(approvals, a)
			used = append(used, fmt.Sprintf("%s %s by %s", a.Address, a.Risk, a.Actor))
		}
	}
	return approvals, used
}

// checkApprovals finds, for every risk that needs one, a valid approval:
// for this plan, change and risk; unexpired; unused; by an actor who may
// approve the change in the applied state now (not when they approved); and
// not by the plan's author under the two-person rule.
func checkApprovals(ctx context.Context, store Store, p *plan.Plan, now time.Time, planFile string, signed []SignedApproval) (approvalUse, error) {
	if planFile == "" {
		planFile = "PLANFILE"
	}
	use := approvalUse{}
	gated := false
	for _, c := range p.Changes {
		for _, r := range c.Risks {
			gated = gated || plan.NeedsApproval(r.Code)
		}
	}
	if !gated {
		return use, nil
	}
	auth, err := store.Authority(ctx)
	if err != nil {
		return nil, err
	}
	recorded, err := store.Approvals(ctx, p.PlanHash)
	if err != nil {
		return nil, err
	}
	mine, problems, others := checkSigned(p, auth, recorded, signed, now)
	type key struct {
		address string
		risk    plan.RiskCode
	}
	byKey := map[key][]Approval{}
	for _, a := range append(recorded, mine...) {
		k := key{a.Address, a.Risk}
		byKey[k] = append(byKey[k], a)
	}
	var missing []string
	for i := range p.Changes {
		c := &p.Changes[i]
		for _, r := range c.Risks {
			if !plan.NeedsApproval(r.Code) {
				continue
			}
			a, why := pickApproval(byKey[key{c.Address, r.Code}], auth, p, c, r.Code, now)
			if a == nil {
				missing = append(missing, fmt.Sprintf("  %s %s: %s\n    nlx approve %s --change %s --actor NAME --reason TEXT", c.Address, r.Code, why, planFile, c.Address))
				continue
			}
			use[c.Address] = append(use[c.Address], *a)
		}
	}
	if len(missing) > 0 {
		// The refusal's code is the most telling thing wrong with the
		// signed approvals a reviewer made for this plan, else that
		// approvals are missing.
		code := reason.ApprovalMissing
		var lines []string
		for _, pr := range problems {
			if code == reason.ApprovalMissing || signedRank[pr.code] < signedRank[code] {
				code = pr.code
			}
			lines = append(lines, fmt.Sprintf("  %s: %s", pr.code, pr.why))
		}
		note := ""
		if len(lines) > 0 {
			note = "\n  signed approvals of this plan that do not count:\n" + strings.Join(lines, "\n")
		}
		if others > 0 {
			note += fmt.Sprintf("\n  (%d signed approval(s) of other plans were ignored)", others)
		}
		return nil, reason.New(code, "%d risk(s) lack a valid approval; nothing was applied:\n%s%s", len(missing), strings.Join(missing, "\n"), note)
	}
	return use, nil
}

// signedRank orders what can be wrong with a signed approval, most telling
// first: a key that is not the actor's says more than an expiry.
var signedRank = map[reason.Code]int{
	reason.ApprovalKeyUnknown: 0, reason.ApprovalReplayed: 1, reason.ApproverNotAdmin: 2,
	reason.TwoPersonRule: 3, reason.ApprovalExpired: 4, reason.ApprovalMismatch: 5,
}

// signedProblem is why one signed approval of this plan does not count.
type signedProblem struct {
	code reason.Code
	why  string
}

// SignedApproval is a signed approval whose signature the caller verified:
// the statement it signs, as an Approval (its Signature the signature's
// digest, its Source where it came from), and the fingerprint of the key
// that signed it.
type SignedApproval struct {
	Approval
	Key string
}

// checkSigned checks the signed approvals of p against the applied state.
// It returns those that count, as approvals to pick from; why each other
// one of p does not count (a risk that still has a valid approval is
// applied: an expired first round beside a fresh signature is no reason to
// refuse); and how many are of other plans, ignored.
func checkSigned(p *plan.Plan, auth *Authority, recorded []Approval, signed []SignedApproval, now time.Time) ([]Approval, []signedProblem, int) {
	used := map[string]int64{}
	for _, a := range recorded {
		if a.Signature != "" {
			used[a.Signature] = a.ConsumedBy
		}
	}
	changes := map[string]*plan.Change{}
	for i := range p.Changes {
		changes[p.Changes[i].Address] = &p.Changes[i]
	}
	var out []Approval
	var problems []signedProblem
	others := 0
	for _, s := range signed {
		if s.PlanHash != p.PlanHash {
			others++
			continue
		}
		what := fmt.Sprintf("the signed approval of %s %s by %s (%s)", s.Address, s.Risk, s.Actor, s.Source)
		bad := func(code reason.Code, format string, args ...any) {
			problems = append(problems, signedProblem{code, what + " " + fmt.Sprintf(format, args...)})
		}
		c := changes[s.Address]
		hasRisk := false
		if c != nil {
			for _, r := range c.Risks {
				hasRisk = hasRisk || r.Code == s.Risk && plan.NeedsApproval(r.Code)
			}
		}
		if owner := auth.KeyActor(s.Key); owner != s.Actor {
			who := "no actor's"
			if owner != "" {
				who = owner + "'s"
			}
			bad(reason.ApprovalKeyUnknown, "is signed by key %s, which is %s in the applied state, not %s's", s.Key, who, s.Actor)
			continue
		}
		if apply, ok := used[s.Signature]; ok {
			bad(reason.ApprovalReplayed, "was used by apply %d", apply)
			continue
		}
		if c == nil {
			bad(reason.ApprovalMismatch, "names a change the plan does not make")
			continue
		}
		switch ok, why := auth.MayApprove(s.Actor, c); {
		case !hasRisk:
			bad(reason.ApprovalMismatch, "names a risk change %s does not carry", s.Address)
		case !now.Before(s.ExpiresAt):
			bad(reason.ApprovalExpired, "expired at %s", s.ExpiresAt.UTC().Format(time.RFC3339))
		case !ok:
			bad(reason.ApproverNotAdmin, "does not hold: %s", why)
		case auth.TwoPersonRule && s.Actor == p.Actor:
			bad(reason.TwoPersonRule, "is by %s, who made the plan, and the host's two-person rule is on", s.Actor)
		default:
			a := s.Approval
			a.ID, a.Consumed, a.Proof = 0, false, "key:"+s.Key
			out = append(out, a)
		}
	}
	return out, problems, others
}

// pickApproval returns a valid approval of risk on c among those recorded
// for it, or why there is none.
func pickApproval(recorded []Approval, auth *Authority, p *plan.Plan, c *plan.Change, risk plan.RiskCode, now time.Time) (*Approval, string) {
	why := "no approval recorded"
	for i := range recorded {
		a := &recorded[i]
		switch ok, reason := auth.MayApprove(a.Actor, c); {
		case a.Consumed:
			why = fmt.Sprintf("the approval by %s was used by apply %d", a.Actor, a.ConsumedBy)
		case !now.Before(a.ExpiresAt):
			why = fmt.Sprintf("the approval by %s expired at %s", a.Actor, a.ExpiresAt.UTC().Format(time.RFC3339))
		case !ok:
			why = "the approval no longer holds: " + reason
		case auth.TwoPersonRule && a.Actor == p.Actor:
			why = fmt.Sprintf("%s made the plan and the two-person rule is on", a.Actor)
		default:
			return a, ""
		}
	}
	return nil, why
}

// finish records the end of an apply, even when ctx was cancelled, and
// returns the apply's error.
func finish(ctx context.Context, store Store, id int64, l *Ledger, applyErr error) error {
	var done []plan.Change
	failed := 0
	for _, e := range l.Entries {
		switch e.Phase {
		case LedgerCommitted:
			done = append(done, plan.Change{Action: e.Action})
		case LedgerFailed:
			failed++
		}
	}
	l.Summary = plan.Summarize(done)
	bg := context.WithoutCancel(ctx)
	err := store.FinishApply(bg, id, ApplyResult{Committed: l.committed(), Failed: failed, Err: applyErr})
	l.SerialNow = l.SerialAfter
	if _, now, merr := store.Meta(bg); merr == nil {
		l.SerialNow = now
	}
	return errors.Join(applyErr, err)
}

// importOpen reports whether next belongs in the same transaction as
// group: group holds a job an import creates, and next is that job's
// preservation or another job of the same import.
func importOpen(group []plan.Change, next plan.Change) bool {
	for i := range group {
		if im := group[i].Import; im != "" && (next.Import == im || next.Kind == schema.KindPreservation && next.Name == im) {
			return true
		}
	}
	return false
}

// importsOf picks the imports whose preservation's change is in group.
func importsOf(group []plan.Change, imports map[string]*Import) map[string]*Import {
	var out map[string]*Import
	for i := range group {
		c := &group[i]
		if c.Kind != schema.KindPreservation || c.Action == plan.Delete {
			continue
		}
		if im := imports[c.Name]; im != nil && Importing(c) {
			if out == nil {
				out = map[string]*Import{}
			}
			out[c.Name] = im
		}
	}
	return out
}

// Importing reports whether the preservation change c pins a revision its
// applied spec did not: the apply that imports.
func Importing(c *plan.Change) bool {
	var before, after schema.Preservation
	if json.Unmarshal(c.After, &after) != nil || after.Import == nil {
		return false
	}
	if len(c.Before) > 0 && string(c.Before) != "null" && json.Unmarshal(c.Before, &before) == nil && before.Import != nil {
		return before.Import.Manifest != after.Import.Manifest
	}
	return true
}
