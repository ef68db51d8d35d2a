package reconcile_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nlx-dev/nlx/internal/reason"
	"github.com/nlx-dev/nlx/plan"
	"github.com/nlx-dev/nlx/reconcile"
	"github.com/nlx-dev/nlx/schema"
)

// testKey returns the authorized_keys line and fingerprint of a test key.
func testKey(t *testing.T, name string) (string, string) {
	t.Helper()
	pub, err := os.ReadFile(filepath.Join("..", "internal", "testkeys", name+".pub"))
	if err != nil {
		t.Fatal(err)
	}
	line := strings.TrimSpace(string(pub))
	fp, err := schema.KeyFingerprint(line)
	if err != nil {
		t.Fatal(err)
	}
	return line, fp
}

func TestProve(t *testing.T) {
	aliceKey, aliceFP := testKey(t, "alice")
	bobKey, bobFP := testKey(t, "bob")
	_, daveFP := testKey(t, "dave")
	host := fmt.Sprintf(`{"operators":["alice"],"twoPersonRule":true,"actors":{"alice":{"unix":"alice","keys":[%q]},"bob":{"keys":[%q]},"ops":{"unix":"root"}}}`, aliceKey, bobKey)
	auth, err := reconcile.NewAuthority([]reconcile.Resource{{Kind: schema.KindHost, Name: schema.HostName, Spec: []byte(host)}})
	if err != nil {
		t.Fatal(err)
	}
	none, _ := reconcile.NewAuthority(nil)
	tests := []struct {
		name   string
		auth   *reconcile.Authority
		actor  string
		caller reconcile.Caller
		want   string // the proof, or the refusal's message part
		ok     bool
	}{
		{"by OS user", auth, "alice", reconcile.Caller{UID: 1001, User: "alice"}, "unix:alice", true},
		{"by key", auth, "alice", reconcile.Caller{UID: 0, User: "root", Key: aliceFP}, "key:" + aliceFP, true},
		{"key only actor", auth, "bob", reconcile.Caller{UID: 0, User: "root", Key: bobFP}, "key:" + bobFP, true},
		{"root is only the actor mapped to root", auth, "ops", reconcile.Caller{UID: 0, User: "root"}, "unix:root", true},
		{"root is not alice", auth, "alice", reconcile.Caller{UID: 0, User: "root"}, "alice is proven by OS user alice or a signature by one of 1 key(s) (--key) in the applied state, and this is OS user root (uid 0)", false},
		{"another OS user", auth, "alice", reconcile.Caller{UID: 1002, User: "mallory"}, "this is OS user mallory (uid 1002)", false},
		{"another actor's key", auth, "alice", reconcile.Caller{UID: 0, User: "root", Key: bobFP}, "the key is bob's", false},
		{"a key nobody has", auth, "bob", reconcile.Caller{UID: 0, User: "root", Key: daveFP}, "holding key " + daveFP, false},
		{"no identity", auth, "carol", reconcile.Caller{UID: 1003, User: "carol"}, "carol has no identity in the applied state", false},
		{"no identities at all", none, "alice", reconcile.Caller{UID: 1001, User: "alice"}, "the applied state names no identities", false},
		{"a uid without a name", auth, "alice", reconcile.Caller{UID: 4242}, "uid 4242, which has no name", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.auth.Prove(tt.actor, tt.caller)
			switch {
			case tt.ok && (err != nil || got != tt.want):
				t.Fatalf("Prove = %q, %v; want %q", got, err, tt.want)
			case !tt.ok && (err == nil || reason.CodeOf(err) != reason.ActorUnproven || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("Prove = %q, %v; want actor_unproven with %q", got, err, tt.want)
			}
		})
	}
}

// writeKeys gives the example's actors (alice, bob, carol) their test keys
// (internal/testkeys) in the config in dir: every fixture's actors prove
// themselves by real keys.
func writeKeys(t *testing.T, dir string) {
	t.Helper()
	var b strings.Builder
	b.WriteString("package pihost\n\nhost: actors: {\n")
	for _, a := range []string{"alice", "bob", "carol"} {
		line, _ := testKey(t, a)
		fmt.Fprintf(&b, "\t%s: keys: [%q]\n", a, line)
	}
	b.WriteString("}\n")
	if err := os.WriteFile(filepath.Join(dir, "zz_identities.cue"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// keyCaller is this process, holding actor's test key (none for an actor
// without one, such as mallory).
func keyCaller(t *testing.T, actor string) reconcile.Caller {
	t.Helper()
	c := reconcile.Caller{UID: os.Getuid(), User: "nlx-test-runner"}
	if _, err := os.Stat(filepath.Join("..", "internal", "testkeys", actor+".pub")); err == nil {
		_, c.Key = testKey(t, actor)
	}
	return c
}

// withKeys is the example, with its actors' test keys, applied.
func withKeys(t *testing.T) *fixture {
	t.Helper()
	f := newFixture(t)
	if _, err := f.apply(f.plan(), reconcile.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	return f
}

func TestIdentityChangesWiden(t *testing.T) {
	f := withKeys(t)
	// The first identities were applied without approval (bootstrap);
	// a key added now is permission_widening, one removed is not.
	line, _ := testKey(t, "dave")
	f.edit("zz_identities.cue", "host: actors: {\n", fmt.Sprintf("host: actors: {\n\tdave: keys: [%q]\n", line))
	f.edit("host.cue", `bob: unix:   "bob"`, `bob: unix:   "robert"`)
	alice, _ := testKey(t, "alice")
	erin, _ := testKey(t, "erin")
	f.edit("zz_identities.cue", fmt.Sprintf("alice: keys: [%q]", alice), fmt.Sprintf("alice: keys: [%q, %q]", alice, erin))
	f.edit("host.cue", `carol: unix: "carol"`, ``) // removing an identity narrows
	p := f.planBy("ci")
	var reasons []string
	for _, c := range p.Changes {
		for _, r := range c.Risks {
			reasons = append(reasons, c.Address+" "+string(r.Code)+": "+r.Reason)
		}
	}
	want := []string{"host.config permission_widening: actor alice gets 1 key(s); actor bob is proven by OS user robert; actor dave gets an identity"}
	if strings.Join(reasons, "\n") != strings.Join(want, "\n") {
		t.Fatalf("risks:\n%s\nwant:\n%s", strings.Join(reasons, "\n"), strings.Join(want, "\n"))
	}
}

// signed is a signed approval of risk on address of p by actor with the
// test key of key, as the CLI hands verified signatures to apply.
func signed(t *testing.T, p *plan.Plan, address string, risk plan.RiskCode, actor, key string, expires time.Time) reconcile.SignedApproval {
	_, fp := testKey(t, key)
	return reconcile.SignedApproval{Key: fp, Approval: reconcile.Approval{PlanHash: p.PlanHash, Address: address, Risk: risk,
		Actor: actor, Reason: "signed", CreatedAt: time.Now(), ExpiresAt: expires,
		Signature: fmt.Sprintf("sha256:%s-%s-%s-%s-%d", p.PlanHash[7:19], address, risk, key, expires.Unix()), Source: "test"}}
}

func TestSignedApprovals(t *testing.T) {
	later := time.Now().Add(time.Hour)
	type build func(t *testing.T, p *plan.Plan) []reconcile.SignedApproval
	both := func(actor, key string, expires time.Time) build {
		return func(t *testing.T, p *plan.Plan) []reconcile.SignedApproval {
			return []reconcile.SignedApproval{
				signed(t, p, "job.bob-inbox-triage", plan.RiskDestructive, actor, key, expires),
				signed(t, p, "workspace.alice", plan.RiskPermissionWidening, actor, key, expires),
			}
		}
	}
	tests := []struct {
		name      string
		plannedBy string
		signed    build
		consumed  bool // the signatures were already used
		want      reason.Code
		msg       string
	}{
		{name: "an operator's key", plannedBy: "ci", signed: both("alice", "alice", later)},
		{name: "a key nobody has", plannedBy: "ci", signed: both("alice", "dave", later), want: reason.ApprovalKeyUnknown, msg: "which is no actor's in the applied state"},
		{name: "another actor's key", plannedBy: "ci", signed: both("alice", "bob", later), want: reason.ApprovalKeyUnknown, msg: "which is bob's"},
		{name: "expired", plannedBy: "ci", signed: both("alice", "alice", time.Now().Add(-time.Second)), want: reason.ApprovalExpired},
		{name: "replayed", plannedBy: "ci", signed: both("alice", "alice", later), consumed: true, want: reason.ApprovalReplayed, msg: "was used by apply 7"},
		{name: "not an admin", plannedBy: "ci", signed: both("bob", "bob", later), want: reason.ApproverNotAdmin},
		{name: "two-person rule", plannedBy: "alice", signed: both("alice", "alice", later), want: reason.TwoPersonRule},
		{name: "a change the plan does not make", plannedBy: "ci", want: reason.ApprovalMismatch, msg: "names a change the plan does not make",
			signed: func(t *testing.T, p *plan.Plan) []reconcile.SignedApproval {
				return []reconcile.SignedApproval{signed(t, p, "job.nightly-digest", plan.RiskDestructive, "alice", "alice", later)}
			}},
		{name: "a risk the change does not carry", plannedBy: "ci", want: reason.ApprovalMismatch, msg: "names a risk change workspace.alice does not carry",
			signed: func(t *testing.T, p *plan.Plan) []reconcile.SignedApproval {
				return []reconcile.SignedApproval{signed(t, p, "workspace.alice", plan.RiskDestructive, "alice", "alice", later)}
			}},
		// A first round that expired beside a fresh one: the fresh one
		// counts, the plan applies.
		{name: "an expired round beside a fresh one", plannedBy: "ci",
			signed: func(t *testing.T, p *plan.Plan) []reconcile.SignedApproval {
				return append(both("alice", "alice", time.Now().Add(-time.Minute))(t, p), both("alice", "alice", later)(t, p)...)
			}},
		// Without a valid one, the most telling problem is the code.
		{name: "expired and of an unknown key", plannedBy: "ci", want: reason.ApprovalKeyUnknown, msg: "approval_expired: the signed approval",
			signed: func(t *testing.T, p *plan.Plan) []reconcile.SignedApproval {
				return append(both("alice", "alice", time.Now().Add(-time.Minute))(t, p), both("alice", "dave", later)(t, p)...)
			}},
		{name: "another plan's", plannedBy: "ci", want: reason.ApprovalMissing, msg: "(2 signed approval(s) of other plans were ignored)",
			signed: func(t *testing.T, p *plan.Plan) []reconcile.SignedApproval {
				other := *p
				other.PlanHash = "sha256:" + strings.Repeat("ab", 32)
				return both("alice", "alice", later)(t, &other)
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := withKeys(t)
			riskyEdits(f)
			p := f.planBy(tt.plannedBy)
			list := tt.signed(t, p)
			if tt.consumed {
				f.store.approvals = func(recorded []reconcile.Approval) []reconcile.Approval {
					for _, s := range list {
						a := s.Approval
						a.ID, a.Consumed, a.ConsumedBy = 99, true, 7
						recorded = append(recorded, a)
					}
					return recorded
				}
			}
			before := f.fingerprint()
			ledger, err := f.apply(p, reconcile.ApplyOptions{Signed: list})
			if got := refusal(err); got != tt.want {
				t.Fatalf("apply: %q (%v), want %q", got, err, tt.want)
			}
			if tt.want != "" {
				if !strings.Contains(err.Error(), tt.msg) {
					t.Fatalf("apply: %v, want it to say %q", err, tt.msg)
				}
				if f.fingerprint() != before {
					t.Fatal("a refused apply changed the state")
				}
				return
			}
			if len(ledger.Approvals) != 2 {
				t.Fatalf("approvals used: %v", ledger.Approvals)
			}
			recorded, err := f.db.Approvals(t.Context(), p.PlanHash)
			if err != nil || len(recorded) != 2 {
				t.Fatalf("recorded approvals: %v, %v", recorded, err)
			}
			_, fp := testKey(t, "alice")
			for _, a := range recorded {
				if !a.Consumed || a.Proof != "key:"+fp || a.Signature == "" {
					t.Errorf("recorded approval %+v: want consumed, proven by alice's key, with its signature", a)
				}
			}
		})
	}
}
