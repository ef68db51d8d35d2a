package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nlx-dev/nlx/internal/fakemodel"
	"github.com/nlx-dev/nlx/internal/testgen"
	"github.com/nlx-dev/nlx/internal/testtool"
	"github.com/nlx-dev/nlx/provider/codex"
	"github.com/nlx-dev/nlx/state"
)

// TestServeScale: 200 jobs due at the same instant in as many
// conversations all start (there is no cap: every one's model request
// arrives before any turn ends), and the two occurrences of one
// conversation never overlap. It runs the stand-in for Codex's
// app-server (internal/codexstandin), checked against the pinned protocol
// schema by provider/codex's tests, in real sandboxes: 202 real Codex
// processes do not fit in this machine's memory.
func TestServeScale(t *testing.T) {
	testtool.Need(t, "bwrap")
	if testing.Short() {
		t.Skip("-short: 200 sandboxed turns")
	}
	const n = 200
	const stall = 15 * time.Second
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	prog := filepath.Join(dir, "prog")
	if err := os.Mkdir(prog, 0o755); err != nil {
		t.Fatal(err)
	}
	bin, err := testgen.BuildStandin(context.Background(), prog)
	if err != nil {
		t.Fatal(err)
	}
	model, err := fakemodel.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer model.Close()
	for range n + 2 {
		model.Push(fakemodel.Reply{Steps: []fakemodel.Step{{Stall: stall}, {Text: "done"}}})
	}
	h := &testHost{t: t, dir: dir, state: filepath.Join(dir, "state", "state.db"), root: filepath.Join(dir, "workspaces")}
	cfg := filepath.Join(dir, "cfg")
	if err := os.MkdirAll(cfg, 0o755); err != nil {
		t.Fatal(err)
	}
	at := time.Now().Add(8 * time.Second).Truncate(time.Second)
	if err := os.WriteFile(filepath.Join(cfg, "host.cue"), []byte(testgen.StandinHost{Command: append([]string{bin, "app-server"}, codex.FakeModelArgs(model.URL())...),
		Actor: "alice", SecretEnv: "NLX_TEST_OPENAI_KEY", Jobs: n, Shared: true, At: at}.Config()), 0o644); err != nil {
		t.Fatal(err)
	}
	env := []string{"NLX_TEST_OPENAI_KEY=sk-test-scale", "NLX_PROVIDER_USER=61234:61234",
		"NLX_CREDENTIAL_ROOT=" + filepath.Join(dir, "credentials")}
	if out, errOut, code := h.run(env, "apply", "cfg", "--yes"); code != 0 {
		t.Fatalf("apply: exit %d\n%s\n%s", code, out, errOut)
	}
	srv := h.command(env, "serve", "--poll", "200ms")
	var stderr strings.Builder
	srv.Stderr = &stderr
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer srv.Process.Kill()

	ctx := context.Background()
	deadline := time.Now().Add(4 * time.Minute)
	var claims []state.ClaimRow
	for {
		db, err := state.Open(ctx, h.state, state.Options{ReadOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		claims, err = db.Claims(ctx, "", 0)
		db.Close()
		if err != nil {
			t.Fatal(err)
		}
		ended := 0
		for _, c := range claims {
			if c.Phase.Terminal() {
				ended++
			}
		}
		if ended == n+2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 4 minutes %d of %d occurrences ended\n%s", ended, n+2, stderr.String())
		}
		time.Sleep(250 * time.Millisecond)
	}
	srv.Process.Signal(syscall.SIGTERM)
	if err := srv.Wait(); err != nil {
		t.Fatalf("serve: %v\n%s", err, stderr.String())
	}

	db, err := state.Open(ctx, h.state, state.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	firstEnd := time.Time{}
	turns := map[string]*state.TurnRow{}
	for _, c := range claims {
		if c.Phase != state.ClaimSucceeded {
			t.Errorf("claim %s of %s: %s (%s %s)", c.ID, c.Job, c.Phase, c.ReasonCode, c.Reason)
			continue
		}
		tr, err := db.Turn(ctx, c.TurnID)
		if err != nil {
			t.Fatal(err)
		}
		turns[c.Job] = tr
		if end := parseStamp(t, tr.EndedAt); firstEnd.IsZero() || end.Before(firstEnd) {
			firstEnd = end
		}
	}
	// No cap: every independent conversation's request reached the model
	// before the first turn ended.
	reqs := model.AgentRequests()
	if len(reqs) != n+2 {
		t.Fatalf("the model saw %d agent requests, want %d (one per occurrence, none twice)", len(reqs), n+2)
	}
	late := 0
	for _, r := range reqs {
		if !r.At.Before(firstEnd) {
			late++
		}
	}
	// The second of the shared conversation waits for the first: exactly
	// one request comes after the first end.
	if late != 1 {
		t.Errorf("%d requests arrived after the first turn ended at %s, want 1 (the second turn of the shared conversation)", late, firstEnd)
	}
	a, b := turns["shared-a"], turns["shared-b"]
	if a == nil || b == nil {
		t.Fatal("the shared conversation's turns are missing")
	}
	if a.StartedAt > b.StartedAt {
		a, b = b, a
	}
	if !parseStamp(t, a.EndedAt).Before(parseStamp(t, b.StartedAt)) && a.EndedAt != b.StartedAt {
		t.Errorf("the turns of one conversation overlap: %s..%s and %s..%s", a.StartedAt, a.EndedAt, b.StartedAt, b.EndedAt)
	}
}

func parseStamp(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatalf("time %q: %v", s, err)
	}
	return v
}
