package reconcile

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/nlx-dev/nlx/internal/reason"
	"github.com/nlx-dev/nlx/plan"
	"github.com/nlx-dev/nlx/schema"
)

// Reason codes of nlx approve and nlx resolve refusals.
const ()

// ApproveOptions are the inputs of Approve.
type ApproveOptions struct {
	Actor   string
	Reason  string
	Changes []string      // addresses; empty means every change that needs approval
	Expires time.Duration // from now; 24h when zero
	Now     func() time.Time
	// Caller is who runs the command: it must prove it is Actor.
	Caller Caller
}

// ApprovalStatements returns the approvals opts asks for on p, one per
// risk that needs one, without reading or recording any state: what nlx
// approve --sign signs. The host checks each when it applies.
func ApprovalStatements(p *plan.Plan, opts ApproveOptions) ([]Approval, error) {
	if err := opts.check(); err != nil {
		return nil, err
	}
	chosen, err := chooseChanges(p, opts.Changes)
	if err != nil {
		return nil, err
	}
	now := opts.Now()
	var out []Approval
	for _, c := range chosen {
		for _, r := range c.Risks {
			if plan.NeedsApproval(r.Code) {
				out = append(out, Approval{PlanHash: p.PlanHash, Address: c.Address, Risk: r.Code, Actor: opts.Actor,
					Reason: opts.Reason, CreatedAt: now, ExpiresAt: now.Add(opts.Expires)})
			}
		}
	}
	return out, nil
}

// check fills opts' defaults and refuses bad usage.
func (opts *ApproveOptions) check() error {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Expires == 0 {
		opts.Expires = 24 * time.Hour
	}
	if !schema.ValidName(opts.Actor) {
		return reason.New(reason.InvalidUsage, "--actor %q is not an actor name", opts.Actor)
	}
	if strings.TrimSpace(opts.Reason) == "" {
		return reason.New(reason.InvalidUsage, "--reason is required: say why this is safe")
	}
	if opts.Expires < 0 {
		return reason.New(reason.InvalidUsage, "--expires must be positive")
	}
	return nil
}

// Approve records, for each chosen change of p, one approval per risk that
// needs one, by opts.Actor. The state must still be the one p was made
// against; the actor's role is read from it.
func Approve(ctx context.Context, store ApprovalStore, p *plan.Plan, opts ApproveOptions) ([]Approval, error) {
	if err := opts.check(); err != nil {
		return nil, err
	}
	// Who asks is proven first: an unproven caller learns nothing of the
	// state, not even whether the plan is stale.
	auth, err := store.Authority(ctx)
	if err != nil {
		return nil, err
	}
	proof, err := auth.Prove(opts.Actor, opts.Caller)
	if err != nil {
		return nil, err
	}
	chosen, err := chooseChanges(p, opts.Changes)
	if err != nil {
		return nil, err
	}
	lock, err := store.Lock(ctx, "approve")
	if err != nil {
		return nil, err
	}
	defer store.Unlock(context.WithoutCancel(ctx), lock.ID)
	lineage, serial, err := store.Meta(ctx)
	if err != nil {
		return nil, err
	}
	switch {
	case lineage != p.State.Lineage:
		return nil, reason.New(reason.LineageMismatch, "the plan was made against state lineage %s, but this state is lineage %s", p.State.Lineage, lineage)
	case serial != p.State.Serial:
		return nil, reason.New(reason.StalePlan, "the plan was made at state serial %d, but the state is at serial %d; approve a new plan", p.State.Serial, serial)
	}
	if auth, err = store.Authority(ctx); err != nil { // the roles, under the lock
		return nil, err
	}
	now := opts.Now()
	var out []Approval
	for _, c := range chosen {
		if ok, why := auth.MayApprove(opts.Actor, c); !ok {
			return nil, reason.New(reason.ApproverNotAdmin, "%s: %s", c.Address, why)
		}
		if auth.TwoPersonRule && opts.Actor == p.Actor {
			return nil, reason.New(reason.TwoPersonRule, "%s made this plan and the host's two-person rule is on: someone else must approve it", opts.Actor)
		}
		for _, r := range c.Risks {
			if plan.NeedsApproval(r.Code) {
				out = append(out, Approval{PlanHash: p.PlanHash, Address: c.Address, Risk: r.Code, Actor: opts.Actor,
					Reason: opts.Reason, CreatedAt: now, ExpiresAt: now.Add(opts.Expires), Proof: proof})
			}
		}
	}
	if err := store.RecordApprovals(ctx, lock.ID, out); err != nil {
		return nil, err
	}
	return out, nil
}

// chooseChanges picks the changes to approve and refuses those that cannot
// be approved.
func chooseChanges(p *plan.Plan, addresses []string) ([]*plan.Change, error) {
	byAddr := map[string]*plan.Change{}
	for i := range p.Changes {
		byAddr[p.Changes[i].Address] = &p.Changes[i]
	}
	var chosen []*plan.Change
	if len(addresses) == 0 {
		for i := range p.Changes {
			if c := &p.Changes[i]; needsApproval(c) && len(c.Refused) == 0 {
				chosen = append(chosen, c)
			}
		}
		if len(chosen) == 0 {
			return nil, reason.New(reason.ApprovalNotNeeded, "no change of this plan needs an approval")
		}
		return chosen, nil
	}
	for _, a := range addresses {
		c := byAddr[a]
		switch {
		case c == nil:
			return nil, reason.New(reason.NotInPlan, "the plan does not change %s", a)
		case len(c.Refused) > 0:
			return nil, reason.New(reason.Code(c.Refused[0].Code), "%s is refused (%s); no approval can apply it", a, c.Refused[0].Reason)
		case !needsApproval(c):
			hint := ""
			if len(c.Risks) > 0 {
				hint = fmt.Sprintf("; its unknown outcome is cleared by nlx resolve %s", a)
			}
			return nil, reason.New(reason.ApprovalNotNeeded, "%s needs no approval%s", a, hint)
		}
		chosen = append(chosen, c)
	}
	return chosen, nil
}

func needsApproval(c *plan.Change) bool {
	for _, r := range c.Risks {
		if plan.NeedsApproval(r.Code) {
			return true
		}
	}
	return false
}

// Resolver is the part of the state nlx resolve needs beyond Store.
type Resolver interface {
	Locker
	MarkUnknown(ctx context.Context, lockID string) ([]plan.Unknown, error)
	Unknowns(ctx context.Context) ([]plan.Unknown, error)
	Authority(ctx context.Context) (*Authority, error)
	// Resolve records the outcome of address's unknown effects under the
	// lock; it returns how many it resolved and the serial after.
	Resolve(ctx context.Context, lockID, address, outcome, actor, why string) (int, int64, error)
	// Spec returns the applied spec of address, or nil.
	Spec(ctx context.Context, address string) (json.RawMessage, error)
}

// Resolve records an operator's or admin's decision on the unknown outcome
// of address. It never carries anything out.
func Resolve(ctx context.Context, store Resolver, address, outcome, actor, why string, caller Caller) (int, int64, error) {
	if !schema.ValidName(actor) {
		return 0, 0, reason.New(reason.InvalidUsage, "--actor %q is not an actor name", actor)
	}
	if strings.TrimSpace(why) == "" {
		return 0, 0, reason.New(reason.InvalidUsage, "--reason is required: say how you know")
	}
	if _, err := ParseOutcome(outcome); err != nil {
		return 0, 0, err
	}
	kind, name, ok := strings.Cut(address, ".")
	if !ok || schema.Kind(kind).Rank() < 0 {
		return 0, 0, reason.New(reason.InvalidUsage, "address %q: want kind.name", address)
	}
	// Who asks is proven first: an unproven caller learns nothing of the
	// state's unknowns.
	auth, err := store.Authority(ctx)
	if err != nil {
		return 0, 0, err
	}
	if _, err := auth.Prove(actor, caller); err != nil {
		return 0, 0, err
	}
	lock, err := store.Lock(ctx, "resolve")
	if err != nil {
		return 0, 0, err
	}
	defer store.Unlock(context.WithoutCancel(ctx), lock.ID)
	if _, err := store.MarkUnknown(ctx, lock.ID); err != nil {
		return 0, 0, err
	}
	unknowns, err := store.Unknowns(ctx)
	if err != nil {
		return 0, 0, err
	}
	var u *plan.Unknown
	for i := range unknowns {
		if unknowns[i].Address == address {
			u = &unknowns[i]
		}
	}
	if u == nil {
		return 0, 0, reason.New(reason.NothingToResolve, "%s has no unknown outcome to resolve", address)
	}
	if auth, err = store.Authority(ctx); err != nil { // under the lock now
		return 0, 0, err
	}
	spec, err := store.Spec(ctx, address)
	if err != nil {
		return 0, 0, err
	}
	c := &plan.Change{Address: address, Kind: schema.Kind(kind), Name: name, Action: u.Action, Before: spec}
	if ok, why := auth.MayApprove(actor, c); !ok {
		return 0, 0, reason.New(reason.ApproverNotAdmin, "%s: %s", address, why)
	}
	return store.Resolve(ctx, lock.ID, address, outcome, actor, why)
}
