// Package providertest is the conformance suite every provider adapter
// passes, against its real program and the fake model: the same cases,
// table-driven, for Codex, Claude Code, and whatever comes next (ACP). An
// adapter's test supplies a Harness that starts its program; the suite
// drives it through the Adapter interface only.
package providertest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nlx-dev/nlx/internal/fakemodel"
	"github.com/nlx-dev/nlx/internal/reason"
	"github.com/nlx-dev/nlx/provider"
)

// Harness starts an adapter's program for the suite.
type Harness struct {
	Adapter provider.Adapter
	// Start runs the program for turn t (with the adapter's Args for it)
	// against model, in cwd, with home as its credential home (the same
	// home across the turns of one case, so that a session resumes). It
	// returns the program's stdio and a function that waits for the
	// program to exit, killing it when it does not within a few seconds.
	Start func(tb testing.TB, model *fakemodel.Server, home, cwd string, t provider.Turn) (provider.Pipes, func())
}

// Recorder is a provider.Handler that records what the adapter did and
// decides each permission request with Decide (nil denies). The adapters'
// own tests use it too.
type Recorder struct {
	Decide func(provider.Permission) provider.Decision

	mu     sync.Mutex
	events []provider.Event
	asked  []provider.Permission
}

// Event records e.
func (r *Recorder) Event(e provider.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

// Permission records p and decides it.
func (r *Recorder) Permission(ctx context.Context, p provider.Permission) (provider.Decision, error) {
	r.mu.Lock()
	r.asked = append(r.asked, p)
	decide := r.Decide
	r.mu.Unlock()
	if decide == nil {
		return provider.Decision{Allow: false, By: "test"}, nil
	}
	return decide(p), nil
}

// Events returns the events recorded so far.
func (r *Recorder) Events() []provider.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]provider.Event(nil), r.events...)
}

// Asked returns the permission requests made so far.
func (r *Recorder) Asked() []provider.Permission {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]provider.Permission(nil), r.asked...)
}

// Of returns the events of type typ.
func (r *Recorder) Of(typ provider.EventType) []provider.Event {
	var out []provider.Event
	for _, e := range r.Events() {
		if e.Type == typ {
			out = append(out, e)
		}
	}
	return out
}

// Count is the number of events of type typ.
func (r *Recorder) Count(typ provider.EventType) int { return len(r.Of(typ)) }

// Texts is the concatenation of the text events.
func (r *Recorder) Texts() string {
	var b strings.Builder
	for _, e := range r.Of(provider.EventText) {
		b.WriteString(e.Text)
	}
	return b.String()
}

// Allow and Deny are Decide functions.
func Allow(provider.Permission) provider.Decision { return provider.Decision{Allow: true, By: "test"} }

// Deny denies, saying no.
func Deny(provider.Permission) provider.Decision {
	return provider.Decision{Allow: false, By: "test", Reason: "no"}
}

// bogusSession is a well-formed session handle no provider has.
const bogusSession = "00000000-0000-4000-8000-000000000000"

// env is one case's world: the fake model, the credential home, the
// workspace directory.
type env struct {
	h     Harness
	model *fakemodel.Server
	home  string
	cwd   string
}

// turn runs one turn to its result with rec, under ctx.
func (e *env) turn(tb testing.TB, ctx context.Context, t provider.Turn, rec *Recorder) (provider.Result, error) {
	tb.Helper()
	if t.Cwd == "" {
		t.Cwd = e.cwd
	}
	pipes, wait := e.h.Start(tb, e.model, e.home, e.cwd, t)
	res, err := e.h.Adapter.Run(ctx, pipes, t, rec)
	wait()
	return res, err
}

// Run runs every case of the suite against h.
func Run(t *testing.T, h Harness) {
	cases := []struct {
		name string
		run  func(t *testing.T, e *env)
	}{
		{"text turn streams deltas and ends with one result", func(t *testing.T, e *env) {
			const text = "Hello from the fake model, streamed in pieces."
			e.model.Push(fakemodel.Reply{Steps: []fakemodel.Step{{Text: text}}})
			rec := &Recorder{}
			res, err := e.turn(t, context.Background(), provider.Turn{Prompt: "say hello", Policy: provider.WorkspaceWrite}, rec)
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != provider.StatusCompleted || res.Text != text {
				t.Fatalf("result %+v, want completed with %q", res, text)
			}
			var streamed strings.Builder
			for _, ev := range rec.Events() {
				if ev.Type == provider.EventText {
					streamed.WriteString(ev.Text)
				}
				if ev.Type == provider.EventResult {
					t.Errorf("the adapter emitted a result event; Run returns the one result")
				}
			}
			if rec.Count(provider.EventText) < 2 || streamed.String() != text {
				t.Errorf("%d text deltas streaming %q, want several making %q", rec.Count(provider.EventText), streamed.String(), text)
			}
			if res.Session == "" || rec.Count(provider.EventSession) != 1 {
				t.Errorf("session %q, %d session events: want the native handle, once", res.Session, rec.Count(provider.EventSession))
			}
			if res.Usage.InputTokens == 0 && res.Usage.OutputTokens == 0 {
				t.Errorf("no usage in %+v", res)
			}
		}},
		{"denied command never runs", func(t *testing.T, e *env) {
			marker := filepath.Join(e.cwd, "denied-marker")
			e.model.Push(fakemodel.Reply{Steps: []fakemodel.Step{{Command: "touch denied-marker"}}},
				fakemodel.Reply{Steps: []fakemodel.Step{{Text: "I could not run it."}}})
			rec := &Recorder{Decide: Deny}
			res, err := e.turn(t, context.Background(), provider.Turn{Prompt: "make the marker", Policy: provider.WorkspaceWrite}, rec)
			if err != nil {
				t.Fatal(err)
			}
			asked := rec.Asked()
			if len(asked) != 1 || asked[0].Kind != provider.PermissionCommand || !strings.Contains(asked[0].Command, "touch denied-marker") {
				t.Fatalf("asked %+v, want one command request for the touch", asked)
			}
			if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("the denied command ran: %v", err)
			}
			if res.Status != provider.StatusCompleted {
				t.Errorf("result %+v: a denial is the provider's to handle, the turn goes on", res)
			}
		}},
		{"allowed command runs in the workspace", func(t *testing.T, e *env) {
			e.model.Push(fakemodel.Reply{Steps: []fakemodel.Step{{Command: "touch allowed-marker"}}},
				fakemodel.Reply{Steps: []fakemodel.Step{{Text: "Done."}}})
			rec := &Recorder{Decide: Allow}
			res, err := e.turn(t, context.Background(), provider.Turn{Prompt: "make the marker", Policy: provider.WorkspaceWrite}, rec)
			if err != nil {
				t.Fatal(err)
			}
			if len(rec.Asked()) != 1 {
				t.Errorf("asked %+v, want one request", rec.Asked())
			}
			if _, err := os.Stat(filepath.Join(e.cwd, "allowed-marker")); err != nil {
				t.Fatalf("the allowed command did not run in the workspace: %v", err)
			}
			if res.Status != provider.StatusCompleted || rec.Count(provider.EventToolStart) == 0 {
				t.Errorf("result %+v, %d tool starts", res, rec.Count(provider.EventToolStart))
			}
		}},
		{"cancel interrupts the provider", func(t *testing.T, e *env) {
			e.model.Push(fakemodel.Reply{Steps: []fakemodel.Step{{Text: "Starting"}, {Stall: time.Minute}, {Text: " never"}}})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go func() {
				wctx, wcancel := context.WithTimeout(ctx, time.Minute)
				defer wcancel()
				if e.model.WaitAgent(wctx) == nil {
					time.Sleep(300 * time.Millisecond)
				}
				cancel()
			}()
			start := time.Now()
			res, err := e.turn(t, ctx, provider.Turn{Prompt: "take your time", Policy: provider.WorkspaceWrite}, &Recorder{})
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != provider.StatusInterrupted || res.Error == nil || res.Error.Code != reason.TurnCancelled {
				t.Fatalf("result %+v, want interrupted with turn_cancelled", res)
			}
			if d := time.Since(start); d > 30*time.Second {
				t.Errorf("the interrupt took %s", d)
			}
		}},
		{"a stalled model times out", func(t *testing.T, e *env) {
			e.model.Push(fakemodel.Reply{Steps: []fakemodel.Step{{Stall: time.Minute}}})
			ctx, cancel := context.WithTimeoutCause(context.Background(), 3*time.Second, reason.New(reason.TurnTimeout, "stalled"))
			defer cancel()
			res, err := e.turn(t, ctx, provider.Turn{Prompt: "hello?", Policy: provider.WorkspaceWrite}, &Recorder{})
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != provider.StatusInterrupted || res.Error == nil || res.Error.Code != reason.TurnTimeout {
				t.Fatalf("result %+v, want interrupted with turn_timeout", res)
			}
		}},
		{"a disconnect is a structured error", func(t *testing.T, e *env) {
			for range 8 { // the provider may retry; every attempt is cut
				e.model.Push(fakemodel.Reply{Steps: []fakemodel.Step{{Text: "partial"}, {Disconnect: true}}})
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			res, err := e.turn(t, ctx, provider.Turn{Prompt: "hello", Policy: provider.WorkspaceWrite}, &Recorder{})
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != provider.StatusFailed || res.Error == nil || res.Error.Code != reason.ProviderError || res.Error.Message == "" {
				t.Fatalf("result %+v, want failed with a provider_error and its message", res)
			}
		}},
		{"resume continues the native session", func(t *testing.T, e *env) {
			e.model.Push(fakemodel.Reply{Steps: []fakemodel.Step{{Text: "Noted: zebra."}}})
			first, err := e.turn(t, context.Background(), provider.Turn{Prompt: "remember the word zebra", Policy: provider.WorkspaceWrite}, &Recorder{})
			if err != nil || first.Session == "" {
				t.Fatalf("first turn: %+v %v", first, err)
			}
			e.model.Push(fakemodel.Reply{Steps: []fakemodel.Step{{Text: "It was zebra."}}})
			second, err := e.turn(t, context.Background(), provider.Turn{Prompt: "which word?", Policy: provider.WorkspaceWrite, Resume: first.Session}, &Recorder{})
			if err != nil || second.Status != provider.StatusCompleted {
				t.Fatalf("resumed turn: %+v %v", second, err)
			}
			reqs := e.model.AgentRequests()
			last := strings.Join(reqs[len(reqs)-1].Texts, "\n")
			if !strings.Contains(last, "remember the word zebra") || !strings.Contains(last, "Noted: zebra.") || !strings.Contains(last, "which word?") {
				t.Errorf("the resumed request's conversation lacks the earlier messages:\n%s", last)
			}
			if second.Session == "" {
				t.Errorf("the resumed turn has no session handle to continue from next")
			}
		}},
		{"a rejected resume says so", func(t *testing.T, e *env) {
			_, err := e.turn(t, context.Background(), provider.Turn{Prompt: "continue", Policy: provider.WorkspaceWrite, Resume: bogusSession}, &Recorder{})
			if !errors.Is(err, provider.ErrResumeRejected) {
				t.Fatalf("Run: %v, want ErrResumeRejected", err)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			model, err := fakemodel.Start()
			if err != nil {
				t.Fatal(err)
			}
			defer model.Close()
			e := &env{h: h, model: model, home: t.TempDir(), cwd: t.TempDir()}
			c.run(t, e)
		})
	}
}
