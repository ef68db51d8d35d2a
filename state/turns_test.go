package state_test

import (
	"context"
	"errors"
	"testing"

	"github.com/nlx-dev/nlx/internal/reason"
	"github.com/nlx-dev/nlx/state"
)

func TestTurnBindingAndEnd(t *testing.T) {
	ctx := context.Background()
	db := open(t, statePath(t), state.Options{Now: clock("2026-12-01T10:00:00Z")})
	turn := state.TurnRow{ID: "t1", Workspace: "alice", Connection: "alice-claude", Conversation: "default", Actor: "alice",
		CredentialOwner: "alice", RequestedProvider: "claude", EffectiveProvider: "claude", Billing: "api", Generation: 2,
		Policy: "read_only", LaunchID: "l1"}
	if err := db.BeginTurn(ctx, turn); err != nil {
		t.Fatal(err)
	}
	if err := db.BeginTurn(ctx, turn); err == nil {
		t.Error("the same turn recorded twice")
	}
	if err := db.SetTurnSession(ctx, "t1", "sess-1"); err != nil {
		t.Fatal(err)
	}
	end := state.TurnEnd{Status: state.TurnCompleted, Result: "hello", Usage: `{"input_tokens":3}`}
	if err := db.EndTurn(ctx, "t1", end); err != nil {
		t.Fatal(err)
	}
	// The first end stands.
	if err := db.EndTurn(ctx, "t1", state.TurnEnd{Status: state.TurnFailed}); err != nil {
		t.Fatal(err)
	}
	got, err := db.Turn(ctx, "t1")
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != state.TurnCompleted || got.Result != "hello" || got.Session != "sess-1" || got.Generation != 2 ||
		got.StartedAt != "2026-12-01T10:00:00Z" || got.EndedAt == "" || got.Usage != `{"input_tokens":3}` {
		t.Errorf("turn: %+v", got)
	}
	if _, err := db.Turn(ctx, "nope"); !errors.Is(err, state.ErrNoTurn) {
		t.Errorf("unknown turn: %v", err)
	}
	if list, err := db.Turns(ctx, 10); err != nil || len(list) != 1 {
		t.Errorf("turns: %+v %v", list, err)
	}
}

func TestPermissionDecidedOnce(t *testing.T) {
	ctx := context.Background()
	db := open(t, statePath(t), state.Options{})
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(db.BeginTurn(ctx, state.TurnRow{ID: "t1", Workspace: "w", Connection: "c", Conversation: "default", Actor: "a",
		CredentialOwner: "a", RequestedProvider: "p", EffectiveProvider: "p", Billing: "api", Generation: 1, Policy: "read_only", LaunchID: "l"}))
	must(db.AddPermission(ctx, state.PermissionRow{ID: "p1", TurnID: "t1", Kind: "command", Subject: "touch M", Decider: "actor:a"}))
	must(db.AddPermission(ctx, state.PermissionRow{ID: "p2", TurnID: "t1", Kind: "command", Subject: "ls", Decider: "actor:a"}))
	if pending, err := db.Permissions(ctx, false, ""); err != nil || len(pending) != 2 {
		t.Fatalf("pending: %+v %v", pending, err)
	}
	must(db.DecidePermission(ctx, "p1", state.PermissionDenied, "a", "", "not now"))
	for _, tc := range []struct {
		id   string
		code reason.Code
	}{{"p1", reason.PermissionDecided}, {"p9", reason.NoSuchPermission}} {
		if err := db.DecidePermission(ctx, tc.id, state.PermissionAllowed, "b", "", ""); !reason.Is(err, tc.code) {
			t.Errorf("deciding %s: %v, want %s", tc.id, err, tc.code)
		}
	}
	p, err := db.Permission(ctx, "p1")
	if err != nil || p.Status != state.PermissionDenied || p.DecidedBy != "a" || p.DecisionNote != "not now" {
		t.Errorf("p1: %+v %v", p, err)
	}
	if pending, _ := db.Permissions(ctx, false, "t1"); len(pending) != 1 || pending[0].ID != "p2" {
		t.Errorf("pending after a decision: %+v", pending)
	}
	if all, _ := db.Permissions(ctx, true, "t1"); len(all) != 2 {
		t.Errorf("all: %+v", all)
	}
}

func TestConversationUpsert(t *testing.T) {
	ctx := context.Background()
	db := open(t, statePath(t), state.Options{})
	if _, found, err := db.Conversation(ctx, "w", "c", "default"); err != nil || found {
		t.Fatalf("empty: found %v, %v", found, err)
	}
	for _, h := range []string{"h1", "h2"} {
		if err := db.SaveConversation(ctx, state.ConversationRow{Workspace: "w", Connection: "c", Name: "default", Provider: "codex", Handle: h, Summary: "s-" + h}); err != nil {
			t.Fatal(err)
		}
	}
	c, found, err := db.Conversation(ctx, "w", "c", "default")
	if err != nil || !found || c.Handle != "h2" || c.Summary != "s-h2" {
		t.Errorf("conversation: %+v %v %v", c, found, err)
	}
}
