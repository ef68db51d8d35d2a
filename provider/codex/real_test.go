package codex

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nlx-dev/nlx/internal/fakemodel"
	"github.com/nlx-dev/nlx/internal/reason"
	"github.com/nlx-dev/nlx/provider"
)

// The tests of this file drive the real codex app-server (testtool's
// pinned one) directly, without a sandbox, against internal/fakemodel.

// startFake serves a fake model for one test.
func startFake(t testing.TB) *fakemodel.Server {
	t.Helper()
	fake, err := fakemodel.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fake.Close)
	return fake
}

// runTurn starts codex, runs turn through the adapter with h, waits for
// the program to exit and checks the transcript.
func runTurn(t *testing.T, ctx context.Context, fake *fakemodel.Server, home string, turn provider.Turn, h provider.Handler) (provider.Result, error, *codexProc) {
	t.Helper()
	if turn.Cwd == "" {
		turn.Cwd = t.TempDir()
	}
	p := startCodex(t, fake, home, turn.Cwd, turn)
	res, err := (&Adapter{}).Run(ctx, p.pipes, turn, h)
	p.wait(t)
	return res, err, p
}

// sentParams returns the params of the first request of method nlx sent.
func sentParams(tr *transcript, m method) map[string]any {
	for _, msg := range tr.sent() {
		if msg["method"] == string(m) {
			p, _ := msg["params"].(map[string]any)
			return p
		}
	}
	return nil
}

func TestTextTurn(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		policy     provider.Policy
		steps      []fakemodel.Step
		wantText   string
		wantPolicy approvalPolicy
		reasoning  string
	}{
		{name: "asking policy", policy: provider.WorkspaceWrite,
			steps:    []fakemodel.Step{{Text: "Hello from the fake model, in several deltas."}},
			wantText: "Hello from the fake model, in several deltas.", wantPolicy: approvalUntrusted},
		{name: "trusted policy with reasoning", policy: provider.DangerFullAccess,
			steps:    []fakemodel.Step{{Reasoning: "thinking it over"}, {Text: "The answer."}},
			wantText: "The answer.", wantPolicy: approvalNever, reasoning: "thinking it over"},
		{name: "read only", policy: provider.ReadOnly,
			steps:    []fakemodel.Step{{Text: "ok then"}},
			wantText: "ok then", wantPolicy: approvalUntrusted},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			fake := startFake(t)
			fake.Push(fakemodel.Reply{Steps: tt.steps})
			h := &recorder{}
			res, err, p := runTurn(t, context.Background(), fake, "", provider.Turn{Prompt: "say hi", Policy: tt.policy}, h)
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != provider.StatusCompleted || res.Error != nil {
				t.Fatalf("result %+v, want completed", res)
			}
			if res.Text != tt.wantText {
				t.Errorf("text %q, want %q", res.Text, tt.wantText)
			}
			if got := h.Texts(); got != res.Text {
				t.Errorf("the text events make %q, the result says %q", got, res.Text)
			}
			if n := len(h.Of(provider.EventText)); len(tt.wantText) > 8 && n < 2 {
				t.Errorf("%d text events, want the deltas", n)
			}
			sessions := h.Of(provider.EventSession)
			if len(sessions) != 1 || sessions[0].Session == "" || sessions[0].Session != res.Session {
				t.Errorf("session events %+v, result session %q: want one, the result's", sessions, res.Session)
			}
			if res.Usage.InputTokens <= 0 || res.Usage.OutputTokens <= 0 || len(h.Of(provider.EventUsage)) == 0 {
				t.Errorf("usage %+v (%d usage events), want some", res.Usage, len(h.Of(provider.EventUsage)))
			}
			var reasoning strings.Builder
			for _, e := range h.Of(provider.EventReasoning) {
				reasoning.WriteString(e.Text)
			}
			if reasoning.String() != tt.reasoning {
				t.Errorf("reasoning %q, want %q", reasoning.String(), tt.reasoning)
			}
			if len(h.Of(provider.EventResult)) != 0 {
				t.Errorf("the adapter emitted a result event: Run returns it")
			}
			want := []string{"initialize", "initialized", "thread/start", "turn/start"}
			if got := p.tr.sentMethods(); !slices.Equal(got, want) {
				t.Errorf("sent %v, want %v", got, want)
			}
			start, turn := sentParams(p.tr, methodThreadStart), sentParams(p.tr, methodTurnStart)
			if start["approvalPolicy"] != string(tt.wantPolicy) || start["sandbox"] != string(sandboxNone) || start["cwd"] != p.cwd {
				t.Errorf("thread/start params %v", start)
			}
			if sp, _ := turn["sandboxPolicy"].(map[string]any); sp["type"] != string(sandboxExternal) || turn["approvalPolicy"] != string(tt.wantPolicy) {
				t.Errorf("turn/start params %v", turn)
			}
			agent := fake.AgentRequests()
			if len(agent) != 1 {
				t.Fatalf("%d agent requests, want 1", len(agent))
			}
			if !slices.Contains(agent[0].Texts, "say hi") || !slices.Contains(agent[0].Tools, fakemodel.ExecCommand) {
				t.Errorf("agent request texts %q tools %q: want the prompt and %s", agent[0].Texts, agent[0].Tools, fakemodel.ExecCommand)
			}
			if all := fake.Requests(); len(all) != len(agent) {
				t.Errorf("%d requests, %d agent ones: codex made an auxiliary request: %+v", len(all), len(agent), all)
			}
		})
	}
}

// patch is an apply_patch invocation through Codex's shell tool, which
// Codex turns into a file change.
const patch = "apply_patch <<'EOF'\n*** Begin Patch\n*** Add File: P.txt\n+hello\n*** End Patch\nEOF\n"

func TestToolCalls(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		policy   provider.Policy
		command  string
		decide   func(provider.Permission) provider.Decision
		kind     provider.PermissionKind // "" when nothing must be asked
		file     string                  // the file the command makes
		wantFile bool
		tool     string
		status   provider.ToolStatus
	}{
		{name: "command denied", policy: provider.WorkspaceWrite, command: "touch M", decide: deny,
			kind: provider.PermissionCommand, file: "M", wantFile: false, tool: "commandExecution", status: provider.ToolDeclined},
		{name: "command allowed", policy: provider.WorkspaceWrite, command: "touch M", decide: allow,
			kind: provider.PermissionCommand, file: "M", wantFile: true, tool: "commandExecution", status: provider.ToolCompleted},
		{name: "read-only command asked too", policy: provider.ReadOnly, command: "ls > L", decide: deny,
			kind: provider.PermissionCommand, file: "L", wantFile: false, tool: "commandExecution", status: provider.ToolDeclined},
		{name: "trusted policy never asks", policy: provider.TrustedLocal, command: "touch M", decide: deny,
			file: "M", wantFile: true, tool: "commandExecution", status: provider.ToolCompleted},
		{name: "file change denied", policy: provider.WorkspaceWrite, command: patch, decide: deny,
			kind: provider.PermissionFileChange, file: "P.txt", wantFile: false, tool: "fileChange", status: provider.ToolDeclined},
		{name: "file change allowed", policy: provider.WorkspaceWrite, command: patch, decide: allow,
			kind: provider.PermissionFileChange, file: "P.txt", wantFile: true, tool: "fileChange", status: provider.ToolCompleted},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			fake := startFake(t)
			fake.Push(fakemodel.Reply{Steps: []fakemodel.Step{{Command: tt.command}}}, fakemodel.Reply{Steps: []fakemodel.Step{{Text: "done"}}})
			h := &recorder{Decide: tt.decide}
			cwd := t.TempDir()
			res, err, _ := runTurn(t, context.Background(), fake, "", provider.Turn{Prompt: "make the file", Cwd: cwd, Policy: tt.policy}, h)
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != provider.StatusCompleted || res.Text != "done" {
				t.Fatalf("result %+v, want completed with the model's last text", res)
			}
			asked := h.Asked()
			switch {
			case tt.kind == "" && len(asked) != 0:
				t.Errorf("asked %+v, want nothing asked", asked)
			case tt.kind != "" && len(asked) != 1:
				t.Fatalf("asked %+v, want one request", asked)
			case tt.kind != "":
				p := asked[0]
				if p.Kind != tt.kind || p.Tool != tt.tool || p.Cwd != cwd {
					t.Errorf("request %+v, want kind %s tool %s cwd %s", p, tt.kind, tt.tool, cwd)
				}
				if tt.kind == provider.PermissionCommand && !strings.Contains(p.Command, strings.Fields(tt.command)[0]) {
					t.Errorf("request command %q, want the model's %q", p.Command, tt.command)
				}
				if tt.kind == provider.PermissionFileChange && !slices.Equal(p.Paths, []string{filepath.Join(cwd, tt.file)}) {
					t.Errorf("request paths %q, want %s", p.Paths, filepath.Join(cwd, tt.file))
				}
			}
			_, statErr := os.Stat(filepath.Join(cwd, tt.file))
			if got := statErr == nil; got != tt.wantFile {
				t.Errorf("%s exists: %v, want %v", tt.file, got, tt.wantFile)
			}
			starts, ends := h.Of(provider.EventToolStart), h.Of(provider.EventToolEnd)
			if len(starts) != 1 || len(ends) != 1 || starts[0].Tool.Name != tt.tool || ends[0].Tool.ID != starts[0].Tool.ID {
				t.Fatalf("tool events start %+v end %+v, want one of %s each", starts, ends, tt.tool)
			}
			if ends[0].Tool.Status != tt.status {
				t.Errorf("tool end status %q, want %q", ends[0].Tool.Status, tt.status)
			}
			// The model is told: its next request carries the outcome.
			if agent := fake.AgentRequests(); len(agent) != 2 {
				t.Errorf("%d agent requests, want 2 (the call, then its outcome)", len(agent))
			}
		})
	}
}

// TestSecretNotInCommands: with the adapter's Args, the commands Codex
// runs for the model do not inherit the API key.
func TestSecretNotInCommands(t *testing.T) {
	t.Parallel()
	fake := startFake(t)
	fake.Push(fakemodel.Reply{Steps: []fakemodel.Step{{Command: "env > E"}}}, fakemodel.Reply{Steps: []fakemodel.Step{{Text: "done"}}})
	cwd := t.TempDir()
	res, err, _ := runTurn(t, context.Background(), fake, "", provider.Turn{Prompt: "env", Cwd: cwd, Policy: provider.WorkspaceWrite}, &recorder{Decide: allow})
	if err != nil || res.Status != provider.StatusCompleted {
		t.Fatalf("result %+v, %v", res, err)
	}
	env, err := os.ReadFile(filepath.Join(cwd, "E"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(env), testSecret) || !strings.Contains(string(env), "PATH=") {
		t.Errorf("the command's environment has the secret (or is empty):\n%s", env)
	}
}

func TestInterrupt(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		ctx      func() (context.Context, context.CancelFunc)
		cancelAt bool // cancel once the model got the request
		want     reason.Code
	}{
		{name: "cancelled", ctx: func() (context.Context, context.CancelFunc) { return context.WithCancel(context.Background()) },
			cancelAt: true, want: reason.TurnCancelled},
		{name: "timed out", ctx: func() (context.Context, context.CancelFunc) {
			return context.WithTimeoutCause(context.Background(), 3*time.Second, reason.New(reason.TurnTimeout, "the turn ran past its timeout of 3s"))
		}, want: reason.TurnTimeout},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			fake := startFake(t)
			release := make(chan struct{})
			defer close(release)
			fake.Push(fakemodel.Reply{Steps: []fakemodel.Step{{Text: "partial answer"}, {Stall: time.Minute, Release: release}, {Text: " never sent"}}})
			ctx, cancel := tt.ctx()
			defer cancel()
			var ended time.Time
			if tt.cancelAt {
				go func() {
					wctx, stop := context.WithTimeout(context.Background(), 30*time.Second)
					defer stop()
					if fake.WaitAgent(wctx) == nil {
						time.Sleep(300 * time.Millisecond) // the first deltas reach Codex
						ended = time.Now()
						cancel()
					}
				}()
			}
			h := &recorder{}
			res, err, p := runTurn(t, ctx, fake, "", provider.Turn{Prompt: "take your time", Policy: provider.WorkspaceWrite}, h)
			if err != nil {
				t.Fatal(err)
			}
			if !tt.cancelAt {
				ended = time.Now() // bounded below by the timeout
			}
			if res.Status != provider.StatusInterrupted || res.Error == nil || res.Error.Code != tt.want {
				t.Fatalf("result %+v (error %+v), want interrupted with %s", res, res.Error, tt.want)
			}
			if !slices.Contains(p.tr.sentMethods(), string(methodTurnInterrupt)) {
				t.Errorf("sent %v, want a turn/interrupt", p.tr.sentMethods())
			}
			if tt.cancelAt {
				if d := time.Since(ended); d > 2*time.Second {
					t.Errorf("Run returned %v after the cancel, want promptly", d)
				}
			}
			if strings.Contains(res.Text, "never sent") || len(h.Of(provider.EventStale)) != 0 {
				t.Errorf("result text %q, stale %+v", res.Text, h.Of(provider.EventStale))
			}
			if res.Session == "" {
				t.Errorf("no session in %+v", res)
			}
		})
	}
}

func TestModelFailure(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		steps []fakemodel.Step
		want  string // in the message
	}{
		{name: "disconnect", steps: []fakemodel.Step{{Text: "part"}, {Disconnect: true}}, want: "stream disconnected"},
		{name: "server error", steps: []fakemodel.Step{{Error: &fakemodel.APIError{Status: http.StatusInternalServerError, Type: "server_error", Message: "boom"}}}},
		{name: "bad request", steps: []fakemodel.Step{{Error: &fakemodel.APIError{Status: http.StatusBadRequest, Type: "invalid_request_error", Message: "bad input from the fake"}}},
			want: "bad input from the fake"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			fake := startFake(t)
			fake.Push(fakemodel.Reply{Steps: tt.steps})
			start := time.Now()
			res, err, _ := runTurn(t, context.Background(), fake, "", provider.Turn{Prompt: "fail", Policy: provider.WorkspaceWrite}, &recorder{})
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != provider.StatusFailed || res.Error == nil || res.Error.Code != reason.ProviderError || res.Error.Message == "" {
				t.Fatalf("result %+v (error %+v), want failed with %s", res, res.Error, reason.ProviderError)
			}
			if !strings.Contains(res.Error.Message, tt.want) {
				t.Errorf("message %q, want it to contain %q", res.Error.Message, tt.want)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("the failure took %v: retries are not off", d)
			}
			if n := len(fake.AgentRequests()); n != 1 {
				t.Errorf("%d agent requests, want 1 (no retry)", n)
			}
		})
	}
}

func TestResume(t *testing.T) {
	t.Parallel()
	fake := startFake(t)
	home := t.TempDir()
	cwd := t.TempDir()
	fake.Push(fakemodel.Reply{Steps: []fakemodel.Step{{Text: "Noted: blue."}}}, fakemodel.Reply{Steps: []fakemodel.Step{{Text: "It was blue."}}})
	first, err, _ := runTurn(t, context.Background(), fake, home, provider.Turn{Prompt: "remember the colour blue", Cwd: cwd, Policy: provider.WorkspaceWrite}, &recorder{})
	if err != nil || first.Status != provider.StatusCompleted || first.Session == "" {
		t.Fatalf("first turn %+v, %v", first, err)
	}
	h := &recorder{}
	second, err, p := runTurn(t, context.Background(), fake, home,
		provider.Turn{Prompt: "which colour?", Cwd: cwd, Policy: provider.WorkspaceWrite, Resume: first.Session}, h)
	if err != nil {
		t.Fatal(err)
	}
	if second.Status != provider.StatusCompleted || second.Text != "It was blue." || second.Session != first.Session {
		t.Fatalf("second turn %+v, want completed in session %s", second, first.Session)
	}
	want := []string{"initialize", "initialized", "thread/resume", "turn/start"}
	if got := p.tr.sentMethods(); !slices.Equal(got, want) {
		t.Errorf("sent %v, want %v", got, want)
	}
	agent := fake.AgentRequests()
	if len(agent) != 2 {
		t.Fatalf("%d agent requests, want 2", len(agent))
	}
	texts := agent[1].Texts
	for _, s := range []string{"remember the colour blue", "Noted: blue.", "which colour?"} {
		if !slices.Contains(texts, s) {
			t.Errorf("the resumed request's texts %q lack %q", texts, s)
		}
	}
	// Only this turn's usage: the restated usage of the first is not
	// counted twice.
	if second.Usage.InputTokens <= 0 || second.Usage.InputTokens > first.Usage.InputTokens*3 {
		t.Errorf("second usage %+v (first %+v)", second.Usage, first.Usage)
	}
	if s := h.Of(provider.EventSession); len(s) != 1 || s[0].Session != first.Session {
		t.Errorf("session events %+v", s)
	}
}

func TestResumeRejected(t *testing.T) {
	t.Parallel()
	for _, id := range []string{"01a23218-0000-7000-8000-000000000000", "not-a-thread"} {
		t.Run(id, func(t *testing.T) {
			t.Parallel()
			fake := startFake(t)
			h := &recorder{}
			res, err, p := runTurn(t, context.Background(), fake, "", provider.Turn{Prompt: "go on", Policy: provider.WorkspaceWrite, Resume: id}, h)
			if !errors.Is(err, provider.ErrResumeRejected) {
				t.Fatalf("Run = %+v, %v; want ErrResumeRejected", res, err)
			}
			if r := reason.Of(err); r == nil || r.Code != reason.ResumeRejected {
				t.Errorf("reason of %v: %+v", err, r)
			}
			want := []string{"initialize", "initialized", "thread/resume"}
			if got := p.tr.sentMethods(); !slices.Equal(got, want) {
				t.Errorf("sent %v, want %v (nothing after the rejection)", got, want)
			}
			if len(fake.Requests()) != 0 || len(h.Events()) != 0 {
				t.Errorf("requests %d, events %+v: want none", len(fake.Requests()), h.Events())
			}
		})
	}
}

// TestTiming measures one one-message text turn, from the program's start
// to Run's result, NLX_CODEX_TIMING times (skipped when unset): the
// median, minimum and maximum are logged.
func TestTiming(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("NLX_CODEX_TIMING"))
	if n <= 0 {
		t.Skip("set NLX_CODEX_TIMING=N to time N text turns")
	}
	fake := startFake(t)
	var took, initialized, threaded []time.Duration
	for range n {
		fake.Push(fakemodel.Reply{Steps: []fakemodel.Step{{Text: "Hello."}}})
		turn := provider.Turn{Prompt: "say hello", Cwd: t.TempDir(), Policy: provider.WorkspaceWrite}
		p := startCodex(t, fake, "", turn.Cwd, turn)
		res, err := (&Adapter{}).Run(context.Background(), p.pipes, turn, &recorder{})
		d := time.Since(p.start)
		p.wait(t)
		if err != nil || res.Status != provider.StatusCompleted || res.Text != "Hello." {
			t.Fatalf("result %+v, %v", res, err)
		}
		took = append(took, d)
		initialized = append(initialized, p.tr.when(fromCodex, `"codexHome"`).Sub(p.start))
		threaded = append(threaded, p.tr.when(fromCodex, `"result":{"thread"`).Sub(p.start))
	}
	for _, d := range [][]time.Duration{took, initialized, threaded} {
		slices.Sort(d)
	}
	t.Logf("%d text turns, program start to result: median %v, min %v, max %v", n, took[n/2], took[0], took[n-1])
	t.Logf("start to initialize's answer: median %v; to thread/start's: median %v", initialized[n/2], threaded[n/2])
}

// TestSessionTurns: one app-server kept for several turns (a warm
// worker): the second turn runs on the first's thread without a new
// initialize or thread, and its model request carries the first exchange;
// each turn's usage is its own.
func TestSessionTurns(t *testing.T) {
	t.Parallel()
	fake := startFake(t)
	fake.Push(fakemodel.Reply{Steps: []fakemodel.Step{{Text: "First answer."}}})
	fake.Push(fakemodel.Reply{Steps: []fakemodel.Step{{Text: "Second answer."}}})
	turn := provider.Turn{Prompt: "first question", Cwd: t.TempDir(), Policy: provider.WorkspaceWrite}
	p := startCodex(t, fake, "", turn.Cwd, turn)
	s := (&Adapter{}).Open(p.pipes)
	ctx := context.Background()
	r1, err := s.Turn(ctx, turn, &recorder{})
	if err != nil || r1.Status != provider.StatusCompleted || r1.Text != "First answer." {
		t.Fatalf("first turn: %+v, %v", r1, err)
	}
	turn.Prompt, turn.Resume = "second question", "ignored-by-a-session"
	r2, err := s.Turn(ctx, turn, &recorder{})
	if err != nil || r2.Status != provider.StatusCompleted || r2.Text != "Second answer." {
		t.Fatalf("second turn: %+v, %v", r2, err)
	}
	if r2.Session != r1.Session {
		t.Errorf("the second turn ran on thread %s, the first on %s", r2.Session, r1.Session)
	}
	if r2.Usage.InputTokens == 0 || r2.Usage.InputTokens == r1.Usage.InputTokens+r2.Usage.InputTokens {
		t.Errorf("second turn's usage %+v (first %+v): want its own count", r2.Usage, r1.Usage)
	}
	s.Close()
	p.wait(t)
	reqs := fake.AgentRequests()
	if len(reqs) != 2 || !strings.Contains(strings.Join(reqs[1].Texts, "\n"), "First answer.") {
		t.Fatalf("the second request does not carry the first exchange: %d requests", len(reqs))
	}
	n := map[string]int{}
	for _, m := range p.tr.sent() {
		if meth, ok := m["method"].(string); ok {
			n[meth]++
		}
	}
	if n[string(methodInitialize)] != 1 || n[string(methodThreadStart)] != 1 || n[string(methodTurnStart)] != 2 {
		t.Errorf("sent %v: want one initialize, one thread/start, two turn/start", n)
	}
}
