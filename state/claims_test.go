package state_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/nlx-dev/nlx/internal/reason"
	"github.com/nlx-dev/nlx/state"
)

func claim(id, job, at, conv string) state.ClaimRow {
	return state.ClaimRow{ID: id, Job: job, ScheduledAt: at, Trigger: state.TriggerSchedule, Workspace: "w",
		Conversation: conv, Connection: "c", Actor: "alice", Serial: 1}
}

func turnOf(id, claimID string) state.TurnRow {
	return state.TurnRow{ID: id, Workspace: "w", Connection: "c", Conversation: "x", Actor: "alice", CredentialOwner: "alice",
		RequestedProvider: "codex", EffectiveProvider: "codex", Billing: "api", Generation: 3, Policy: "read_only",
		LaunchID: "turn-" + id, ClaimID: claimID}
}

// TestClaimLifecycle: a claim is unique by job and instant, dispatched in
// the transaction that begins its turn (which fails while another claim
// holds the conversation), ended in the one that ends the turn; an
// unknown one holds its conversation until resolved.
func TestClaimLifecycle(t *testing.T) {
	ctx := context.Background()
	db := open(t, statePath(t), state.Options{Now: clock("2026-12-01T10:00:00Z")})
	mustClaim := func(c state.ClaimRow, want bool) {
		t.Helper()
		created, err := db.Claim(ctx, c)
		if err != nil || created != want {
			t.Fatalf("claim %s: created %v, %v; want %v", c.ID, created, err, want)
		}
	}
	mustClaim(claim("a", "j1", "2026-12-01T10:00:00Z", "x"), true)
	mustClaim(claim("a2", "j1", "2026-12-01T10:00:00Z", "x"), false) // the same occurrence
	mustClaim(claim("b", "j2", "2026-12-01T10:00:00Z", "x"), true)
	mustClaim(claim("c", "j3", "2026-12-01T10:00:00Z", "y"), true)

	if err := db.BeginTurn(ctx, turnOf("t1", "a")); err != nil {
		t.Fatal(err)
	}
	// b shares a's conversation: its dispatch fails and records nothing.
	err := db.BeginTurn(ctx, turnOf("t2", "b"))
	if !reason.Is(err, reason.ConversationBusy) {
		t.Fatalf("dispatch in a busy conversation: %v, want conversation_busy", err)
	}
	if _, err := db.Turn(ctx, "t2"); !errors.Is(err, state.ErrNoTurn) {
		t.Errorf("the refused dispatch recorded its turn: %v", err)
	}
	// c is in another conversation: no cap.
	if err := db.BeginTurn(ctx, turnOf("t3", "c")); err != nil {
		t.Fatal(err)
	}
	got, err := db.ClaimByID(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if got.Phase != state.ClaimDispatched || got.TurnID != "t1" || got.Generation != 3 || got.CredentialOwner != "alice" || got.Provider != "codex" {
		t.Errorf("dispatched claim: %+v", got)
	}
	// The turn's end is the claim's.
	if err := db.EndTurn(ctx, "t3", state.TurnEnd{Status: state.TurnBlocked, ErrorCode: "permission_required"}); err != nil {
		t.Fatal(err)
	}
	if c, _ := db.ClaimByID(ctx, "c"); c.Phase != state.ClaimFailed || c.ReasonCode != "permission_required" || c.EndedAt == "" {
		t.Errorf("claim of a blocked turn: %+v", c)
	}
	// a's process is gone without an end: unknown, and it keeps the lock.
	if ok, err := db.MarkClaimUnknown(ctx, "a", "gone"); err != nil || !ok {
		t.Fatalf("mark unknown: %v %v", ok, err)
	}
	if err := db.BeginTurn(ctx, turnOf("t4", "b")); !reason.Is(err, reason.WorkflowLocked) {
		t.Fatalf("dispatch behind an unknown claim: %v, want workflow_locked", err)
	}
	u, err := db.UnknownClaims(ctx)
	if err != nil || len(u) != 1 || u[0].ID != "a" || u[0].Job != "j1" {
		t.Fatalf("unknown claims: %+v %v", u, err)
	}
	if err := db.ResolveClaim(ctx, "a", state.ClaimOutcomeNotRun, "alice", "checked"); err != nil {
		t.Fatal(err)
	}
	if err := db.ResolveClaim(ctx, "a", state.ClaimOutcomeNotRun, "alice", "again"); !reason.Is(err, reason.ClaimNotUnknown) {
		t.Errorf("resolved twice: %v", err)
	}
	if err := db.BeginTurn(ctx, turnOf("t4", "b")); err != nil {
		t.Fatalf("dispatch after the resolution: %v", err)
	}
	if u, _ := db.UnknownClaims(ctx); len(u) != 0 {
		t.Errorf("unknown claims after the resolution: %+v", u)
	}
}

// TestOpenClaimsPages: the pages cover every open claim once, in order,
// whatever the page size (an oracle: OpenClaims in one read).
func TestOpenClaimsPages(t *testing.T) {
	ctx := context.Background()
	db := open(t, statePath(t), state.Options{Now: clock("2026-12-01T10:00:00Z")})
	for i := range 23 {
		c := claim(fmt.Sprintf("c%02d", i), fmt.Sprintf("j%d", i%5), fmt.Sprintf("2026-12-01T10:%02d:00Z", i), fmt.Sprintf("x%d", i))
		if i%4 == 0 {
			c.Phase, c.ReasonCode = state.ClaimSkipped, "previous_running" // ended: not open
		}
		if _, err := db.Claim(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	all, err := db.OpenClaims(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, size := range []int{1, 2, 5, 17, 100} {
		var got []string
		var after *state.ClaimRow
		for {
			page, err := db.OpenClaimsPage(ctx, after, size)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range page {
				got = append(got, c.ID)
			}
			if len(page) < size {
				break
			}
			after = &page[len(page)-1]
		}
		if len(got) != len(all) {
			t.Fatalf("page size %d: %d claims, want %d", size, len(got), len(all))
		}
		for i := range all {
			if got[i] != all[i].ID {
				t.Errorf("page size %d: claim %d is %s, want %s", size, i, got[i], all[i].ID)
			}
		}
	}
}

// TestServeLock: one serve per state; the holder is named.
func TestServeLock(t *testing.T) {
	ctx := context.Background()
	db := open(t, statePath(t), state.Options{})
	id, took, err := db.ServeLock(ctx)
	if err != nil || took != nil {
		t.Fatalf("serve lock: %v %v", took, err)
	}
	_, _, err = db.ServeLock(ctx)
	var locked *state.ServeLockedError
	if !errors.As(err, &locked) || !reason.Is(err, reason.ServeLocked) {
		t.Fatalf("second serve lock: %v", err)
	}
	if locked.Holder.PID != os.Getpid() {
		t.Errorf("holder: %+v", locked.Holder)
	}
	if err := db.ServeUnlock(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, _, err := db.ServeLock(ctx); err != nil {
		t.Errorf("after unlock: %v", err)
	}
}
