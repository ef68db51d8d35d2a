package reconcile_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/nlx-dev/nlx/internal/reason"
	"github.com/nlx-dev/nlx/internal/testgen"
	"github.com/nlx-dev/nlx/plan"
	"github.com/nlx-dev/nlx/reconcile"
	"github.com/nlx-dev/nlx/schema"
	"github.com/nlx-dev/nlx/state"
)

// fixture is a copy of the pi-team example and a real state file.
type fixture struct {
	t   *testing.T
	dir string
	db  *state.DB
	// snapshot, when set, changes the applied state a plan is made from:
	// what the state gets from outside an apply (a held import, a dead
	// apply's unknown outcome), as the planner sees it.
	snapshot func(*reconcile.Snapshot)
	// store is the state as apply and approve see it: the real one, with
	// what tests change of it between plan and apply.
	store *tampered
}

// tampered is a real state whose reads a test changes, as the world
// outside nlx might between a plan and its apply (a restored backup, an
// approval another apply used, a serial moved on).
type tampered struct {
	*state.DB
	approvals func([]reconcile.Approval) []reconcile.Approval
	locked    func(*reconcile.Snapshot) // the snapshot apply reads under the lock
	serial    int64                     // added to the serial Meta reads
}

var (
	_ reconcile.Store         = (*tampered)(nil)
	_ reconcile.ApprovalStore = (*tampered)(nil)
)

func (t *tampered) Approvals(ctx context.Context, planHash string) ([]reconcile.Approval, error) {
	a, err := t.DB.Approvals(ctx, planHash)
	if err == nil && t.approvals != nil {
		a = t.approvals(a)
	}
	return a, err
}

func (t *tampered) SnapshotLocked(ctx context.Context, lockID string) (*reconcile.Snapshot, error) {
	s, err := t.DB.SnapshotLocked(ctx, lockID)
	if err == nil && t.locked != nil {
		t.locked(s)
	}
	return s, err
}

func (t *tampered) Meta(ctx context.Context) (string, int64, error) {
	l, s, err := t.DB.Meta(ctx)
	return l, s + t.serial, err
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "cfg")
	copyDir(t, "../examples/pi-team", dir)
	writeKeys(t, dir) // the actors prove themselves by their test keys
	db, err := state.Open(context.Background(), filepath.Join(t.TempDir(), "state.db"), state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return &fixture{t: t, dir: dir, db: db, store: &tampered{DB: db}}
}

func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	if err := testgen.CopyTree(src, dst); err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) plan() *plan.Plan {
	f.t.Helper()
	return f.planBy("")
}

func (f *fixture) apply(p *plan.Plan, opts reconcile.ApplyOptions) (*reconcile.Ledger, error) {
	if opts.ConfigDir == "" {
		opts.ConfigDir = f.dir
	}
	if opts.Actor == "" {
		opts.Actor = "test"
	}
	if opts.Config == nil {
		opts.Config = f.load
	}
	return reconcile.Apply(context.Background(), f.store, p, opts)
}

// load evaluates the fixture's config, as apply's re-derivation does.
func (f *fixture) load(ctx context.Context) (*schema.Config, error) {
	return schema.Load(ctx, f.dir)
}

// fingerprint is everything apply may write: a refusal must leave it as is.
func (f *fixture) fingerprint() string {
	f.t.Helper()
	ctx := context.Background()
	snap, err := f.db.Snapshot(ctx)
	if err != nil {
		f.t.Fatal(err)
	}
	journal, err := f.db.Journal(ctx)
	if err != nil {
		f.t.Fatal(err)
	}
	var b strings.Builder
	b.WriteString(snap.Lineage)
	b.WriteString(string(rune('0' + snap.Serial)))
	for _, r := range snap.Resources {
		b.WriteString(r.Address() + r.Hash)
	}
	for _, j := range journal {
		b.WriteString(j.Address + string(j.Phase))
	}
	return b.String()
}

func (f *fixture) edit(file, old, new string) {
	f.t.Helper()
	path := filepath.Join(f.dir, file)
	data, err := os.ReadFile(path)
	if err != nil {
		f.t.Fatal(err)
	}
	if !strings.Contains(string(data), old) {
		f.t.Fatalf("%s lacks %q", file, old)
	}
	if err := os.WriteFile(path, []byte(strings.Replace(string(data), old, new, 1)), 0o644); err != nil {
		f.t.Fatal(err)
	}
}

func TestApplyConverges(t *testing.T) {
	f := newFixture(t)
	p := f.plan()
	if p.Summary.Add != 17 {
		t.Fatalf("first plan: %+v", p.Summary)
	}
	ledger, err := f.apply(p, reconcile.ApplyOptions{BatchSize: 3})
	if err != nil {
		t.Fatal(err)
	}
	if ledger.SerialBefore != 0 || ledger.SerialAfter != 1 || ledger.Summary.Add != 17 {
		t.Errorf("ledger: %+v", ledger)
	}
	if again := f.plan(); !again.Empty() {
		t.Fatalf("plan after apply has %d changes", len(again.Changes))
	}
	// The state holds exactly the desired specs.
	cfg, _ := schema.Load(context.Background(), f.dir)
	desired, _ := reconcile.Desired(cfg)
	snap, _ := f.db.Snapshot(context.Background())
	if len(snap.Resources) != len(desired) {
		t.Fatalf("state has %d resources, want %d", len(snap.Resources), len(desired))
	}
	for i := range desired {
		got := snap.Resources[i]
		found := false
		for _, d := range desired {
			if d.Address() == got.Address() {
				found = string(d.Spec) == string(got.Spec) && d.Hash == got.Hash
			}
		}
		if !found {
			t.Errorf("%s in the state does not match the config", got.Address())
		}
	}
	journal, _ := f.db.Journal(context.Background())
	phases := map[string]int{}
	for _, j := range journal {
		phases[string(j.Phase)]++
	}
	if phases["intended"] != 17 || phases["committed"] != 17 || len(journal) != 34 {
		t.Errorf("journal phases: %v", phases)
	}

	// An edit and a delete, applied: serial bumped once more.
	f.edit("jobs.cue", `"30 6 * * 1-5"`, `"0 7 * * 1-5"`)
	f.edit("providers.cue", `capabilities: ["tools", "skills"]`, `capabilities: ["tools"]`)
	p = f.plan()
	ledger, err = f.apply(p, reconcile.ApplyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ledger.SerialAfter != 2 || ledger.Summary.Change != 2 {
		t.Errorf("ledger: %+v", ledger)
	}
	if !f.plan().Empty() {
		t.Error("plan after the second apply is not empty")
	}
}

func TestApplyRefusalsWriteNothing(t *testing.T) {
	tests := []struct {
		name  string
		setup func(f *fixture) (*plan.Plan, reconcile.ApplyOptions)
		code  reason.Code
	}{
		{
			name: "stale plan",
			setup: func(f *fixture) (*plan.Plan, reconcile.ApplyOptions) {
				old := f.plan()
				f.edit("jobs.cue", `"30 6 * * 1-5"`, `"0 7 * * 1-5"`)
				if _, err := f.apply(f.plan(), reconcile.ApplyOptions{}); err != nil {
					f.t.Fatal(err)
				}
				f.edit("jobs.cue", `"0 7 * * 1-5"`, `"30 6 * * 1-5"`) // config as old was planned
				return old, reconcile.ApplyOptions{}
			},
			code: reason.StalePlan,
		},
		{
			name: "other lineage",
			setup: func(f *fixture) (*plan.Plan, reconcile.ApplyOptions) {
				p := f.plan()
				p.State.Lineage = "00000000-0000-4000-8000-000000000000"
				return p, reconcile.ApplyOptions{}
			},
			code: reason.LineageMismatch,
		},
		{
			name: "config changed",
			setup: func(f *fixture) (*plan.Plan, reconcile.ApplyOptions) {
				p := f.plan()
				f.edit("workspaces.cue", `cpu: 0.5`, `cpu: 0.75`)
				return p, reconcile.ApplyOptions{}
			},
			code: reason.ConfigChanged,
		},
		{
			name: "config file added",
			setup: func(f *fixture) (*plan.Plan, reconcile.ApplyOptions) {
				p := f.plan()
				if err := os.WriteFile(filepath.Join(f.dir, "extra.cue"), []byte("package pihost\n"), 0o644); err != nil {
					f.t.Fatal(err)
				}
				return p, reconcile.ApplyOptions{}
			},
			code: reason.ConfigChanged,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			p, opts := tt.setup(f)
			before := f.fingerprint()
			_, err := f.apply(p, opts)
			var r *reason.Error
			if !errors.As(err, &r) || r.Code != tt.code {
				t.Fatalf("got %v, want refusal %s", err, tt.code)
			}
			if after := f.fingerprint(); after != before {
				t.Errorf("the refused apply wrote to the state")
			}
			if h, _ := f.db.LockHolder(context.Background()); h != nil {
				t.Errorf("the lock is still held by %v", h)
			}
		})
	}
}

// failingStore fails the nth Commit.
type failingStore struct {
	*state.DB
	n, calls int
}

func (s *failingStore) Commit(ctx context.Context, applyID, serial int64, changes []plan.Change, approvals []reconcile.Approval, imports map[string]*reconcile.Import) error {
	s.calls++
	if s.calls == s.n {
		return errors.New("disk on fire")
	}
	return s.DB.Commit(ctx, applyID, serial, changes, approvals, imports)
}

func TestApplyPartialFailureReportsWhatHappened(t *testing.T) {
	f := newFixture(t)
	p := f.plan()
	store := &failingStore{DB: f.db, n: 2}
	ledger, err := reconcile.Apply(context.Background(), store, p, reconcile.ApplyOptions{BatchSize: 5, Actor: "test", Config: f.load})
	if err == nil || !strings.Contains(err.Error(), "disk on fire") {
		t.Fatalf("got %v, want the commit failure", err)
	}
	var phases []string
	for _, e := range ledger.Entries {
		phases = append(phases, string(e.Phase))
	}
	want := []string{"committed", "committed", "committed", "committed", "committed",
		"failed", "failed", "failed", "failed", "failed",
		"not_started", "not_started", "not_started", "not_started", "not_started", "not_started", "not_started"}
	if !reflect.DeepEqual(phases, want) {
		t.Errorf("ledger phases:\ngot  %v\nwant %v", phases, want)
	}
	if ledger.SerialAfter != 1 || ledger.Summary.Add != 5 {
		t.Errorf("ledger: serial %d, summary %+v", ledger.SerialAfter, ledger.Summary)
	}
	snap, _ := f.db.Snapshot(context.Background())
	if len(snap.Resources) != 5 || snap.Serial != 1 {
		t.Errorf("state: %d resources at serial %d, want 5 at 1", len(snap.Resources), snap.Serial)
	}
	// The old plan is stale now; a new one finishes the job.
	if _, err := f.apply(p, reconcile.ApplyOptions{}); err == nil {
		t.Fatal("the same plan applied twice")
	}
	next := f.plan()
	if next.Summary.Add != 12 {
		t.Fatalf("next plan: %+v", next.Summary)
	}
	if _, err := f.apply(next, reconcile.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
}
