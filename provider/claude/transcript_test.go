package claude

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nlx-dev/nlx/internal/reason"
	"github.com/nlx-dev/nlx/provider"
)

// The tests of this file replay transcripts (testdata/transcripts, JSONL
// of {"dir":"claude"|"nlx"|"cancel"|"eof","msg":...}, # lines comments)
// through io.Pipe pairs: the claude lines are written to the adapter's
// stdout, and each nlx line must be the next line the adapter writes to
// its stdin (compared as JSON).

// replayed is what a replay saw.
type replayed struct {
	res  provider.Result
	err  error
	sent []string // what the adapter wrote past the transcript's end
	took time.Duration
}

// replay runs turn through the adapter against entries.
func replay(t *testing.T, entries []entry, turn provider.Turn, h provider.Handler, texts func() string) replayed {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stdinR, stdinW := io.Pipe()
	stdoutR, stdoutW := io.Pipe()
	type ran struct {
		res provider.Result
		err error
	}
	done := make(chan ran, 1)
	start := time.Now()
	go func() {
		res, err := (&Adapter{}).Run(ctx, provider.Pipes{Stdin: stdinW, Stdout: stdoutR}, turn, h)
		stdoutR.CloseWithError(errors.New("Run returned"))
		done <- ran{res, err}
	}()
	lines := make(chan string, 256)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdinR)
		sc.Buffer(make([]byte, 1<<20), 64<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	next := func() (string, bool) {
		select {
		case l, ok := <-lines:
			return l, ok
		case <-time.After(5 * time.Second):
			return "", false
		}
	}
	for i, e := range entries {
		switch e.Dir {
		case fromClaude:
			if _, err := stdoutW.Write(append(append([]byte(nil), e.Msg...), '\n')); err != nil {
				t.Fatalf("entry %d: the adapter stopped reading: %v", i+1, err)
			}
		case fromNLX:
			got, ok := next()
			if !ok {
				t.Fatalf("entry %d: the adapter sent nothing, want %s", i+1, e.Msg)
			}
			if err := sameJSON(got, e.Msg, e.Subset); err != nil {
				t.Fatalf("entry %d: the adapter sent\n  %s\nwant\n  %s\n(%v)", i+1, got, e.Msg, err)
			}
		case cancelHere:
			deadline := time.Now().Add(5 * time.Second)
			for !strings.HasSuffix(texts(), e.AfterText) && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			cancel()
		case eofHere:
			stdoutW.Close()
		default:
			t.Fatalf("entry %d: unknown dir %q", i+1, e.Dir)
		}
	}
	var r ran
	select {
	case r = <-done:
	case <-time.After(provider.Grace + 5*time.Second):
		t.Fatal("Run did not return after the transcript's end")
	}
	out := replayed{res: r.res, err: r.err, took: time.Since(start)}
	for l := range lines { // ends when the adapter closes stdin
		out.sent = append(out.sent, l)
	}
	stdoutW.Close()
	return out
}

// fixtureTurn is the turn a fixture was recorded with (paths
// normalized).
func fixtureTurn(prompt string) provider.Turn {
	return provider.Turn{Prompt: prompt, Cwd: "/workspace", Policy: provider.WorkspaceWrite}
}

func TestReplay(t *testing.T) {
	tests := []struct {
		file   string
		turn   provider.Turn
		decide func(provider.Permission) provider.Decision
		check  func(t *testing.T, r replayed, h *recorder)
	}{
		{file: "text.jsonl", turn: fixtureTurn("say hi"), check: func(t *testing.T, r replayed, h *recorder) {
			const want = "Hello from the fake model, in several deltas."
			if r.err != nil || r.res.Status != provider.StatusCompleted || r.res.Text != want || r.res.Error != nil {
				t.Errorf("result %+v, %v", r.res, r.err)
			}
			if h.Texts() != want || len(h.Of(provider.EventText)) < 2 {
				t.Errorf("text events %q", h.Texts())
			}
			if got := h.Of(provider.EventReasoning); len(got) == 0 {
				t.Errorf("no reasoning event")
			}
			ev := h.Events()
			if ev[0].Type != provider.EventSession || ev[0].Session == "" || r.res.Session != ev[0].Session {
				t.Errorf("first event %+v, result session %q", ev[0], r.res.Session)
			}
			u := r.res.Usage
			if u.InputTokens == 0 || u.OutputTokens == 0 {
				t.Errorf("usage %+v", u)
			}
		}},
		{file: "command-denied.jsonl", turn: fixtureTurn("make the marker"), decide: deny, check: func(t *testing.T, r replayed, h *recorder) {
			if r.err != nil || r.res.Status != provider.StatusCompleted || r.res.Text != "Making it.done" {
				t.Errorf("result %+v, %v", r.res, r.err)
			}
			asked := h.Asked()
			want := provider.Permission{Kind: provider.PermissionCommand, Tool: "Bash", Command: "touch marker", Cwd: "/workspace"}
			if len(asked) != 1 || asked[0].Kind != want.Kind || asked[0].Tool != want.Tool || asked[0].Command != want.Command ||
				asked[0].Cwd != want.Cwd || asked[0].Paths != nil {
				t.Errorf("asked %+v, want %+v", asked, want)
			}
			ends := h.Of(provider.EventToolEnd)
			if len(ends) != 1 || ends[0].Tool.Status != provider.ToolDeclined || ends[0].Tool.Output != "no" || ends[0].Tool.Input != "touch marker" {
				t.Errorf("tool ends %+v", ends)
			}
		}},
		{file: "file-tools.jsonl", turn: fixtureTurn("write a file"), decide: allow, check: func(t *testing.T, r replayed, h *recorder) {
			if r.err != nil || r.res.Status != provider.StatusCompleted || r.res.Text != "Writing.done." {
				t.Errorf("result %+v, %v", r.res, r.err)
			}
			type ask struct {
				kind  provider.PermissionKind
				tool  string
				paths []string
			}
			var got []ask
			for _, a := range h.Asked() {
				got = append(got, ask{a.Kind, a.Tool, a.Paths})
				if a.Cwd != "/workspace" || a.Command != "" {
					t.Errorf("asked %+v", a)
				}
			}
			want := []ask{
				{provider.PermissionFileChange, "Write", []string{"/workspace/w.txt"}},
				{provider.PermissionFileChange, "Edit", []string{"/workspace/w.txt"}},
				{provider.PermissionTool, "Read", []string{"/etc/hostname"}},
			}
			if len(got) != len(want) {
				t.Fatalf("asked %+v, want %+v", got, want)
			}
			for i := range want {
				if got[i].kind != want[i].kind || got[i].tool != want[i].tool || !slices.Equal(got[i].paths, want[i].paths) {
					t.Errorf("request %d: %+v, want %+v", i, got[i], want[i])
				}
			}
			if a := h.Asked(); len(a) == 3 && a[2].Reason != "Path is outside allowed working directories" {
				t.Errorf("reason %q", a[2].Reason)
			}
			var names []string
			for _, e := range h.Of(provider.EventToolEnd) {
				names = append(names, e.Tool.Name+":"+string(e.Tool.Status))
			}
			if !slices.Equal(names, []string{"Write:completed", "Edit:completed", "Read:completed"}) {
				t.Errorf("tool ends %q", names)
			}
		}},
		{file: "interrupt.jsonl", turn: fixtureTurn("take your time"), check: func(t *testing.T, r replayed, h *recorder) {
			if r.err != nil || r.res.Status != provider.StatusInterrupted || r.res.Error == nil || r.res.Error.Code != reason.TurnCancelled ||
				r.res.Text != "partial answer" || r.res.Session == "" {
				t.Fatalf("result %+v (error %+v), %v", r.res, r.res.Error, r.err)
			}
			if len(h.Of(provider.EventStale)) != 0 {
				t.Errorf("stale %+v: the error result is no completion", h.Of(provider.EventStale))
			}
			if r.res.Usage.InputTokens == 0 {
				t.Errorf("usage %+v: the result's is all zero, the stream's stands", r.res.Usage)
			}
		}},
		{file: "late-completion.jsonl", turn: fixtureTurn("say hi"), check: func(t *testing.T, r replayed, h *recorder) {
			if r.err != nil || r.res.Status != provider.StatusInterrupted || r.res.Error == nil || r.res.Error.Code != reason.TurnCancelled {
				t.Fatalf("result %+v (error %+v), %v: want interrupted, turn_cancelled", r.res, r.res.Error, r.err)
			}
			if r.res.Text != "Hello from the f" {
				t.Errorf("result text %q, want what came before the interrupt", r.res.Text)
			}
			stale := h.Of(provider.EventStale)
			if len(stale) != 1 || stale[0].Text != "Hello from the fake model, in several deltas." {
				t.Errorf("stale events %+v, want the completed text once", stale)
			}
			if got := h.Texts(); got != "Hello from the f" {
				t.Errorf("text events %q: what came after the interrupt is stale, not text", got)
			}
			if r.took > provider.Grace {
				t.Errorf("took %v", r.took)
			}
		}},
		{file: "unknown-control-request.jsonl", turn: fixtureTurn("hook"), decide: allow, check: func(t *testing.T, r replayed, h *recorder) {
			if r.err != nil || r.res.Status != provider.StatusCompleted || r.res.Text != "done." {
				t.Errorf("result %+v, %v", r.res, r.err)
			}
			if asked := h.Asked(); len(asked) != 1 || asked[0].Tool != "Bash" {
				t.Errorf("asked %+v: only the tool use goes to the handler", asked)
			}
		}},
		{file: "resume-rejected.jsonl", turn: provider.Turn{Prompt: "go on", Cwd: "/workspace", Policy: provider.WorkspaceWrite,
			Resume: "6a1c9d0e-1111-4222-8333-444455556666"}, check: func(t *testing.T, r replayed, h *recorder) {
			if !errors.Is(r.err, provider.ErrResumeRejected) {
				t.Errorf("result %+v, %v: want ErrResumeRejected", r.res, r.err)
			}
			if len(h.Events()) != 0 {
				t.Errorf("events %+v", h.Events())
			}
		}},
		{file: "resume-rejected.jsonl", turn: fixtureTurn("go on"), check: func(t *testing.T, r replayed, h *recorder) {
			// The same line without a resume: a failure of the provider's.
			if r.err != nil || r.res.Status != provider.StatusFailed || r.res.Error == nil || r.res.Error.Code != reason.ProviderError ||
				!strings.Contains(r.res.Error.Message, "No conversation found") {
				t.Errorf("result %+v (error %+v), %v", r.res, r.res.Error, r.err)
			}
		}},
		{file: "disconnect.jsonl", turn: fixtureTurn("hi"), check: func(t *testing.T, r replayed, h *recorder) {
			if r.err != nil || r.res.Status != provider.StatusFailed || r.res.Error == nil || r.res.Error.Code != reason.ProviderError ||
				!strings.HasPrefix(r.res.Error.Message, "API Error: ") || r.res.Text != "" {
				t.Errorf("result %+v (error %+v), %v", r.res, r.res.Error, r.err)
			}
		}},
		{file: "exited.jsonl", turn: fixtureTurn("say hi"), check: func(t *testing.T, r replayed, h *recorder) {
			if r.err != nil || r.res.Status != provider.StatusFailed || r.res.Error == nil || r.res.Error.Code != reason.ProviderExited ||
				r.res.Text != "Hello fr" || r.res.Session == "" {
				t.Errorf("result %+v (error %+v), %v", r.res, r.res.Error, r.err)
			}
		}},
	}
	for _, tt := range tests {
		name := tt.file
		if tt.turn.Resume != "" {
			name += "/resume"
		}
		t.Run(name, func(t *testing.T) {
			h := &recorder{Decide: tt.decide}
			r := replay(t, readTranscript(t, filepath.Join("testdata/transcripts", tt.file)), tt.turn, h, h.Texts)
			if len(r.sent) != 0 {
				t.Errorf("the adapter sent more than the transcript: %q", r.sent)
			}
			for _, e := range h.Events() {
				if e.Type == provider.EventResult {
					t.Errorf("event %+v: the result is Run's", e)
				}
			}
			tt.check(t, r, h)
		})
	}
}

// TestReplayProtocolErrors: lines the adapter cannot read.
func TestReplayProtocolErrors(t *testing.T) {
	tests := []struct {
		name  string
		lines []string
		code  reason.Code
	}{
		{"not JSON", []string{"Warning: something"}, reason.ProviderProtocol},
		{"nothing", nil, reason.ProviderExited},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var entries []entry
			entries = append(entries, entry{Dir: fromNLX, Msg: json.RawMessage(`{"type":"user","message":{"role":"user","content":"x"},"parent_tool_use_id":null,"session_id":""}`)})
			for _, l := range tt.lines {
				entries = append(entries, entry{Dir: fromClaude, Msg: json.RawMessage(l)})
			}
			entries = append(entries, entry{Dir: eofHere})
			h := &recorder{}
			r := replay(t, entries, fixtureTurn("x"), h, h.Texts)
			if r.err != nil || r.res.Status != provider.StatusFailed || r.res.Error == nil || r.res.Error.Code != tt.code {
				t.Errorf("result %+v (error %+v), %v: want %s", r.res, r.res.Error, r.err, tt.code)
			}
		})
	}
}

// TestReplayWithdrawn: Claude Code withdraws a permission request
// (control_cancel_request): the handler's wait ends and nothing is
// answered.
func TestReplayWithdrawn(t *testing.T) {
	entries := []entry{
		{Dir: fromNLX, Msg: json.RawMessage(`{"type":"user","message":{"role":"user","content":"x"},"parent_tool_use_id":null,"session_id":""}`)},
		{Dir: fromClaude, Msg: json.RawMessage(`{"type":"system","subtype":"init","session_id":"s1","tools":["Bash"]}`)},
		{Dir: fromClaude, Msg: json.RawMessage(`{"type":"control_request","request_id":"r1","request":{"subtype":"can_use_tool","tool_name":"Bash","input":{"command":"touch m"},"tool_use_id":"t1"}}`)},
		{Dir: fromClaude, Msg: json.RawMessage(`{"type":"control_cancel_request","request_id":"r1"}`)},
		{Dir: fromClaude, Msg: json.RawMessage(`{"type":"result","subtype":"success","is_error":false,"result":"fine","session_id":"s1"}`)},
	}
	h := &blockingHandler{recorder: &recorder{}, asked: make(chan struct{}, 1)}
	r := replay(t, entries, fixtureTurn("x"), h, h.Texts)
	if r.err != nil || r.res.Status != provider.StatusCompleted || r.res.Text != "fine" || r.res.Session != "s1" {
		t.Errorf("result %+v, %v", r.res, r.err)
	}
	if len(r.sent) != 0 {
		t.Errorf("sent %q: a withdrawn request is not answered", r.sent)
	}
	if len(h.Asked()) != 1 {
		t.Errorf("asked %+v", h.Asked())
	}
}

// TestReplayCancelBeforeStart: a turn whose ctx ended before Run sends
// nothing.
func TestReplayCancelBeforeStart(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	stdinR, stdinW := io.Pipe()
	stdoutR, _ := io.Pipe()
	got := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(stdinR)
		got <- b
	}()
	res, err := (&Adapter{}).Run(ctx, provider.Pipes{Stdin: stdinW, Stdout: stdoutR}, fixtureTurn("x"), &recorder{})
	if err != nil || res.Status != provider.StatusInterrupted || res.Error == nil || res.Error.Code != reason.TurnCancelled {
		t.Errorf("result %+v, %v", res, err)
	}
	if b := <-got; len(b) != 0 {
		t.Errorf("sent %q", b)
	}
}
