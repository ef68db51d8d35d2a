package state_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/nlx-dev/nlx/plan"
	"github.com/nlx-dev/nlx/reconcile"
	"github.com/nlx-dev/nlx/schema"
	"github.com/nlx-dev/nlx/state"
)

// applyRow is a row of the applies table.
type applyRow struct {
	PlanHash, Actor           string
	SerialBefore, SerialAfter int64
	StartedAt                 string
	FinishedAt                sql.NullString
	Status                    string
	Committed, Failed         int64
	Error                     sql.NullString
}

func readApply(t *testing.T, db *sql.DB, id int64) applyRow {
	t.Helper()
	var r applyRow
	err := db.QueryRow(`SELECT plan_hash, actor, serial_before, serial_after, started_at, finished_at, status, committed, failed, error
		FROM applies WHERE id = ?`, id).Scan(&r.PlanHash, &r.Actor, &r.SerialBefore, &r.SerialAfter, &r.StartedAt, &r.FinishedAt,
		&r.Status, &r.Committed, &r.Failed, &r.Error)
	if err != nil {
		t.Fatalf("read apply %d: %v", id, err)
	}
	return r
}

// fixture is a state with the lock held.
type fixture struct {
	path    string
	db      *state.DB
	raw     *sql.DB
	lock    *reconcile.Lock
	lineage string
}

func newFixture(t *testing.T, at string) *fixture {
	t.Helper()
	ctx := context.Background()
	f := &fixture{path: statePath(t)}
	f.db = open(t, f.path, state.Options{Now: clock(at)})
	f.raw = raw(t, f.path)
	var err error
	if f.lock, err = f.db.Lock(ctx, "apply"); err != nil {
		t.Fatal(err)
	}
	if f.lineage, _, err = f.db.Meta(ctx); err != nil {
		t.Fatal(err)
	}
	return f
}

// apply runs one whole apply of cs as reconcile.Apply would, in one batch.
func (f *fixture) apply(t *testing.T, planHash string, cs []plan.Change) (id, serial int64) {
	t.Helper()
	ctx := context.Background()
	_, before, err := f.db.Meta(ctx)
	if err != nil {
		t.Fatal(err)
	}
	id, serial, err = f.db.BeginApply(ctx, f.lock.ID, planHash, "alice", f.lineage, before)
	if err != nil {
		t.Fatalf("BeginApply: %v", err)
	}
	if err := f.db.Intend(ctx, id, cs); err != nil {
		t.Fatalf("Intend: %v", err)
	}
	if err := f.db.Commit(ctx, id, serial, cs, nil, nil); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	if err := f.db.FinishApply(ctx, id, reconcile.ApplyResult{Committed: len(cs)}); err != nil {
		t.Fatalf("FinishApply: %v", err)
	}
	return id, serial
}

func TestBeginApplyRefuses(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name   string
		begin  func(f *fixture) error
		locked bool // the error wraps ErrNotLocked
	}{
		{"lock not held", func(f *fixture) error {
			_, _, err := f.db.BeginApply(ctx, "0123456789abcdef", "sha256:p", "alice", f.lineage, 0)
			return err
		}, true},
		{"lock released", func(f *fixture) error {
			if err := f.db.Unlock(ctx, f.lock.ID); err != nil {
				return fmt.Errorf("fixture: %w", err)
			}
			_, _, err := f.db.BeginApply(ctx, f.lock.ID, "sha256:p", "alice", f.lineage, 0)
			return err
		}, true},
		{"other lineage", func(f *fixture) error {
			_, _, err := f.db.BeginApply(ctx, f.lock.ID, "sha256:p", "alice", "00000000-0000-4000-8000-000000000000", 0)
			return err
		}, false},
		{"serial behind", func(f *fixture) error {
			_, _, err := f.db.BeginApply(ctx, f.lock.ID, "sha256:p", "alice", f.lineage, -1)
			return err
		}, false},
		{"serial ahead", func(f *fixture) error {
			_, _, err := f.db.BeginApply(ctx, f.lock.ID, "sha256:p", "alice", f.lineage, 1)
			return err
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, "2026-02-03T04:05:06Z")
			err := tt.begin(f)
			if err == nil {
				t.Fatal("BeginApply succeeded, want a refusal")
			}
			if got := errors.Is(err, state.ErrNotLocked); got != tt.locked {
				t.Errorf("BeginApply: %v; errors.Is(ErrNotLocked) = %v, want %v", err, got, tt.locked)
			}
			lineage, serial, err := f.db.Meta(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if lineage != f.lineage || serial != 0 {
				t.Errorf("after the refusal: lineage %s serial %d, want %s serial 0", lineage, serial, f.lineage)
			}
			if got := queryInt(t, f.raw, `SELECT count(*) FROM applies`); got != 0 {
				t.Errorf("after the refusal: %d applies recorded, want 0", got)
			}
		})
	}
}

func TestApplyBookkeeping(t *testing.T) {
	ctx := context.Background()
	const at = "2026-02-03T04:05:06Z"
	f := newFixture(t, at)
	seed, batch := changes(t, "seed.json"), changes(t, "changes.json")

	// First apply: the seed resources, all creates.
	seedID, seedSerial := f.apply(t, "sha256:seed", seed)
	if seedSerial != 1 {
		t.Fatalf("first apply: serial %d, want 1", seedSerial)
	}

	// Second apply, step by step: update, replace, delete and create.
	id, serial, err := f.db.BeginApply(ctx, f.lock.ID, "sha256:second", "bob", f.lineage, 1)
	if err != nil {
		t.Fatal(err)
	}
	if id == seedID || serial != 2 {
		t.Errorf("BeginApply = id %d serial %d; want a new id (not %d) and serial 2", id, serial, seedID)
	}
	if _, got, _ := f.db.Meta(ctx); got != 2 {
		t.Errorf("serial after BeginApply = %d, want 2", got)
	}
	want := applyRow{PlanHash: "sha256:second", Actor: "bob", SerialBefore: 1, SerialAfter: 2, StartedAt: at, Status: "running"}
	if got := readApply(t, f.raw, id); got != want {
		t.Errorf("apply row after BeginApply:\n got %+v\nwant %+v", got, want)
	}

	if err := f.db.Intend(ctx, id, batch); err != nil {
		t.Fatal(err)
	}
	journal, err := f.db.Journal(ctx)
	if err != nil {
		t.Fatal(err)
	}
	intended := journalOf(journal, id)
	var wantIntended []string
	for _, c := range batch {
		wantIntended = append(wantIntended, fmt.Sprintf("%s %s intended %s", c.Address, c.Action, at))
	}
	if !reflect.DeepEqual(intended, wantIntended) {
		t.Errorf("journal after Intend:\n got %q\nwant %q", intended, wantIntended)
	}
	if got := queryInt(t, f.raw, `SELECT committed FROM applies WHERE id = ?`, id); got != 0 {
		t.Errorf("applies.committed after Intend = %d, want 0", got)
	}

	if err := f.db.Commit(ctx, id, serial, batch, nil, nil); err != nil {
		t.Fatal(err)
	}

	// Resources: the seed's, then this batch's on top.
	wantRows := map[string]state.Row{}
	for _, cs := range []struct {
		serial  int64
		changes []plan.Change
	}{{seedSerial, seed}, {serial, batch}} {
		for _, c := range cs.changes {
			if c.Action == plan.Delete {
				delete(wantRows, c.Address)
				continue
			}
			wantRows[c.Address] = state.Row{
				Resource: reconcile.Resource{Kind: c.Kind, Name: c.Name, Hash: reconcile.HashSpec(c.After), Status: "active"},
				Address:  c.Address, Serial: cs.serial, UpdatedAt: at,
			}
		}
	}
	rows, err := f.db.Rows(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var wantList []state.Row
	for _, r := range wantRows {
		wantList = append(wantList, r)
	}
	sort.Slice(wantList, func(i, j int) bool { return wantList[i].Address < wantList[j].Address })
	if !reflect.DeepEqual(rows, wantList) {
		t.Errorf("Rows after the second apply:\n got %+v\nwant %+v", rows, wantList)
	}
	for _, c := range batch {
		r, err := f.db.Resource(ctx, c.Address)
		if err != nil {
			t.Fatal(err)
		}
		if c.Action == plan.Delete {
			if r != nil {
				t.Errorf("Resource(%s) after delete = %+v, want none", c.Address, r)
			}
			continue
		}
		if r == nil {
			t.Errorf("Resource(%s) = none after %s", c.Address, c.Action)
			continue
		}
		if !bytes.Equal(r.Spec, c.After) {
			t.Errorf("Resource(%s).Spec = %s, want the change's After byte for byte: %s", c.Address, r.Spec, c.After)
		}
		if r.Hash != reconcile.HashSpec(c.After) || r.Serial != serial {
			t.Errorf("Resource(%s) = hash %s serial %d, want %s serial %d", c.Address, r.Hash, r.Serial, reconcile.HashSpec(c.After), serial)
		}
	}

	journal, err = f.db.Journal(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wantJournal := wantIntended
	for _, c := range batch {
		wantJournal = append(wantJournal, fmt.Sprintf("%s %s committed %s", c.Address, c.Action, at))
	}
	if got := journalOf(journal, id); !reflect.DeepEqual(got, wantJournal) {
		t.Errorf("journal of apply %d:\n got %q\nwant %q", id, got, wantJournal)
	}
	if got, want := len(journal), 2*len(seed)+2*len(batch); got != want {
		t.Errorf("%d journal rows in all, want %d", got, want)
	}
	for i := 1; i < len(journal); i++ {
		if journal[i].ID <= journal[i-1].ID {
			t.Errorf("Journal() not in order: id %d after %d", journal[i].ID, journal[i-1].ID)
		}
	}
	if got := queryInt(t, f.raw, `SELECT committed FROM applies WHERE id = ?`, id); got != int64(len(batch)) {
		t.Errorf("applies.committed = %d, want %d", got, len(batch))
	}

	// A second Commit to the same apply adds to the count.
	extra := []plan.Change{{Address: "skill.late", Kind: schema.KindSkill, Name: "late", Action: plan.Create, After: []byte(`{"version":"0.1.0"}`)}}
	if err := f.db.Commit(ctx, id, serial, extra, nil, nil); err != nil {
		t.Fatal(err)
	}
	if got := queryInt(t, f.raw, `SELECT committed FROM applies WHERE id = ?`, id); got != int64(len(batch)+1) {
		t.Errorf("applies.committed after a second batch = %d, want %d", got, len(batch)+1)
	}

	if err := f.db.FinishApply(ctx, id, reconcile.ApplyResult{Committed: len(batch) + 1}); err != nil {
		t.Fatal(err)
	}
	want = applyRow{PlanHash: "sha256:second", Actor: "bob", SerialBefore: 1, SerialAfter: 2, StartedAt: at,
		FinishedAt: sql.NullString{String: at, Valid: true}, Status: "completed", Committed: int64(len(batch) + 1)}
	if got := readApply(t, f.raw, id); got != want {
		t.Errorf("apply row after FinishApply:\n got %+v\nwant %+v", got, want)
	}

	snap, err := f.db.SnapshotLocked(ctx, f.lock.ID)
	if err != nil {
		t.Fatal(err)
	}
	if snap.Lineage != f.lineage || snap.Serial != 2 {
		t.Errorf("Snapshot: lineage %s serial %d, want %s serial 2", snap.Lineage, snap.Serial, f.lineage)
	}
	specs := map[string][]byte{"skill.late": extra[0].After}
	for _, cs := range [][]plan.Change{seed, batch} {
		for _, c := range cs {
			specs[c.Address] = c.After
		}
	}
	var addrs []string
	for i := range snap.Resources {
		r := &snap.Resources[i]
		addrs = append(addrs, r.Address())
		if !bytes.Equal(r.Spec, specs[r.Address()]) || r.Hash != reconcile.HashSpec(specs[r.Address()]) || r.Status != "active" {
			t.Errorf("Snapshot resource %s = spec %s hash %s status %s; want spec %s hash %s status active",
				r.Address(), r.Spec, r.Hash, r.Status, specs[r.Address()], reconcile.HashSpec(specs[r.Address()]))
		}
	}
	wantAddrs := []string{"connection.alice-codex", "job.nightly-digest", "provider.codex", "skill.late", "workspace.alpha"}
	if !reflect.DeepEqual(addrs, wantAddrs) {
		t.Errorf("Snapshot addresses:\n got %q\nwant %q (sorted, without the deleted skill)", addrs, wantAddrs)
	}
}

// journalOf renders the journal rows of one apply.
func journalOf(journal []state.JournalEntry, applyID int64) []string {
	var out []string
	for _, e := range journal {
		if e.ApplyID == applyID {
			out = append(out, fmt.Sprintf("%s %s %s %s", e.Address, e.Action, e.Phase, e.At))
		}
	}
	return out
}

func TestFinishApplyFailed(t *testing.T) {
	ctx := context.Background()
	const at = "2026-02-03T04:05:06Z"
	f := newFixture(t, at)
	id, _, err := f.db.BeginApply(ctx, f.lock.ID, "sha256:p", "alice", f.lineage, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.db.FinishApply(ctx, id, reconcile.ApplyResult{Committed: 0, Failed: 3, Err: errors.New("apply workspace.alpha: boom")}); err != nil {
		t.Fatal(err)
	}
	want := applyRow{PlanHash: "sha256:p", Actor: "alice", SerialBefore: 0, SerialAfter: 1, StartedAt: at,
		FinishedAt: sql.NullString{String: at, Valid: true}, Status: "failed", Failed: 3,
		Error: sql.NullString{String: "apply workspace.alpha: boom", Valid: true}}
	if got := readApply(t, f.raw, id); got != want {
		t.Errorf("apply row after a failed FinishApply:\n got %+v\nwant %+v", got, want)
	}
}

func TestCommitAtomic(t *testing.T) {
	ctx := context.Background()
	cancelled, cancel := context.WithCancel(ctx)
	cancel()

	create := func(name string, after string) plan.Change {
		c := plan.Change{Address: "workspace." + name, Kind: schema.KindWorkspace, Name: name, Action: plan.Create}
		if after != "" {
			c.After = []byte(after)
		}
		return c
	}
	tests := []struct {
		name  string
		ctx   context.Context
		apply func(f *fixture, id int64) int64 // the apply id to commit to
		batch []plan.Change
		want  func(error) bool
	}{
		// A change with no spec fails in the middle of the batch, after
		// the first was written.
		{"missing spec mid-batch", ctx, nil, []plan.Change{
			create("one", `{"policy":"read_only"}`),
			{Address: "workspace.alpha", Kind: schema.KindWorkspace, Name: "alpha", Action: plan.Update},
			create("three", `{"policy":"read_only"}`),
		}, func(err error) bool {
			return strings.Contains(err.Error(), "apply workspace.alpha") && strings.Contains(err.Error(), "no spec")
		}},
		// An apply id that holds no lock (unknown, or its lock released)
		// writes nothing.
		{"unknown apply", ctx, func(f *fixture, id int64) int64 { return id + 100 }, []plan.Change{
			create("one", `{"policy":"read_only"}`),
			create("two", `{"policy":"read_only"}`),
		}, func(err error) bool { return errors.Is(err, state.ErrNotLocked) }},
		{"lock released since the apply began", ctx, func(f *fixture, id int64) int64 {
			if err := f.db.Unlock(ctx, f.lock.ID); err != nil {
				t.Fatal(err)
			}
			return id
		}, []plan.Change{create("one", `{"policy":"read_only"}`)}, func(err error) bool { return errors.Is(err, state.ErrNotLocked) }},
		{"cancelled context", cancelled, nil, []plan.Change{
			create("one", `{"policy":"read_only"}`),
			{Address: "workspace.alpha", Kind: schema.KindWorkspace, Name: "alpha", Action: plan.Delete},
		}, func(err error) bool { return errors.Is(err, context.Canceled) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, "2026-02-03T04:05:06Z")
			f.apply(t, "sha256:seed", []plan.Change{create("alpha", `{"policy":"read_only"}`)})
			id, serial, err := f.db.BeginApply(ctx, f.lock.ID, "sha256:p", "alice", f.lineage, 1)
			if err != nil {
				t.Fatal(err)
			}
			if err := f.db.Intend(ctx, id, tt.batch); err != nil {
				t.Fatal(err)
			}
			beforeRows, err := f.db.Rows(ctx)
			if err != nil {
				t.Fatal(err)
			}
			beforeJournal, err := f.db.Journal(ctx)
			if err != nil {
				t.Fatal(err)
			}
			commitTo := id
			if tt.apply != nil {
				commitTo = tt.apply(f, id)
			}

			err = f.db.Commit(tt.ctx, commitTo, serial, tt.batch, nil, nil)
			if err == nil {
				t.Fatal("Commit succeeded, want an error")
			}
			if !tt.want(err) {
				t.Errorf("Commit: %v; not the failure this case provokes", err)
			}

			if rows, err := f.db.Rows(ctx); err != nil || !reflect.DeepEqual(rows, beforeRows) {
				t.Errorf("resources after the failed Commit:\n got %+v (%v)\nwant %+v", rows, err, beforeRows)
			}
			if journal, err := f.db.Journal(ctx); err != nil || !reflect.DeepEqual(journal, beforeJournal) {
				t.Errorf("journal after the failed Commit:\n got %+v (%v)\nwant %+v", journal, err, beforeJournal)
			}
			if got := queryInt(t, f.raw, `SELECT committed FROM applies WHERE id = ?`, id); got != 0 {
				t.Errorf("applies.committed after the failed Commit = %d, want 0", got)
			}
			if strings.HasPrefix(tt.name, "lock released") {
				return // this apply may never write again
			}
			// The state is still usable: the same batch, fixed, commits.
			fixed := append([]plan.Change(nil), tt.batch...)
			for i := range fixed {
				if fixed[i].Action != plan.Delete && fixed[i].After == nil {
					fixed[i].After = []byte(`{"policy":"workspace_write"}`)
				}
			}
			if err := f.db.Commit(ctx, id, serial, fixed, nil, nil); err != nil {
				t.Fatalf("Commit of the fixed batch: %v", err)
			}
			if got := queryInt(t, f.raw, `SELECT committed FROM applies WHERE id = ?`, id); got != int64(len(fixed)) {
				t.Errorf("applies.committed after the fixed Commit = %d, want %d", got, len(fixed))
			}
		})
	}
}

// TestSnapshotConsistent reads snapshots while another connection keeps
// bumping the serial and rewriting every resource with that serial in its
// spec, both in one transaction: a snapshot that mixed two moments would show
// a resource whose generation is not the snapshot's serial.
func TestSnapshotConsistent(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, "2026-02-03T04:05:06Z")
	var seed []plan.Change
	for _, n := range []string{"alpha", "beta", "gamma", "delta"} {
		seed = append(seed, plan.Change{Address: "workspace." + n, Kind: schema.KindWorkspace, Name: n, Action: plan.Create,
			After: []byte(`{"gen":1}`)})
	}
	f.apply(t, "sha256:seed", seed)

	const writes = 200
	done := make(chan struct{})
	var werr error
	go func() {
		defer close(done)
		for range writes {
			tx, err := f.raw.BeginTx(ctx, nil)
			if err != nil {
				werr = err
				return
			}
			_, err = tx.Exec(`UPDATE lineage SET serial = serial + 1`)
			if err == nil {
				_, err = tx.Exec(`UPDATE resources SET spec = '{"gen":' || (SELECT serial FROM lineage) || '}'`)
			}
			if err == nil {
				err = tx.Commit()
			} else {
				tx.Rollback()
			}
			if err != nil {
				werr = err
				return
			}
		}
	}()

	var reads int
	for stop := false; !stop; {
		select {
		case <-done:
			stop = true // one more read after the last write
		default:
		}
		snap, err := f.db.SnapshotLocked(ctx, f.lock.ID)
		if err != nil {
			t.Fatal(err)
		}
		reads++
		if len(snap.Resources) != len(seed) {
			t.Fatalf("snapshot at serial %d has %d resources, want %d", snap.Serial, len(snap.Resources), len(seed))
		}
		want := fmt.Sprintf(`{"gen":%d}`, snap.Serial)
		for _, r := range snap.Resources {
			if string(r.Spec) != want {
				t.Fatalf("inconsistent snapshot: %s has %s at serial %d, want %s", r.Address(), r.Spec, snap.Serial, want)
			}
		}
	}
	if werr != nil {
		t.Fatal(werr)
	}
	if _, serial, err := f.db.Meta(ctx); err != nil || serial != writes+1 {
		t.Errorf("final serial %d (%v), want %d", serial, err, writes+1)
	}
	t.Logf("%d consistent snapshots", reads)
}
