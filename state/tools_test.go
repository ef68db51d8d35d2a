package state_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/nlx-dev/nlx/plan"

	"github.com/nlx-dev/nlx/internal/reason"
	"github.com/nlx-dev/nlx/state"
)

func TestToolCalls(t *testing.T) {
	ctx := context.Background()
	db := open(t, statePath(t), state.Options{})
	calls := []state.ToolCallRow{
		{ID: "c1", LaunchID: "turn-a", TurnID: "t1", Workspace: "w", Tool: "files__read", Server: "files", ArgsDigest: "sha256:1",
			Outcome: "succeeded", StartedAt: "2026-12-02T10:00:00Z", EndedAt: "2026-12-02T10:00:01Z"},
		{ID: "c2", LaunchID: "turn-a", TurnID: "t1", Workspace: "w", Tool: "nlx_report", ArgsDigest: "sha256:2",
			Outcome: "succeeded", Report: `{"status":"succeeded","summary":"done"}`, StartedAt: "2026-12-02T10:00:02Z", EndedAt: "2026-12-02T10:00:02Z"},
		{ID: "c3", LaunchID: "turn-a", Workspace: "w", Tool: "web__get", ArgsDigest: "sha256:3", Outcome: "refused",
			ReasonCode: string(reason.ToolNotAllowed), StartedAt: "2026-12-02T10:00:03Z", EndedAt: "2026-12-02T10:00:03Z"},
	}
	if err := db.RecordToolCalls(ctx, calls); err != nil {
		t.Fatal(err)
	}
	// A call recorded twice (a retried batch) is kept once.
	if err := db.RecordToolCalls(ctx, calls[:1]); err != nil {
		t.Fatal(err)
	}
	got, err := db.ToolCalls(ctx, "t1")
	if err != nil || len(got) != 2 || got[0] != calls[0] || got[1] != calls[1] {
		t.Fatalf("turn t1's calls %+v (%v), want c1, c2", got, err)
	}
	got, err = db.LaunchToolCalls(ctx, "turn-a")
	if err != nil || len(got) != 3 || got[2] != calls[2] {
		t.Fatalf("launch's calls %+v (%v), want all three", got, err)
	}
}

func TestRefreshAttempts(t *testing.T) {
	ctx := context.Background()
	db := open(t, statePath(t), state.Options{})
	attempt := func(id string, phase state.RefreshPhase) state.RefreshRow {
		return state.RefreshRow{ID: id, LaunchID: "turn-w1", Workspace: "alpha", Conversation: "digest", ProviderKind: "codex-app-server",
			Trigger: state.RefreshOnApply, Serial: 3, Phase: phase}
	}
	// A busy worker's attempt waits; a newer one supersedes it.
	if _, err := db.BeginRefresh(ctx, attempt("r1", state.RefreshDeferred)); err != nil {
		t.Fatal(err)
	}
	if _, err := db.BeginRefresh(ctx, attempt("r2", state.RefreshDeferred)); err != nil {
		t.Fatal(err)
	}
	if r, err := db.Refresh(ctx, "r1"); err != nil || r.Phase != state.RefreshSuperseded || r.EndedAt == "" {
		t.Fatalf("r1 %+v (%v), want superseded", r, err)
	}
	// It is dispatched before the write; its write's acknowledgment is
	// lost: unknown.
	if ok, err := db.MoveRefresh(ctx, "r2", state.RefreshDeferred, state.RefreshDispatched, state.RefreshUpdate{ReadVersion: "sha256:v1", Catalog: "sha256:c", Tools: `["a"]`}); !ok || err != nil {
		t.Fatalf("dispatch: %v %v", ok, err)
	}
	if ok, err := db.MoveRefresh(ctx, "r2", state.RefreshDeferred, state.RefreshDone, state.RefreshUpdate{}); ok || err != nil {
		t.Fatalf("a move from the wrong phase: %v %v, want nothing moved", ok, err)
	}
	if ok, err := db.MoveRefresh(ctx, "r2", state.RefreshDispatched, state.RefreshUnknown, state.RefreshUpdate{Code: reason.RefreshOutcomeUnknown, Reason: "lost"}); !ok || err != nil {
		t.Fatalf("unknown: %v %v", ok, err)
	}
	r2, err := db.Refresh(ctx, "r2")
	if err != nil || !r2.Blocked() || r2.ReadVersion != "sha256:v1" || r2.Catalog != "sha256:c" || r2.DispatchedAt == "" || r2.EndedAt == "" {
		t.Fatalf("r2 %+v (%v)", r2, err)
	}
	// Nothing more for that worker until a person resolves it: the next
	// attempt is recorded failed, and refused.
	r3, err := db.BeginRefresh(ctx, attempt("r3", state.RefreshDispatched))
	if !reason.Is(err, reason.RefreshUnknownUnresolved) || r3.Phase != state.RefreshFailed {
		t.Fatalf("an attempt behind an unknown one: %+v %v, want refused and recorded failed", r3, err)
	}
	if r, _ := db.Refresh(ctx, "r3"); r.Phase != state.RefreshFailed || r.ReasonCode != string(reason.RefreshUnknownUnresolved) {
		t.Errorf("r3 recorded %+v", r)
	}
	// Another worker is not blocked.
	other := attempt("r4", state.RefreshDispatched)
	other.LaunchID = "turn-w2"
	if _, err := db.BeginRefresh(ctx, other); err != nil {
		t.Fatalf("another worker's attempt: %v", err)
	}
	if err := db.ResolveRefresh(ctx, "r4", state.RefreshOutcomeApplied, "alice", "x"); !reason.Is(err, reason.RefreshNotUnknown) {
		t.Errorf("resolving a known attempt: %v, want refresh_not_unknown", err)
	}
	if err := db.ResolveRefresh(ctx, "r2", state.RefreshOutcomeNotApplied, "alice", "the config file is unchanged"); err != nil {
		t.Fatal(err)
	}
	if err := db.ResolveRefresh(ctx, "r2", state.RefreshOutcomeApplied, "bob", "twice"); !reason.Is(err, reason.RefreshNotUnknown) {
		t.Errorf("resolving twice: %v", err)
	}
	if _, err := db.BeginRefresh(ctx, attempt("r5", state.RefreshDispatched)); err != nil {
		t.Fatalf("after the resolution: %v", err)
	}
	open, err := db.OpenRefreshes(ctx)
	if err != nil || len(open) != 2 || open[0].ID != "r4" || open[1].ID != "r5" {
		t.Errorf("open attempts %+v (%v), want r4, r5", open, err)
	}
	all, err := db.Refreshes(ctx, "alpha", "", 0)
	if err != nil || len(all) != 5 {
		t.Errorf("%d attempts (%v), want 5", len(all), err)
	}
	if _, err := db.Refresh(ctx, "nosuch"); !reason.Is(err, reason.NoSuchRefresh) {
		t.Errorf("an unknown id: %v", err)
	}
}

// TestRefreshAttemptsUnique: the constraint itself keeps two attempts of
// a worker from being in flight, whatever the Go code checks.
func TestRefreshAttemptsUnique(t *testing.T) {
	path := statePath(t)
	db := open(t, path, state.Options{})
	ctx := context.Background()
	if _, err := db.BeginRefresh(ctx, state.RefreshRow{ID: "r1", LaunchID: "l", Workspace: "w", Conversation: "c", ProviderKind: "k",
		Trigger: state.RefreshManual, Phase: state.RefreshDispatched}); err != nil {
		t.Fatal(err)
	}
	_, err := raw(t, path).Exec(`INSERT INTO catalog_refreshes (id, launch_id, workspace, conversation, provider_kind, trigger,
		serial, phase, owner_pid, owner_start, owner_boot, created_at) VALUES ('r2', 'l', 'w', 'c', 'k', 'manual', 1, 'deferred', 1, '', '', '')`)
	if err == nil {
		t.Fatal("a second open attempt of the worker was inserted")
	}
}

func TestRefreshRequests(t *testing.T) {
	ctx := context.Background()
	db := open(t, statePath(t), state.Options{})
	if err := db.RequestRefresh(ctx, "q1", "alpha", "alice"); err != nil {
		t.Fatal(err)
	}
	open, err := db.OpenRefreshRequests(ctx)
	if err != nil || len(open) != 1 || open[0].Workspace != "alpha" || open[0].Actor != "alice" {
		t.Fatalf("open requests %+v (%v)", open, err)
	}
	if ok, err := db.TakeRefreshRequest(ctx, "q1", 2, false); !ok || err != nil {
		t.Fatalf("take: %v %v", ok, err)
	}
	if ok, err := db.TakeRefreshRequest(ctx, "q1", 2, true); !ok || err != nil {
		t.Fatalf("done: %v %v", ok, err)
	}
	if ok, _ := db.TakeRefreshRequest(ctx, "q1", 2, true); ok {
		t.Error("a done request was taken again")
	}
	q, err := db.RefreshRequest(ctx, "q1")
	if err != nil || q.Workers != 2 || q.TakenAt == "" || q.DoneAt == "" {
		t.Errorf("request %+v (%v)", q, err)
	}
	if open, _ := db.OpenRefreshRequests(ctx); len(open) != 0 {
		t.Errorf("open requests %+v after done", open)
	}
}

// TestResourcesVersion: an apply's commit counts; a write of anything
// else (a tool call's record) does not.
func TestResourcesVersion(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, "2026-12-02T10:00:00Z")
	db := f.db
	before, err := db.ResourcesVersion(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.RecordToolCalls(ctx, []state.ToolCallRow{{ID: "c", LaunchID: "l", Workspace: "w", Tool: "t", ArgsDigest: "d",
		Outcome: "succeeded", StartedAt: "x", EndedAt: "y"}}); err != nil {
		t.Fatal(err)
	}
	if v, _ := db.ResourcesVersion(ctx); v != before {
		t.Errorf("a tool call's record moved the resources version %d -> %d", before, v)
	}
	f.apply(t, "sha256:one", []plan.Change{{Address: "workspace.w", Kind: "workspace", Name: "w", Action: plan.Create, After: json.RawMessage(`{"team":"t"}`)}})
	if v, _ := db.ResourcesVersion(ctx); v != before+1 {
		t.Errorf("an apply's commit: version %d, want %d", v, before+1)
	}
}
