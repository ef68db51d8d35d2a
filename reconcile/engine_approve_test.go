package reconcile_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nlx-dev/nlx/internal/reason"
	"github.com/nlx-dev/nlx/plan"
	"github.com/nlx-dev/nlx/reconcile"
	"github.com/nlx-dev/nlx/schema"
)

func (f *fixture) planBy(actor string) *plan.Plan {
	f.t.Helper()
	ctx := context.Background()
	cfg, err := schema.Load(ctx, f.dir)
	if err != nil {
		f.t.Fatal(err)
	}
	snap, err := f.db.Snapshot(ctx)
	if err != nil {
		f.t.Fatal(err)
	}
	if f.snapshot != nil {
		f.snapshot(snap)
	}
	p, err := reconcile.Plan(reconcile.PlanInput{Config: cfg, Snapshot: snap, ConfigDir: f.dir, NlxVersion: "test", Actor: actor})
	if err != nil {
		f.t.Fatal(err)
	}
	if _, err := plan.Encode(p); err != nil {
		f.t.Fatal(err)
	}
	return p
}

func (f *fixture) approve(p *plan.Plan, actor string, changes ...string) error {
	_, err := reconcile.Approve(context.Background(), f.store, p, reconcile.ApproveOptions{
		Actor: actor, Reason: "reviewed", Changes: changes, Expires: time.Hour, Caller: keyCaller(f.t, actor),
	})
	return err
}

func refusal(err error) reason.Code {
	var r *reason.Error
	if errors.As(err, &r) {
		return r.Code
	}
	if err != nil {
		return reason.Code("error: " + err.Error())
	}
	return ""
}

// riskyEdits makes a plan with two risky changes in two workspaces: bob's
// job deleted (destructive, bob's workspace) and alice's workspace policy
// widened (permission_widening, alice's workspace).
func riskyEdits(f *fixture) {
	f.edit("jobs.cue", "\t\"bob-inbox-triage\": {\n\t\tworkspace:  \"bob\"\n\t\tconnection: \"bob-codex\"\n\t\tschedule: {cron: \"0 8 * * *\", timezone: \"Europe/Berlin\"}\n\t\tprompt:      \"Sort my notification inbox into act, read and ignore.\"\n\t\tconcurrency: \"queue\"\n\t}\n", "")
	f.edit("workspaces.cue", `policy:    "read_only"`, `policy:    "workspace_write"`)
}

func TestApprovalRules(t *testing.T) {
	type step struct {
		actor   string
		changes []string
		want    reason.Code // refusal code of approve; "" accepts
	}
	tests := []struct {
		name      string
		edit      func(f *fixture)
		plannedBy string
		approve   []step
		before    func(f *fixture, p *plan.Plan) // between approve and apply
		now       time.Duration                  // apply this much later
		apply     reason.Code                    // refusal code of apply; "" applies
		msg       string                         // in apply's error
		used      int                            // approvals the apply uses
	}{
		{name: "an operator approves everything", edit: riskyEdits, plannedBy: "ci",
			approve: []step{{"alice", nil, ""}}, used: 2},
		{name: "each workspace's admin approves its change", edit: riskyEdits, plannedBy: "ci",
			approve: []step{{"bob", []string{"job.bob-inbox-triage"}, ""}, {"alice", []string{"workspace.alice"}, ""}}, used: 2},
		{name: "nobody approved", edit: riskyEdits, plannedBy: "ci",
			apply: reason.ApprovalMissing, msg: "no approval recorded"},
		{name: "wrong actor: not a member at all", edit: riskyEdits, plannedBy: "ci",
			approve: []step{{"mallory", nil, reason.ActorUnproven}},
			apply:   reason.ApprovalMissing},
		{name: "non-admin: a member of another workspace", edit: riskyEdits, plannedBy: "ci",
			approve: []step{{"bob", []string{"workspace.alice"}, reason.ApproverNotAdmin}},
			apply:   reason.ApprovalMissing},
		{name: "admin only in the proposed state", plannedBy: "ci",
			edit: func(f *fixture) {
				f.edit("workspaces.cue", `carol: "member"`, `carol: "admin"`)
				f.edit("jobs.cue", `"platform/digest"`, `"platform/digest-2"`)
			},
			approve: []step{{"carol", []string{"job.nightly-digest"}, reason.ApproverNotAdmin},
				{"carol", []string{"workspace.platform"}, reason.ApproverNotAdmin}},
			apply: reason.ApprovalMissing},
		{name: "expired", edit: riskyEdits, plannedBy: "ci",
			approve: []step{{"alice", nil, ""}}, now: 2 * time.Hour,
			apply: reason.ApprovalMissing, msg: "expired"},
		{name: "reused: an approval already used", edit: riskyEdits, plannedBy: "ci",
			approve: []step{{"alice", nil, ""}},
			before: func(f *fixture, p *plan.Plan) {
				f.store.approvals = func(as []reconcile.Approval) []reconcile.Approval {
					for i := range as {
						if as[i].Address == "workspace.alice" {
							as[i].Consumed, as[i].ConsumedBy = true, 99
						}
					}
					return as
				}
			},
			apply: reason.ApprovalMissing, msg: "was used by apply"},
		{name: "other plan hash", edit: riskyEdits, plannedBy: "ci",
			before: func(f *fixture, p *plan.Plan) {
				other := f.planBy("dave") // the same changes, another plan
				if err := f.approve(other, "alice"); err != nil {
					f.t.Fatal(err)
				}
			},
			apply: reason.ApprovalMissing, msg: "no approval recorded"},
		{name: "other change", edit: riskyEdits, plannedBy: "ci",
			approve: []step{{"alice", []string{"job.bob-inbox-triage"}, ""}},
			apply:   reason.ApprovalMissing, msg: "workspace.alice permission_widening: no approval recorded"},
		{name: "role revoked between approve and apply", edit: riskyEdits, plannedBy: "ci",
			approve: []step{{"bob", []string{"job.bob-inbox-triage"}, ""}, {"alice", []string{"workspace.alice"}, ""}},
			before: func(f *fixture, p *plan.Plan) {
				// The applied state no longer makes bob an admin of his
				// workspace, under the same serial (as a restored backup
				// might): the plan was not made from that state, whatever
				// approvals it has; its basis says so first.
				f.store.locked = func(s *reconcile.Snapshot) {
					for i := range s.Resources {
						if s.Resources[i].Address() == "workspace.bob" {
							s.Resources[i].Spec = bytes.ReplaceAll(s.Resources[i].Spec, []byte(`"bob":"admin"`), []byte(`"bob":"member"`))
						}
					}
				}
			},
			apply: reason.StateBasisMismatch, msg: "at serial 1 hashes"},
		{name: "two-person rule: the plan's author", edit: riskyEdits, plannedBy: "alice",
			approve: []step{{"alice", nil, reason.TwoPersonRule}},
			apply:   reason.ApprovalMissing},
		{name: "two-person rule: someone else", edit: riskyEdits, plannedBy: "alice",
			approve: []step{{"bob", []string{"job.bob-inbox-triage"}, ""}}, apply: reason.ApprovalMissing,
			msg: "workspace.alice permission_widening"},
		{name: "approving what needs no approval", plannedBy: "ci",
			edit:    func(f *fixture) { f.edit("jobs.cue", `"30 6 * * 1-5"`, `"0 7 * * 1-5"`) },
			approve: []step{{"alice", nil, reason.ApprovalNotNeeded}, {"alice", []string{"job.nightly-digest"}, reason.ApprovalNotNeeded}}},
		{name: "approving a change the plan does not make", edit: riskyEdits, plannedBy: "ci",
			approve: []step{{"alice", []string{"job.nightly-digest"}, reason.NotInPlan}},
			apply:   reason.ApprovalMissing},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := applied(t)
			tt.edit(f)
			p := f.planBy(tt.plannedBy)
			for _, s := range tt.approve {
				if got := refusal(f.approve(p, s.actor, s.changes...)); got != s.want {
					t.Fatalf("approve by %s %v: got %q, want %q", s.actor, s.changes, got, s.want)
				}
			}
			if tt.before != nil {
				tt.before(f, p)
			}
			before := f.fingerprint()
			now := time.Now().Add(tt.now)
			ledger, err := f.apply(p, reconcile.ApplyOptions{Now: func() time.Time { return now }})
			if got := refusal(err); got != tt.apply {
				t.Fatalf("apply: got %q (%v), want %q", got, err, tt.apply)
			}
			if tt.apply != "" {
				if !strings.Contains(err.Error(), tt.msg) {
					t.Errorf("apply error %q does not say %q", err, tt.msg)
				}
				if f.fingerprint() != before {
					t.Error("the refused apply wrote to the state")
				}
				return
			}
			if len(ledger.Approvals) != tt.used {
				t.Errorf("approvals used: %v, want %d", ledger.Approvals, tt.used)
			}
		})
	}
}

func TestApproveStalePlan(t *testing.T) {
	f := applied(t)
	riskyEdits(f)
	p := f.planBy("ci")
	other := applied(t)
	if got := refusal(other.approve(p, "alice")); got != reason.LineageMismatch {
		t.Errorf("approve against another state: got %q, want lineage_mismatch", got)
	}
	f.store.serial = 1 // another apply moved the state on
	if got := refusal(f.approve(p, "alice")); got != reason.StalePlan {
		t.Errorf("approve of a stale plan: got %q, want stale_plan", got)
	}
	recorded, _ := f.db.Approvals(context.Background(), p.PlanHash)
	if len(recorded) != 0 {
		t.Errorf("refused approvals were recorded: %+v", recorded)
	}
}

func TestApprovalUsedOnce(t *testing.T) {
	f := applied(t)
	riskyEdits(f)
	p := f.planBy("ci")
	if err := f.approve(p, "alice"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.apply(p, reconcile.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	recorded, err := f.db.Approvals(context.Background(), p.PlanHash)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range recorded {
		if !a.Consumed || a.ConsumedBy == 0 {
			t.Errorf("approval of %s %s not consumed", a.Address, a.Risk)
		}
	}
	// The plan cannot be applied twice, approvals or not.
	if got := refusal(func() error { _, err := f.apply(p, reconcile.ApplyOptions{}); return err }()); got != reason.StalePlan {
		t.Errorf("second apply: got %q, want stale_plan", got)
	}
}
