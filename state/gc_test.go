package state_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nlx-dev/nlx/internal/reason"
	"github.com/nlx-dev/nlx/plan"
	"github.com/nlx-dev/nlx/reconcile"
	"github.com/nlx-dev/nlx/schema"
	"github.com/nlx-dev/nlx/state"
)

// The times of the gc fixture: old is long before the retention's cutoff
// (90 days before gcNow), recent just before gcNow.
var (
	gcOld    = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	gcRecent = time.Date(2026, 5, 31, 0, 0, 0, 0, time.UTC)
	gcNow    = time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
)

// gcFixture is a state holding some of everything gc decides on, settled
// and live, old and recent, with the lock held.
type gcFixture struct {
	db    *state.DB
	raw   *sql.DB
	lock  string
	apply map[string]string // name -> apply id
	now   *time.Time
}

func newGCFixture(t *testing.T) *gcFixture {
	t.Helper()
	ctx := context.Background()
	now := gcOld
	path := statePath(t)
	f := &gcFixture{apply: map[string]string{}, now: &now}
	f.db = open(t, path, state.Options{Now: func() time.Time { return *f.now }})
	f.raw = raw(t, path)
	lock, err := f.db.Lock(ctx, "apply")
	if err != nil {
		t.Fatal(err)
	}
	f.lock = lock.ID
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	at := func(d time.Duration) { now = gcOld.Add(d) }
	change := func(address string) []plan.Change {
		kind, name, _ := strings.Cut(address, ".")
		return []plan.Change{{Address: address, Kind: schema.Kind(kind), Name: name, Action: plan.Create, After: json.RawMessage(`{}`)}}
	}
	begin := func(name string) (int64, int64) {
		t.Helper()
		lineage, serial, err := f.db.Meta(ctx)
		must(err)
		id, after, err := f.db.BeginApply(ctx, f.lock, "sha256:"+name, "alice", lineage, serial)
		must(err)
		f.apply[name] = strconv.FormatInt(id, 10)
		return id, after
	}
	// commit journals the changes committed and consumes the approvals
	// as Commit does (written here, so that the fixture does not follow
	// Commit's signature: only the rows matter to gc).
	commit := func(id int64, cs []plan.Change, approvals []int64) {
		t.Helper()
		must(f.db.Intend(ctx, id, cs))
		for _, c := range cs {
			_, err := f.raw.Exec(`INSERT INTO journal (apply_id, address, action, phase, at) VALUES (?, ?, ?, ?, ?)`,
				id, c.Address, string(c.Action), string(state.PhaseCommitted), state.FormatInstant(now))
			must(err)
		}
		for _, a := range approvals {
			_, err := f.raw.Exec(`UPDATE approvals SET consumed_at = ?, consumed_by = ? WHERE id = ?`, state.FormatInstant(now), id, a)
			must(err)
		}
		must(f.db.FinishApply(ctx, id, reconcile.ApplyResult{Committed: len(cs)}))
	}
	approve := func(address string) {
		t.Helper()
		must(f.db.RecordApprovals(ctx, f.lock, []reconcile.Approval{{PlanHash: "sha256:a", Address: address, Risk: plan.RiskDestructive,
			Actor: "alice", Reason: "r", CreatedAt: now, ExpiresAt: now.Add(time.Hour)}}))
	}

	// settled: state-only changes and a consumed approval.
	id, _ := begin("settled")
	approve("job.a")
	var approval int64
	must(f.raw.QueryRow(`SELECT max(id) FROM approvals`).Scan(&approval))
	commit(id, change("job.a"), []int64{approval})
	// effect: dispatched, then committed: settled by its outcome.
	id, _ = begin("effect")
	must(f.db.Dispatch(ctx, id, change("workspace.b")))
	commit(id, change("workspace.b"), nil)
	// resolved: dispatched, the apply died, the next one marked it
	// unknown and a person resolved it, an hour later.
	id, _ = begin("resolved")
	must(f.db.Dispatch(ctx, id, change("workspace.c")))
	must(f.db.FinishApply(ctx, id, reconcile.ApplyResult{Err: errors.New("died")}))
	if _, err := f.db.MarkUnknown(ctx, f.lock); err != nil {
		t.Fatal(err)
	}
	at(time.Hour)
	if _, _, err := f.db.Resolve(ctx, f.lock, "workspace.c", "not-applied", "alice", "nothing there"); err != nil {
		t.Fatal(err)
	}
	// open: dispatched and never ended: nobody knows.
	id, _ = begin("open")
	must(f.db.Dispatch(ctx, id, change("workspace.d")))
	must(f.db.FinishApply(ctx, id, reconcile.ApplyResult{Err: errors.New("died")}))
	// imported: named by the import of preservation gone.
	id, _ = begin("imported")
	commit(id, change("job.e"), nil)
	approve("job.unused") // the newest approval, never consumed

	// Launches: stopped long ago, still running, the launch of an unknown
	// claim's turn (below), and stopped recently.
	record := func(launch string) {
		t.Helper()
		must(f.db.RecordProcess(ctx, state.ProcessRow{LaunchID: launch, Workspace: "w", PID: 42, StartedAt: state.FormatInstant(now), Identity: "{}"}))
	}
	stop := func(launch string) { must(f.db.StopProcess(ctx, launch, "{}", state.FormatInstant(now))) }
	record("p-old")
	stop("p-old")
	record("turn-ts1")
	record("turn-ts2")
	stop("turn-ts2")

	// Claims.
	mustClaim := func(c state.ClaimRow) {
		t.Helper()
		if created, err := f.db.Claim(ctx, c); err != nil || !created {
			t.Fatalf("claim %s: %v %v", c.ID, created, err)
		}
	}
	skipped := func(id, job, due, conv string, trigger state.ClaimTrigger) state.ClaimRow {
		c := claim(id, job, due, conv)
		c.Phase, c.Trigger = state.ClaimSkipped, trigger
		return c
	}
	at(0)
	mustClaim(claim("c1", "daily", "2026-01-01T00:00:00Z", "daily"))
	must(f.db.BeginTurn(ctx, turnOf("td1", "c1")))
	must(f.db.EndTurn(ctx, "td1", state.TurnEnd{Status: state.TurnCompleted}))
	mustClaim(claim("s1", "stuck", "2026-01-01T00:00:00Z", "stuck-1"))
	must(f.db.BeginTurn(ctx, turnOf("ts1", "s1")))
	mustClaim(claim("s2", "stuck", "2026-01-01T00:00:01Z", "stuck-2"))
	must(f.db.BeginTurn(ctx, turnOf("ts2", "s2")))
	if ok, err := f.db.MarkClaimUnknown(ctx, "s2", "gone"); err != nil || !ok {
		t.Fatalf("mark s2 unknown: %v %v", ok, err)
	}
	mustClaim(claim("r1", "settled", "2026-01-01T00:00:00Z", "settled"))
	must(f.db.BeginTurn(ctx, turnOf("tr1", "r1")))
	if ok, err := f.db.MarkClaimUnknown(ctx, "r1", "gone"); err != nil || !ok {
		t.Fatalf("mark r1 unknown: %v %v", ok, err)
	}
	mustClaim(skipped("w1", "weekly", "2026-01-01T00:00:00Z", "weekly", state.TriggerSchedule))
	mustClaim(skipped("o1", "once", "2026-01-01T09:00:00Z", "once", state.TriggerSchedule))
	at(time.Hour)
	mustClaim(skipped("c2", "daily", "2026-01-01T01:00:00Z", "daily", state.TriggerSchedule))
	must(f.db.ResolveClaim(ctx, "r1", state.ClaimOutcomeFailed, "alice", "it failed"))
	at(2 * time.Hour)
	mustClaim(skipped("o2", "once", "2026-01-01T02:00:00.5Z", "once", state.TriggerManual))
	mustClaim(skipped("r2", "settled", "2026-01-01T02:00:00Z", "settled", state.TriggerSchedule))

	// Applied resources the claims and exports are judged by: a one-time
	// job, an imported job still held, a preservation whose export was
	// never imported.
	for _, r := range []struct{ address, spec, status string }{
		{"job.once", `{"schedule":{"at":"2026-01-01T09:00:00Z"}}`, string(reconcile.StatusActive)},
		{"job.imp-review", `{"schedule":{"every":"1h"}}`, string(reconcile.StatusHeld)},
		{"preservation.later", `{"export":"/exports/later"}`, string(reconcile.StatusActive)},
	} {
		kind, name, _ := strings.Cut(r.address, ".")
		_, err := f.raw.Exec(`INSERT INTO resources (address, kind, name, spec, spec_hash, status, serial, updated_at)
			VALUES (?, ?, ?, ?, 'sha256:x', ?, 1, ?)`, r.address, kind, name, r.spec, r.status, state.FormatInstant(gcOld))
		must(err)
	}
	// Imports: one whose jobs are all released, one with a job held, one
	// whose job has an unknown claim, one recent, and an old one sharing
	// the recent one's directory.
	for _, i := range []struct {
		preservation, dir string
		at                time.Time
		jobs              []string
	}{
		{"gone", "/exports/gone", gcOld, []string{"e"}},
		{"review", "/exports/review", gcOld, []string{"imp-review"}},
		{"unk", "/exports/unk", gcOld, []string{"stuck"}},
		{"new", "/exports/new", gcRecent, nil},
		{"twin", "/exports/new/", gcOld, nil},
	} {
		applyID := f.apply["imported"]
		if i.preservation != "gone" {
			applyID = "0"
		}
		_, err := f.raw.Exec(`INSERT INTO imports (preservation, manifest, era, source_path, export_dir, counts, apply_id, imported_at)
			VALUES (?, 'sha256:m', 1, '/src', ?, '{}', ?, ?)`, i.preservation, i.dir, applyID, state.FormatInstant(i.at))
		must(err)
		for _, j := range i.jobs {
			_, err := f.raw.Exec(`INSERT INTO imported_jobs (job, preservation, source_id, record) VALUES (?, ?, ?, 'sha256:r')`, j, i.preservation, j)
			must(err)
		}
	}

	// Catalog refreshes: of a stopped launch (ended, and one unknown and
	// unresolved after it), of a running one (an older attempt and its
	// latest), of a launch with no process row (unknown, then resolved),
	// one still deferred; requests done (one whose attempt stays) and one
	// never taken.
	at(0)
	refresh := func(id, launch, request string, phase state.RefreshPhase) {
		t.Helper()
		trigger := state.RefreshOnApply
		if request != "" {
			trigger = state.RefreshManual
		}
		first := state.RefreshDispatched
		if phase == state.RefreshDeferred {
			first = state.RefreshDeferred
		}
		_, err := f.db.BeginRefresh(ctx, state.RefreshRow{ID: id, LaunchID: launch, Workspace: "w", Conversation: "default",
			ProviderKind: "codex-app-server", Trigger: trigger, RequestID: request, Serial: 1, Phase: first})
		must(err)
		if phase != first {
			if moved, err := f.db.MoveRefresh(ctx, id, first, phase, state.RefreshUpdate{}); err != nil || !moved {
				t.Fatalf("refresh %s to %s: %v %v", id, phase, moved, err)
			}
		}
	}
	must(f.db.RequestRefresh(ctx, "rq-done", "w", "alice"))
	must(f.db.RequestRefresh(ctx, "rq-held", "w", "alice"))
	must(f.db.RequestRefresh(ctx, "rq-open", "w", "alice"))
	refresh("rf-stopped", "p-old", "rq-done", state.RefreshDone)
	refresh("rf-unknown", "p-old", "rq-held", state.RefreshUnknown)
	refresh("rf-running-old", "turn-ts1", "", state.RefreshDone)
	refresh("rf-nowhere", "p-nowhere", "", state.RefreshUnknown)
	refresh("rf-deferred", "turn-ts2", "", state.RefreshDeferred)
	for _, q := range []string{"rq-done", "rq-held"} {
		if taken, err := f.db.TakeRefreshRequest(ctx, q, 1, true); err != nil || !taken {
			t.Fatalf("take %s: %v %v", q, taken, err)
		}
	}
	at(time.Hour)
	refresh("rf-running", "turn-ts1", "", state.RefreshConflict)
	must(f.db.ResolveRefresh(ctx, "rf-nowhere", state.RefreshOutcomeNotApplied, "alice", "not written"))

	// Recent: an apply, a receipt, a claim, a refresh.
	now = gcRecent
	id, _ = begin("recent")
	commit(id, change("job.f"), nil)
	record("p-recent")
	stop("p-recent")
	mustClaim(claim("c3", "daily", "2026-05-31T00:00:00Z", "daily"))
	must(f.db.BeginTurn(ctx, turnOf("td3", "c3")))
	must(f.db.EndTurn(ctx, "td3", state.TurnEnd{Status: state.TurnCompleted}))
	refresh("rf-recent", "p-recent", "", state.RefreshDone)

	now = gcNow
	return f
}

// items is a report's list as kind/id -> reason code.
func items(list []state.GCItem) map[string]reason.Code {
	out := map[string]reason.Code{}
	for _, it := range list {
		out[string(it.Kind)+"/"+it.ID] = it.Code
	}
	return out
}

func sortedKeys(m map[string]reason.Code) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// TestGC: what expired is removed in one transaction, live and unknown
// state stays whatever the cutoff, a dry run reports exactly what the run
// after it removes, and a second run removes nothing more.
func TestGC(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name          string
		cutoff        time.Time
		removed, kept func(f *gcFixture) map[string]reason.Code
		newer         map[state.GCKind]int
		left          map[string]int64 // rows left per table after the run
	}{
		{
			name:   "retention",
			cutoff: gcNow.Add(-90 * 24 * time.Hour),
			removed: func(f *gcFixture) map[string]reason.Code {
				return map[string]reason.Code{
					"journal/" + f.apply["settled"]: "", "journal/" + f.apply["effect"]: "", "journal/" + f.apply["resolved"]: "",
					"receipt/p-old": "",
					"claim/c1":      "", "claim/c2": "", "claim/r1": "",
					"export/gone":        "",
					"refresh/rf-stopped": "", "refresh/rf-running-old": "", "refresh/rf-nowhere": "", "refresh/rq-done": "",
				}
			},
			kept: func(f *gcFixture) map[string]reason.Code {
				return map[string]reason.Code{
					"journal/" + f.apply["open"]:     reason.UnknownUnresolved,
					"journal/" + f.apply["imported"]: "",
					"receipt/turn-ts1":               "",
					"receipt/turn-ts2":               reason.OutcomeUnknown,
					"claim/w1":                       "", "claim/o1": "", "claim/o2": "", "claim/r2": "",
					"claim/s1": "", "claim/s2": reason.OutcomeUnknown,
					"export/review": reason.JobHeld, "export/unk": reason.OutcomeUnknown, "export/twin": "", "export/later": "",
					"refresh/rf-unknown": reason.OutcomeUnknown, "refresh/rf-running": "", "refresh/rf-deferred": "",
					"refresh/rq-held": "", "refresh/rq-open": "",
				}
			},
			newer: map[state.GCKind]int{state.GCJournal: 1, state.GCReceipt: 1, state.GCClaim: 1, state.GCExport: 1, state.GCRefresh: 1},
			left: map[string]int64{"applies": 3, "resolutions": 0, "approvals": 1, "processes": 3, "claims": 7,
				"turns": 5, "imports": 5, "job_cursors": 0, "catalog_refreshes": 4, "refresh_requests": 2},
		},
		{
			// Everything is old: what is live or unknown stays all the same.
			name:   "future cutoff",
			cutoff: gcNow.Add(10 * 365 * 24 * time.Hour),
			removed: func(f *gcFixture) map[string]reason.Code {
				return map[string]reason.Code{
					"journal/" + f.apply["settled"]: "", "journal/" + f.apply["effect"]: "", "journal/" + f.apply["resolved"]: "",
					"receipt/p-old": "", "receipt/p-recent": "",
					"claim/c1": "", "claim/c2": "", "claim/r1": "",
					"export/gone": "", "export/new": "", "export/twin": "",
					"refresh/rf-stopped": "", "refresh/rf-running-old": "", "refresh/rf-nowhere": "", "refresh/rq-done": "",
					"refresh/rf-recent": "",
				}
			},
			kept: func(f *gcFixture) map[string]reason.Code {
				return map[string]reason.Code{
					"journal/" + f.apply["open"]:     reason.UnknownUnresolved,
					"journal/" + f.apply["imported"]: "",
					"journal/" + f.apply["recent"]:   "", // the newest apply
					"receipt/turn-ts1":               "",
					"receipt/turn-ts2":               reason.OutcomeUnknown,
					"claim/c3":                       "", "claim/w1": "", "claim/o1": "", "claim/o2": "", "claim/r2": "",
					"claim/s1": "", "claim/s2": reason.OutcomeUnknown,
					"export/review": reason.JobHeld, "export/unk": reason.OutcomeUnknown, "export/later": "",
					"refresh/rf-unknown": reason.OutcomeUnknown, "refresh/rf-running": "", "refresh/rf-deferred": "",
					"refresh/rq-held": "", "refresh/rq-open": "",
				}
			},
			newer: map[state.GCKind]int{state.GCJournal: 0, state.GCReceipt: 0, state.GCClaim: 0, state.GCExport: 0, state.GCRefresh: 0},
			left: map[string]int64{"applies": 3, "resolutions": 0, "approvals": 1, "processes": 2, "claims": 7,
				"turns": 5, "imports": 5, "catalog_refreshes": 3, "refresh_requests": 2},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newGCFixture(t)
			count := func(table string) int64 { return queryInt(t, f.raw, `SELECT count(*) FROM `+table) }
			tables := []string{"applies", "journal", "resolutions", "approvals", "processes", "claims", "turns", "imports", "job_cursors",
				"catalog_refreshes", "refresh_requests"}
			before := map[string]int64{}
			for _, tb := range tables {
				before[tb] = count(tb)
			}
			unknowns, err := f.db.Unknowns(ctx)
			if err != nil {
				t.Fatal(err)
			}
			unknownClaims, err := f.db.UnknownClaims(ctx)
			if err != nil {
				t.Fatal(err)
			}
			latest, err := f.db.LatestEnded(ctx)
			if err != nil {
				t.Fatal(err)
			}
			openRefreshes, err := f.db.OpenRefreshes(ctx)
			if err != nil {
				t.Fatal(err)
			}
			blockedRefreshes, err := f.db.UnresolvedRefreshes(ctx)
			if err != nil {
				t.Fatal(err)
			}

			dry, err := f.db.GC(ctx, f.lock, tt.cutoff, true)
			if err != nil {
				t.Fatalf("GC dry run: %v", err)
			}
			for _, tb := range tables {
				if got := count(tb); got != before[tb] {
					t.Errorf("the dry run changed %s: %d rows, had %d", tb, got, before[tb])
				}
			}
			for _, c := range []struct {
				what      string
				got, want map[string]reason.Code
			}{{"removed", items(dry.Removed), tt.removed(f)}, {"kept", items(dry.Kept), tt.kept(f)}} {
				if !reflect.DeepEqual(c.got, c.want) {
					t.Errorf("%s:\n got %v\nwant %v", c.what, sortedKeys(c.got), sortedKeys(c.want))
					for k, code := range c.want {
						if got, ok := c.got[k]; ok && got != code {
							t.Errorf("%s %s: code %q, want %q", c.what, k, got, code)
						}
					}
				}
			}
			if !reflect.DeepEqual(dry.Newer, tt.newer) {
				t.Errorf("newer: got %v, want %v", dry.Newer, tt.newer)
			}
			for _, it := range append(append([]state.GCItem{}, dry.Removed...), dry.Kept...) {
				if it.Why == "" {
					t.Errorf("%s %s: no reason given", it.Kind, it.ID)
				}
			}

			run, err := f.db.GC(ctx, f.lock, tt.cutoff, false)
			if err != nil {
				t.Fatalf("GC: %v", err)
			}
			if !reflect.DeepEqual(run, dry) {
				t.Errorf("the run's report differs from its dry run's:\n run %+v\n dry %+v", run, dry)
			}
			for tb, want := range tt.left {
				if got := count(tb); got != want {
					t.Errorf("after gc: %d row(s) in %s, want %d", got, tb, want)
				}
			}
			// Nothing a plan or serve reads changed: the open outcomes,
			// the unknown claims, each job's last outcome, the refreshes
			// not over and those that block their workers.
			if got, _ := f.db.Unknowns(ctx); !reflect.DeepEqual(got, unknowns) {
				t.Errorf("unknown outcomes after gc: %v, before %v", got, unknowns)
			}
			if got, _ := f.db.UnknownClaims(ctx); !reflect.DeepEqual(got, unknownClaims) {
				t.Errorf("unknown claims after gc: %v, before %v", got, unknownClaims)
			}
			if got, _ := f.db.LatestEnded(ctx); !reflect.DeepEqual(got, latest) {
				t.Errorf("latest ended claims after gc: %v, before %v", got, latest)
			}
			if got, _ := f.db.OpenRefreshes(ctx); !reflect.DeepEqual(got, openRefreshes) || len(got) != 1 {
				t.Errorf("open refreshes after gc: %v, before %v", got, openRefreshes)
			}
			if got, _ := f.db.UnresolvedRefreshes(ctx); !reflect.DeepEqual(got, blockedRefreshes) || len(got) != 1 {
				t.Errorf("unresolved refreshes after gc: %v, before %v", got, blockedRefreshes)
			}
			// Every journal row left belongs to an apply left, and a
			// dispatched row is never left without the row that settled it.
			if n := count(`journal WHERE apply_id NOT IN (SELECT id FROM applies)`); n != 0 {
				t.Errorf("%d journal row(s) of removed applies left", n)
			}

			again, err := f.db.GC(ctx, f.lock, tt.cutoff, false)
			if err != nil {
				t.Fatalf("second GC: %v", err)
			}
			// The state cannot know that the caller removed the expired
			// export directories: it names them again, and nothing else.
			for _, it := range again.Removed {
				if it.Kind != state.GCExport {
					t.Errorf("the second gc removed %s %s", it.Kind, it.ID)
				}
			}
			if !reflect.DeepEqual(again.Kept, run.Kept) {
				t.Errorf("the second gc keeps %v, the first kept %v", sortedKeys(items(again.Kept)), sortedKeys(items(run.Kept)))
			}
		})
	}
}

// TestGCExportItems: an expired export names its directory and the
// manifest imported from it, for the command that removes it.
func TestGCExportItems(t *testing.T) {
	f := newGCFixture(t)
	rep, err := f.db.GC(context.Background(), f.lock, gcNow.Add(-90*24*time.Hour), true)
	if err != nil {
		t.Fatal(err)
	}
	var got []state.GCItem
	for _, it := range rep.Removed {
		if it.Kind == state.GCExport {
			got = append(got, it)
		}
	}
	want := []state.GCItem{{Kind: state.GCExport, ID: "gone", At: "2026-01-01T00:00:00Z", Path: "/exports/gone", Manifest: "sha256:m",
		Why: "the import of preservation gone: every imported job released, no claim of them open"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("expired exports:\n got %+v\nwant %+v", got, want)
	}
}

// TestGCLock: gc writes only under the state lock it names.
func TestGCLock(t *testing.T) {
	ctx := context.Background()
	f := newGCFixture(t)
	for _, dry := range []bool{true, false} {
		_, err := f.db.GC(ctx, "0123456789abcdef", gcNow, dry)
		if !errors.Is(err, state.ErrNotLocked) || !reason.Is(err, reason.LockNotHeld) {
			t.Errorf("GC(dry run %v) under a lock not held: %v, want lock_not_held", dry, err)
		}
	}
	if n := queryInt(t, f.raw, `SELECT count(*) FROM claims`); n != 10 {
		t.Errorf("%d claims after refused gcs, want all 10", n)
	}
}

// TestRetention: the retention is the applied host.config's, or 90 days.
func TestRetention(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name string
		spec string // host.config's applied spec; "" for none
		days int
		code reason.Code
	}{
		{"none applied", "", schema.DefaultRetentionDays, ""},
		{"no retention", `{"operators":["alice"],"twoPersonRule":false}`, schema.DefaultRetentionDays, ""},
		{"configured", `{"operators":["alice"],"twoPersonRule":false,"retention":{"days":7}}`, 7, ""},
		{"unreadable", `{"retention":"7d"}`, 0, reason.InvalidAppliedSpec},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := statePath(t)
			db := open(t, path, state.Options{Now: func() time.Time { return gcNow }})
			if tt.spec != "" {
				_, err := raw(t, path).Exec(`INSERT INTO resources (address, kind, name, spec, spec_hash, status, serial, updated_at)
					VALUES ('host.config', 'host', 'config', ?, 'sha256:x', ?, 1, '2026-01-01T00:00:00Z')`, tt.spec, string(reconcile.StatusActive))
				if err != nil {
					t.Fatal(err)
				}
			}
			days, cutoff, err := db.Retention(ctx)
			if tt.code != "" {
				if !reason.Is(err, tt.code) {
					t.Fatalf("Retention: %v, want %s", err, tt.code)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if want := gcNow.Add(-time.Duration(tt.days) * 24 * time.Hour); days != tt.days || !cutoff.Equal(want) {
				t.Errorf("Retention = %d days, cutoff %s; want %d, %s", days, cutoff, tt.days, want)
			}
		})
	}
}
