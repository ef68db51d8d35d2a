package reconcile_test

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/nlx-dev/nlx/internal/reason"
	"github.com/nlx-dev/nlx/plan"
	"github.com/nlx-dev/nlx/reconcile"
	"github.com/nlx-dev/nlx/schema"
	"github.com/nlx-dev/nlx/state"
)

// forge copies p, edits the copy as a hand with the file would, and gives
// it a correct plan hash: a forger can always recompute the hash.
func forge(t *testing.T, p *plan.Plan, edit func(*plan.Plan)) *plan.Plan {
	t.Helper()
	data, err := plan.Encode(p)
	if err != nil {
		t.Fatal(err)
	}
	q, err := plan.Read(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	edit(q)
	q.PlanHash = ""
	if q.PlanHash, err = plan.Hash(q); err != nil {
		t.Fatal(err)
	}
	return q
}

func change(t *testing.T, p *plan.Plan, address string) *plan.Change {
	t.Helper()
	for i := range p.Changes {
		if p.Changes[i].Address == address {
			return &p.Changes[i]
		}
	}
	t.Fatalf("the plan has no change to %s", address)
	return nil
}

// setAfter rewrites a change's after spec (and its field diff) with edit.
func setAfter(t *testing.T, c *plan.Change, edit func(map[string]any)) {
	t.Helper()
	var spec map[string]any
	if err := json.Unmarshal(c.After, &spec); err != nil {
		t.Fatal(err)
	}
	edit(spec)
	after, err := plan.JSON(spec)
	if err != nil {
		t.Fatal(err)
	}
	c.After = after
}

func summarize(p *plan.Plan) { p.Summary = plan.Summarize(p.Changes) }

// addMallory is the config change of the attack: mallory joins the host's
// operators (under the two-person rule): permission_widening, needing an
// approval by a current operator who did not make the plan.
func addMallory(f *fixture) {
	f.edit("host.cue", `operators: ["alice"]`, `operators: ["alice", "mallory"]`)
}

// TestForgedPlansRefused applies plans edited by hand, each with a correct
// plan hash and the config inputs of the config it names, and each is
// refused (plan_not_derivable) with nothing written: apply re-derives the
// plan from the config and the state and trusts none of the file's
// changes, risks, refusals or summary.
func TestForgedPlansRefused(t *testing.T) {
	tests := []struct {
		name   string
		config func(f *fixture) // the config the plan is made from (and names)
		forge  func(t *testing.T, p *plan.Plan)
		msg    string
	}{
		{name: "the issue's attack: an operator added to a plan of the unchanged config, no risk",
			forge: func(t *testing.T, p *plan.Plan) {
				before, _ := json.Marshal(schema.Host{Operators: []string{"alice"}, TwoPersonRule: true})
				after, _ := json.Marshal(schema.Host{Operators: []string{"alice", "mallory"}, TwoPersonRule: true})
				p.Changes = append(p.Changes, plan.Change{Address: "host.config", Kind: schema.KindHost, Name: "config",
					Action: plan.Update, Risks: []plan.Risk{}, Refused: []plan.Refusal{},
					Diff:   []plan.FieldDiff{{Path: "operators[1]", After: json.RawMessage(`"mallory"`)}},
					Before: before, After: after})
				summarize(p)
			},
			msg: "a change to host.config that nlx does not plan"},
		{name: "risk removed", config: addMallory,
			forge: func(t *testing.T, p *plan.Plan) {
				change(t, p, "host.config").Risks = []plan.Risk{}
				summarize(p)
			},
			msg: "host.config: risks none, want permission_widening"},
		{name: "risk swapped for one no approval clears", config: addMallory,
			forge: func(t *testing.T, p *plan.Plan) {
				change(t, p, "host.config").Risks[0].Code = plan.RiskUnknownClaim
			},
			msg: "host.config: risks unknown_claim, want permission_widening"},
		{name: "risk reason edited (what the approver reads)", config: addMallory,
			forge: func(t *testing.T, p *plan.Plan) {
				change(t, p, "host.config").Risks[0].Reason = "fixes a typo"
			},
			msg: "host.config: risks"},
		{name: "summary edited", config: addMallory,
			forge: func(t *testing.T, p *plan.Plan) { p.Summary.Gated = 0 },
			msg:   "summary"},
		{name: "change added", config: riskyEdits,
			forge: func(t *testing.T, p *plan.Plan) {
				c := *change(t, p, "workspace.alice")
				c.Address, c.Name = "workspace.evil", "evil"
				c.Action, c.Before, c.Risks = plan.Create, json.RawMessage("null"), []plan.Risk{}
				p.Changes = append(p.Changes, c)
				summarize(p)
			},
			msg: "a change to workspace.evil that nlx does not plan"},
		{name: "change altered: a wider policy than reviewed", config: riskyEdits,
			forge: func(t *testing.T, p *plan.Plan) {
				setAfter(t, change(t, p, "workspace.alice"), func(s map[string]any) { s["policy"] = "danger_full_access" })
			},
			msg: "workspace.alice: its after is not the configured spec"},
		{name: "field diff altered (what the reviewer reads)", config: riskyEdits,
			forge: func(t *testing.T, p *plan.Plan) {
				change(t, p, "workspace.alice").Diff[0].After = json.RawMessage(`"read_only"`)
			},
			msg: "workspace.alice: its field diff"},
		{name: "change left out: the risky one", config: riskyEdits,
			forge: func(t *testing.T, p *plan.Plan) {
				p.Changes = slices.DeleteFunc(p.Changes, func(c plan.Change) bool { return c.Address == "job.bob-inbox-triage" })
				summarize(p)
			},
			msg: "leaves out the change to job.bob-inbox-triage"},
		{name: "action altered", config: riskyEdits,
			forge: func(t *testing.T, p *plan.Plan) {
				c := change(t, p, "job.bob-inbox-triage")
				c.Action, c.Risks = plan.Update, []plan.Risk{}
				c.After = c.Before
				summarize(p)
			},
			msg: "job.bob-inbox-triage: action update, want delete"},
		{name: "changes reordered", config: riskyEdits,
			forge: func(t *testing.T, p *plan.Plan) { slices.Reverse(p.Changes) },
			msg:   "not in apply order"},
		{name: "unknown outcome invented", config: addMallory,
			forge: func(t *testing.T, p *plan.Plan) {
				p.Unknowns = append(p.Unknowns, plan.Unknown{Address: "workspace.alice", Action: plan.Create, ApplyID: 1, At: "2026-01-01T00:00:00Z"})
			},
			msg: "unknown outcome"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			if _, err := f.apply(f.plan(), reconcile.ApplyOptions{}); err != nil {
				t.Fatal(err)
			}
			if tt.config != nil {
				tt.config(f)
			}
			honest := f.planBy("ci")
			forged := forge(t, honest, func(p *plan.Plan) { tt.forge(t, p) })
			// Whoever approves approves what the file shows: for a plan
			// whose forged changes still carry risks, record them all.
			if forged.Summary.Gated > 0 || honest.Summary.Gated > 0 {
				_ = f.approve(forged, "alice")
			}
			before := f.fingerprint()
			_, err := f.apply(forged, reconcile.ApplyOptions{})
			if got := refusal(err); got != reason.PlanNotDerivable {
				t.Fatalf("apply of the forged plan: %v, want %s", err, reason.PlanNotDerivable)
			}
			if !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("refusal %q does not say %q", err, tt.msg)
			}
			if after := f.fingerprint(); after != before {
				t.Errorf("the refused apply wrote to the state:\nbefore %s\nafter  %s", before, after)
			}
			auth, err := f.db.Authority(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if auth.Operators["mallory"] {
				t.Error("mallory became an operator")
			}
		})
	}
}

// TestHonestPlanApplies is the control: the same plans, unedited, apply
// (with their approvals), so the refusals above are the forgeries'.
func TestHonestPlanApplies(t *testing.T) {
	for _, config := range []func(*fixture){addMallory, riskyEdits} {
		f := newFixture(t)
		if _, err := f.apply(f.plan(), reconcile.ApplyOptions{}); err != nil {
			t.Fatal(err)
		}
		config(f)
		p := f.planBy("ci")
		if err := f.approve(p, "alice"); err != nil {
			t.Fatal(err)
		}
		if _, err := f.apply(p, reconcile.ApplyOptions{}); err != nil {
			t.Fatalf("apply of the honest plan: %v", err)
		}
	}
}

// TestRequirePins: with an image checker (as nlx apply runs), a plan that
// pins no digest for an image a workspace uses is refused.
func TestRequirePins(t *testing.T) {
	f := newFixture(t)
	p := f.plan() // made without resolving images
	before := f.fingerprint()
	_, err := f.apply(p, reconcile.ApplyOptions{Images: noImages{}})
	if got := refusal(err); got != reason.PlanNotDerivable || !strings.Contains(err.Error(), "pins no digest") {
		t.Fatalf("apply: %v, want %s naming the missing pin", err, reason.PlanNotDerivable)
	}
	if after := f.fingerprint(); after != before {
		t.Error("the refused apply wrote to the state")
	}
}

type noImages struct{}

func (noImages) Available(context.Context, string, plan.ImagePin) error { return nil }

// pausingStore runs fn after the first Commit of an apply, while the apply
// holds the lock with half its changes made.
type pausingStore struct {
	*state.DB
	fn   func(lockID string)
	lock string
	done bool
}

func (s *pausingStore) Lock(ctx context.Context, op string) (*reconcile.Lock, error) {
	l, err := s.DB.Lock(ctx, op)
	if err == nil {
		s.lock = l.ID
	}
	return l, err
}

func (s *pausingStore) Commit(ctx context.Context, applyID, serial int64, changes []plan.Change, approvals []reconcile.Approval, imports map[string]*reconcile.Import) error {
	err := s.DB.Commit(ctx, applyID, serial, changes, approvals, imports)
	if !s.done {
		s.done = true
		s.fn(s.lock)
	}
	return err
}

// TestPlanOfHalfAppliedStateNeverApplies: a plan made from the state while
// an apply was changing it (its serial already bumped, half its changes
// made) passes the stale check once that apply ends, and used to carry out
// the rest a second time. nlx plan can no longer make it (the snapshot is
// refused under a live apply); made anyway, apply refuses it.
func TestPlanOfHalfAppliedStateNeverApplies(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	var mid *plan.Plan
	store := &pausingStore{DB: f.db, fn: func(lockID string) {
		if _, err := f.db.Snapshot(ctx); err == nil {
			t.Error("a plan's snapshot was taken during the apply")
		}
		// What the old snapshot read: the half-made state.
		snap, err := f.db.SnapshotLocked(ctx, lockID)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := schema.Load(ctx, f.dir)
		if err != nil {
			t.Fatal(err)
		}
		if mid, err = reconcile.Plan(reconcile.PlanInput{Config: cfg, Snapshot: snap, ConfigDir: f.dir, NlxVersion: "test", Actor: "ci"}); err != nil {
			t.Fatal(err)
		}
		if _, err := plan.Encode(mid); err != nil {
			t.Fatal(err)
		}
	}}
	first := f.plan()
	if _, err := reconcile.Apply(ctx, store, first, reconcile.ApplyOptions{BatchSize: 5, Actor: "test", Config: f.load}); err != nil {
		t.Fatal(err)
	}
	if mid == nil || mid.State.Serial != first.State.Serial+1 || mid.Empty() {
		t.Fatalf("the mid-apply plan: %+v", mid)
	}
	before := f.fingerprint()
	_, err := f.apply(mid, reconcile.ApplyOptions{})
	if got := refusal(err); got != reason.StateBasisMismatch {
		t.Fatalf("apply of the mid-apply plan: %v, want %s", err, reason.StateBasisMismatch)
	}
	if after := f.fingerprint(); after != before {
		t.Error("the refused apply wrote to the state")
	}
}
