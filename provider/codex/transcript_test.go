package codex

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nlx-dev/nlx/internal/reason"
	"github.com/nlx-dev/nlx/provider"
)

// The tests of this file replay transcripts (testdata/transcripts, JSONL
// of {"dir":"codex"|"nlx"|"cancel","msg":...}) through io.Pipe pairs: the
// codex lines are written to the adapter's stdout, and each nlx line must
// be the next line the adapter writes to its stdin (compared as JSON).

// fixtureTurn is the turn a fixture was recorded with (paths
// normalized).
func fixtureTurn(prompt string) provider.Turn {
	return provider.Turn{Prompt: prompt, Cwd: "/workspace", Policy: provider.WorkspaceWrite}
}

// replayed is what a replay saw.
type replayed struct {
	res  provider.Result
	err  error
	sent []string // what the adapter wrote past the transcript's end
}

// replay runs turn through the adapter against entries.
func replay(t *testing.T, entries []entry, turn provider.Turn, h *recorder) replayed {
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
	var actual []entry // the traffic, to validate what the adapter sent
	for i, e := range entries {
		switch e.Dir {
		case fromCodex:
			if _, err := stdoutW.Write(append(append([]byte(nil), e.Msg...), '\n')); err != nil {
				t.Fatalf("line %d: the adapter stopped reading: %v", i+1, err)
			}
			actual = append(actual, e)
		case fromNLX:
			got, ok := next()
			if !ok {
				t.Fatalf("line %d: the adapter sent nothing, want %s", i+1, e.Msg)
			}
			actual = append(actual, entry{Dir: fromNLX, Msg: json.RawMessage(got)})
			if err := sameJSON(got, e.Msg, e.Subset); err != nil {
				t.Fatalf("line %d: the adapter sent\n  %s\nwant\n  %s\n(%v)", i+1, got, e.Msg, err)
			}
		case cancelHere:
			deadline := time.Now().Add(5 * time.Second)
			for !strings.HasSuffix(h.Texts(), e.AfterText) && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			cancel()
		case eofHere:
			stdoutW.Close()
		default:
			t.Fatalf("line %d: unknown dir %q", i+1, e.Dir)
		}
	}
	var r ran
	select {
	case r = <-done:
	case <-time.After(provider.Grace + 5*time.Second):
		t.Fatal("Run did not return after the transcript's end")
	}
	out := replayed{res: r.res, err: r.err}
	for l := range lines { // ends when the adapter closes stdin
		out.sent = append(out.sent, l)
		actual = append(actual, entry{Dir: fromNLX, Msg: json.RawMessage(l)})
	}
	stdoutW.Close()
	for _, bad := range loadSchema(t).validateTranscript(actual) {
		if bad.dir == fromNLX {
			t.Errorf("the adapter sent what the schema does not allow: %v", bad)
		}
	}
	return out
}

// sameJSON compares two JSON texts as values; with subset, got may have
// more object members than want.
func sameJSON(got string, want []byte, subset bool) error {
	var g, w any
	if err := json.Unmarshal([]byte(got), &g); err != nil {
		return fmt.Errorf("not JSON: %w", err)
	}
	if err := json.Unmarshal(want, &w); err != nil {
		return fmt.Errorf("the fixture's line is not JSON: %w", err)
	}
	if subset && contains(g, w) || !subset && reflect.DeepEqual(g, w) {
		return nil
	}
	return errors.New("different")
}

// contains reports whether got has every member of want, recursively.
func contains(got, want any) bool {
	wm, ok := want.(map[string]any)
	if !ok {
		return reflect.DeepEqual(got, want)
	}
	gm, ok := got.(map[string]any)
	if !ok {
		return false
	}
	for k, v := range wm {
		if gv, ok := gm[k]; !ok || !contains(gv, v) {
			return false
		}
	}
	return true
}

// TestFixturesValidate checks every fixture against the schema.
func TestFixturesValidate(t *testing.T) {
	paths, err := filepath.Glob("testdata/transcripts/*.jsonl")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no fixtures: %v", err)
	}
	s := loadSchema(t)
	for _, p := range paths {
		t.Run(filepath.Base(p), func(t *testing.T) {
			for _, bad := range s.validateTranscript(readTranscript(t, p)) {
				t.Errorf("%s: %v", p, bad)
			}
		})
	}
}

func TestReplay(t *testing.T) {
	tests := []struct {
		file   string
		prompt string
		decide func(provider.Permission) provider.Decision
		check  func(t *testing.T, r replayed, h *recorder)
	}{
		{file: "text.jsonl", prompt: "say hi", check: func(t *testing.T, r replayed, h *recorder) {
			if r.err != nil || r.res.Status != provider.StatusCompleted || r.res.Text != "Hello from the fake model, in several deltas." {
				t.Errorf("result %+v, %v", r.res, r.err)
			}
		}},
		{file: "command-denied.jsonl", prompt: "make the file", decide: deny, check: func(t *testing.T, r replayed, h *recorder) {
			if r.err != nil || r.res.Status != provider.StatusCompleted || r.res.Text != "done" {
				t.Errorf("result %+v, %v", r.res, r.err)
			}
			asked := h.Asked()
			if len(asked) != 1 || asked[0].Kind != provider.PermissionCommand || asked[0].Command != "/bin/bash -lc 'touch M'" || asked[0].Cwd != "/workspace" {
				t.Errorf("asked %+v", asked)
			}
		}},
		{file: "late-completion.jsonl", prompt: "take your time", check: func(t *testing.T, r replayed, h *recorder) {
			if r.err != nil || r.res.Status != provider.StatusInterrupted || r.res.Error == nil || r.res.Error.Code != reason.TurnCancelled {
				t.Fatalf("result %+v (error %+v), %v: want interrupted, turn_cancelled", r.res, r.res.Error, r.err)
			}
			if r.res.Text != "partial answer" {
				t.Errorf("result text %q, want what came before the interrupt", r.res.Text)
			}
			stale := h.Of(provider.EventStale)
			if len(stale) != 1 || stale[0].Text != "partial answer and the rest" {
				t.Errorf("stale events %+v, want the completed text once", stale)
			}
			if got := h.Texts(); got != "partial answer" {
				t.Errorf("text events %q: what came after the interrupt is stale, not text", got)
			}
		}},
		{file: "server-requests.jsonl", prompt: "say hi", check: func(t *testing.T, r replayed, h *recorder) {
			if r.err != nil || r.res.Status != provider.StatusCompleted {
				t.Errorf("result %+v, %v", r.res, r.err)
			}
			if len(h.Asked()) != 0 {
				t.Errorf("asked %+v: nothing of these goes to the handler", h.Asked())
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			h := &recorder{Decide: tt.decide}
			r := replay(t, readTranscript(t, filepath.Join("testdata/transcripts", tt.file)), fixtureTurn(tt.prompt), h)
			if len(r.sent) != 0 {
				t.Errorf("the adapter sent more than the transcript: %q", r.sent)
			}
			tt.check(t, r, h)
		})
	}
}
