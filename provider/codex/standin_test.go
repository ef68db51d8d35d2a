package codex

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nlx-dev/nlx/internal/fakemodel"
	"github.com/nlx-dev/nlx/internal/reason"
	"github.com/nlx-dev/nlx/internal/testgen"
	"github.com/nlx-dev/nlx/provider"
)

// The tests of this file drive the adapter against internal/codexstandin,
// the small stand-in for codex app-server that the scale tests and the
// benchmark run by the hundred: built here, run directly (no sandbox)
// against the fake model as the real program is in real_test.go, every
// message it sends checked against the pinned schema (codexProc.wait).

// buildStandin builds the stand-in into dir, static, as its users do.
func buildStandin(t testing.TB, dir string) string {
	t.Helper()
	bin, err := testgen.BuildStandin(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// startStandin starts the stand-in as startCodex starts codex.
func startStandin(t testing.TB, bin string, fake *fakemodel.Server, home, cwd string, turn provider.Turn) *codexProc {
	t.Helper()
	return startProgram(t, bin, fake, home, cwd, turn)
}

// runStandin runs one turn through the adapter against a new stand-in,
// waits for it to exit and checks the transcript against the schema.
func runStandin(t *testing.T, bin string, ctx context.Context, fake *fakemodel.Server, home string, turn provider.Turn, h provider.Handler) (provider.Result, error, *codexProc) {
	t.Helper()
	if turn.Cwd == "" {
		turn.Cwd = t.TempDir()
	}
	p := startStandin(t, bin, fake, home, turn.Cwd, turn)
	res, err := (&Adapter{}).Run(ctx, p.pipes, turn, h)
	p.wait(t)
	if len(p.tr.Entries()) == 0 {
		t.Errorf("an empty transcript: nothing was validated")
	}
	return res, err, p
}

// received lists the methods of the notifications the stand-in sent, in
// order, and the turn/completed statuses.
func received(tr *transcript) (methods, statuses []string) {
	for _, e := range tr.Entries() {
		if e.Dir != fromCodex {
			continue
		}
		var m struct {
			Method string `json:"method"`
			Params struct {
				Turn struct {
					Status string `json:"status"`
				} `json:"turn"`
			} `json:"params"`
		}
		if json.Unmarshal(e.Msg, &m) != nil || m.Method == "" {
			continue
		}
		methods = append(methods, m.Method)
		if m.Method == string(notifyTurnCompleted) {
			statuses = append(statuses, m.Params.Turn.Status)
		}
	}
	return methods, statuses
}

// inputTokens is what the fake model counts for a request body.
func inputTokens(body []byte) int64 { return int64(len(body)/4 + 1) }

func TestStandin(t *testing.T) {
	bin := buildStandin(t, t.TempDir())

	t.Run("version", func(t *testing.T) {
		t.Parallel()
		out, err := exec.Command(bin, (&Adapter{}).VersionArgs()...).CombinedOutput()
		if err != nil {
			t.Fatalf("--version: %v\n%s", err, out)
		}
		v, err := (&Adapter{}).ParseVersion(string(out))
		if err != nil || v != "0.169.0" || string(out) != "codex-cli 0.169.0\n" {
			t.Errorf("--version printed %q: ParseVersion = %q, %v; want the pinned program's line, 0.169.0", out, v, err)
		}
	})

	t.Run("text turn", func(t *testing.T) {
		t.Parallel()
		const text = "Hello from the stand-in, in several deltas."
		fake := startFake(t)
		fake.Push(fakemodel.Reply{Steps: []fakemodel.Step{{Text: text}}})
		h := &recorder{}
		res, err, p := runStandin(t, bin, context.Background(), fake, "", provider.Turn{Prompt: "say hi", Policy: provider.WorkspaceWrite}, h)
		if err != nil {
			t.Fatal(err)
		}
		if res.Status != provider.StatusCompleted || res.Error != nil || res.Text != text {
			t.Fatalf("result %+v, want completed with %q", res, text)
		}
		if h.Texts() != text || h.Count(provider.EventText) < 2 {
			t.Errorf("%d text events making %q, want the deltas of %q", h.Count(provider.EventText), h.Texts(), text)
		}
		if s := h.Of(provider.EventSession); len(s) != 1 || s[0].Session == "" || s[0].Session != res.Session {
			t.Errorf("session events %+v, result session %q", s, res.Session)
		}
		if got := p.tr.sentMethods(); !slices.Equal(got, []string{"initialize", "initialized", "thread/start", "turn/start"}) {
			t.Errorf("nlx sent %v", got)
		}
		methods, statuses := received(p.tr)
		if !slices.Equal(statuses, []string{string(turnCompleted)}) || methods[0] != string(notifyTurnStarted) ||
			methods[len(methods)-2] != string(notifyTokenUsage) || methods[len(methods)-1] != string(notifyTurnCompleted) {
			t.Errorf("the stand-in sent %v (turn/completed %v)", methods, statuses)
		}
		agent := fake.AgentRequests()
		if len(agent) != 1 || len(fake.Requests()) != 1 {
			t.Fatalf("%d agent requests of %d, want exactly one", len(agent), len(fake.Requests()))
		}
		if !slices.Equal(agent[0].Texts, []string{"say hi"}) || len(agent[0].Tools) != 0 {
			t.Errorf("the request's texts %q tools %q: want the prompt, no tools", agent[0].Texts, agent[0].Tools)
		}
		if got := agent[0].Header.Get("Authorization"); got != "Bearer "+testSecret {
			t.Errorf("Authorization %q", got)
		}
		var body struct {
			Model  string `json:"model"`
			Stream bool   `json:"stream"`
		}
		if err := json.Unmarshal(agent[0].Body, &body); err != nil || body.Model != "gpt-"+FakeModelName || !body.Stream || agent[0].Path != "/v1/responses" {
			t.Errorf("request %s %s: %v", agent[0].Path, agent[0].Body, err)
		}
		// The usage is the fake's count of this request (a token a four
		// bytes of the body; 44 bytes streamed).
		want := provider.Usage{InputTokens: inputTokens(agent[0].Body), OutputTokens: int64(len(text)/4 + 1)}
		if res.Usage != want || h.Count(provider.EventUsage) != 1 {
			t.Errorf("usage %+v (%d usage events), want %+v", res.Usage, h.Count(provider.EventUsage), want)
		}
	})

	t.Run("reasoning", func(t *testing.T) {
		t.Parallel()
		fake := startFake(t)
		fake.Push(fakemodel.Reply{Steps: []fakemodel.Step{{Reasoning: "thinking it over"}, {Text: "The answer."}}})
		h := &recorder{}
		res, err, _ := runStandin(t, bin, context.Background(), fake, "", provider.Turn{Prompt: "think", Policy: provider.DangerFullAccess}, h)
		if err != nil || res.Status != provider.StatusCompleted || res.Text != "The answer." {
			t.Fatalf("result %+v, %v", res, err)
		}
		var b strings.Builder
		for _, e := range h.Of(provider.EventReasoning) {
			b.WriteString(e.Text)
		}
		if b.String() != "thinking it over" {
			t.Errorf("reasoning %q", b.String())
		}
		if res.Usage.ReasoningTokens != int64(len("thinking it over")/4) {
			t.Errorf("usage %+v", res.Usage)
		}
	})

	t.Run("interrupt", func(t *testing.T) {
		t.Parallel()
		fake := startFake(t)
		release := make(chan struct{})
		defer close(release)
		fake.Push(fakemodel.Reply{Steps: []fakemodel.Step{{Text: "partial answer"}, {Stall: time.Minute, Release: release}, {Text: " never sent"}}})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		h := &recorder{}
		var cancelled time.Time
		go func() {
			// Mid-stream: the first deltas have reached the handler.
			for deadline := time.Now().Add(30 * time.Second); h.Texts() != "partial answer" && time.Now().Before(deadline); {
				time.Sleep(5 * time.Millisecond)
			}
			cancelled = time.Now()
			cancel()
		}()
		res, err, p := runStandin(t, bin, ctx, fake, "", provider.Turn{Prompt: "take your time", Policy: provider.WorkspaceWrite}, h)
		if err != nil {
			t.Fatal(err)
		}
		if res.Status != provider.StatusInterrupted || res.Error == nil || res.Error.Code != reason.TurnCancelled {
			t.Fatalf("result %+v (error %+v), want interrupted with %s", res, res.Error, reason.TurnCancelled)
		}
		if d := time.Since(cancelled); d > 2*time.Second {
			t.Errorf("Run returned %v after the cancel", d)
		}
		if res.Text != "partial answer" || len(h.Of(provider.EventStale)) != 0 || res.Session == "" {
			t.Errorf("result %+v, stale %+v", res, h.Of(provider.EventStale))
		}
		if !slices.Contains(p.tr.sentMethods(), string(methodTurnInterrupt)) {
			t.Errorf("nlx sent %v, want a turn/interrupt", p.tr.sentMethods())
		}
		// The stand-in ended the turn itself (not the adapter's grace).
		if _, statuses := received(p.tr); !slices.Equal(statuses, []string{string(turnInterrupted)}) {
			t.Errorf("turn/completed statuses %v, want interrupted", statuses)
		}
	})

	t.Run("model failure", func(t *testing.T) {
		t.Parallel()
		tests := []struct {
			name  string
			steps []fakemodel.Step
			want  string // in the message, as codex 0.169.0 words it
			text  string
		}{
			{name: "disconnect", steps: []fakemodel.Step{{Text: "part"}, {Disconnect: true}},
				want: "stream disconnected before completion: Transport error: network error: error decoding response body", text: "part"},
			{name: "server error", steps: []fakemodel.Step{{Error: &fakemodel.APIError{Status: http.StatusInternalServerError, Type: "server_error", Message: "boom"}}},
				want: "We’re currently experiencing high demand"},
			{name: "bad request", steps: []fakemodel.Step{{Error: &fakemodel.APIError{Status: http.StatusBadRequest, Type: "invalid_request_error", Message: "bad input from the fake"}}},
				want: `"message":"bad input from the fake"`},
			{name: "rate limited", steps: []fakemodel.Step{{Error: &fakemodel.APIError{Status: http.StatusTooManyRequests, Type: "rate_limit_exceeded", Message: "slow down"}}},
				want: "exceeded retry limit, last status: 429 Too Many Requests"},
			{name: "failed mid-stream", steps: []fakemodel.Step{{Text: "part"}, {Error: &fakemodel.APIError{Status: 500, Type: "server_error", Message: "failed midway"}}},
				want: "stream disconnected before completion: failed midway", text: "part"},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				fake := startFake(t)
				fake.Push(fakemodel.Reply{Steps: tt.steps})
				res, err, p := runStandin(t, bin, context.Background(), fake, "", provider.Turn{Prompt: "fail", Policy: provider.WorkspaceWrite}, &recorder{})
				if err != nil {
					t.Fatal(err)
				}
				if res.Status != provider.StatusFailed || res.Error == nil || res.Error.Code != reason.ProviderError || !strings.Contains(res.Error.Message, tt.want) {
					t.Fatalf("result %+v (error %+v), want failed with %s saying %q", res, res.Error, reason.ProviderError, tt.want)
				}
				if res.Text != tt.text {
					t.Errorf("text %q, want %q", res.Text, tt.text)
				}
				if n := len(fake.AgentRequests()); n != 1 {
					t.Errorf("%d agent requests, want 1", n)
				}
				if methods, statuses := received(p.tr); !slices.Contains(methods, string(notifyError)) || !slices.Equal(statuses, []string{string(turnFailed)}) {
					t.Errorf("the stand-in sent %v (turn/completed %v), want an error notification and failed", methods, statuses)
				}
			})
		}
	})

	t.Run("tool call", func(t *testing.T) {
		t.Parallel()
		// The stand-in runs no tools: a call fails the turn, honestly.
		fake := startFake(t)
		fake.Push(fakemodel.Reply{Steps: []fakemodel.Step{{Command: "touch M"}}})
		cwd := t.TempDir()
		res, err, _ := runStandin(t, bin, context.Background(), fake, "", provider.Turn{Prompt: "make M", Cwd: cwd, Policy: provider.WorkspaceWrite}, &recorder{Decide: allow})
		if err != nil {
			t.Fatal(err)
		}
		if res.Status != provider.StatusFailed || res.Error == nil || !strings.Contains(res.Error.Message, "runs no tools") {
			t.Fatalf("result %+v (error %+v), want failed: the stand-in runs no tools", res, res.Error)
		}
		if _, err := os.Stat(filepath.Join(cwd, "M")); err == nil {
			t.Errorf("the command ran")
		}
	})

	t.Run("resume", func(t *testing.T) {
		t.Parallel()
		fake := startFake(t)
		home, cwd := t.TempDir(), t.TempDir()
		fake.Push(fakemodel.Reply{Steps: []fakemodel.Step{{Text: "Noted: blue."}}}, fakemodel.Reply{Steps: []fakemodel.Step{{Text: "It was blue."}}})
		first, err, _ := runStandin(t, bin, context.Background(), fake, home, provider.Turn{Prompt: "remember the colour blue", Cwd: cwd, Policy: provider.WorkspaceWrite}, &recorder{})
		if err != nil || first.Status != provider.StatusCompleted || first.Session == "" {
			t.Fatalf("first turn %+v, %v", first, err)
		}
		h := &recorder{}
		second, err, p := runStandin(t, bin, context.Background(), fake, home,
			provider.Turn{Prompt: "which colour?", Cwd: cwd, Policy: provider.WorkspaceWrite, Resume: first.Session}, h)
		if err != nil {
			t.Fatal(err)
		}
		if second.Status != provider.StatusCompleted || second.Text != "It was blue." || second.Session != first.Session {
			t.Fatalf("second turn %+v, want completed in session %s", second, first.Session)
		}
		if got := p.tr.sentMethods(); !slices.Equal(got, []string{"initialize", "initialized", "thread/resume", "turn/start"}) {
			t.Errorf("nlx sent %v", got)
		}
		agent := fake.AgentRequests()
		if len(agent) != 2 || !slices.Equal(agent[1].Texts, []string{"remember the colour blue", "Noted: blue.", "which colour?"}) {
			t.Fatalf("agent requests %+v, want the resumed one to carry the conversation", agent)
		}
		// The thread's total counts both turns; the adapter reports this
		// turn's alone.
		if second.Usage.InputTokens != inputTokens(agent[1].Body) {
			t.Errorf("second usage %+v, want the second request's %d input tokens", second.Usage, inputTokens(agent[1].Body))
		}
	})

	t.Run("resume rejected", func(t *testing.T) {
		t.Parallel()
		for _, id := range []string{"01a23218-0000-7000-8000-000000000000", "not-a-thread"} {
			fake := startFake(t)
			h := &recorder{}
			res, err, p := runStandin(t, bin, context.Background(), fake, "", provider.Turn{Prompt: "go on", Policy: provider.WorkspaceWrite, Resume: id}, h)
			if !errors.Is(err, provider.ErrResumeRejected) {
				t.Fatalf("%s: Run = %+v, %v; want ErrResumeRejected", id, res, err)
			}
			if got := p.tr.sentMethods(); !slices.Equal(got, []string{"initialize", "initialized", "thread/resume"}) {
				t.Errorf("%s: nlx sent %v", id, got)
			}
			if len(fake.Requests()) != 0 || len(h.Events()) != 0 {
				t.Errorf("%s: requests %d, events %+v: want none", id, len(fake.Requests()), h.Events())
			}
		}
	})

	t.Run("other requests", func(t *testing.T) {
		t.Parallel()
		// Driven by hand: what the adapter never sends is refused, and
		// stdin's end ends the program.
		fake := startFake(t)
		p := startStandin(t, bin, fake, "", t.TempDir(), provider.Turn{})
		lines := bufio.NewScanner(p.pipes.Stdout)
		call := func(msg string) map[string]any {
			t.Helper()
			if _, err := io.WriteString(p.pipes.Stdin, msg+"\n"); err != nil {
				t.Fatal(err)
			}
			if !lines.Scan() {
				t.Fatalf("no answer to %s: %v", msg, lines.Err())
			}
			var m map[string]any
			if err := json.Unmarshal(lines.Bytes(), &m); err != nil {
				t.Fatal(err)
			}
			return m
		}
		if m := call(`{"method":"thread/list","id":1,"params":{}}`); m["error"] == nil {
			t.Errorf("before initialize: %v, want an error", m)
		}
		call(`{"method":"initialize","id":2,"params":{"clientInfo":{"name":"t","title":"t","version":"0"}}}`)
		if _, err := io.WriteString(p.pipes.Stdin, `{"method":"initialized"}`+"\n"); err != nil {
			t.Fatal(err)
		}
		m := call(`{"method":"thread/list","id":"three","params":{}}`)
		e, _ := m["error"].(map[string]any)
		if m["id"] != "three" || e == nil || e["code"] != float64(errMethodNotFound) {
			t.Errorf("thread/list: %v, want method not found", m)
		}
		if m := call(`{"method":"turn/interrupt","id":4,"params":{"threadId":"t","turnId":"u"}}`); m["error"] == nil {
			t.Errorf("interrupt of no turn: %v, want an error", m)
		}
		p.pipes.Stdin.Close()
		p.wait(t)
	})
}

// memory is what /proc says of a process's memory, in KiB: its resident
// set and peak, and (from smaps_rollup, 0 without it) its proportional
// set and anonymous memory. The stand-ins of a scale test share the
// binary's pages: their Pss is what they cost together, Anonymous what
// each adds.
type memory struct{ rss, hwm, pss, anon int64 }

func (m memory) String() string {
	mib := func(k int64) string { return strconv.FormatFloat(float64(k)/1024, 'f', 2, 64) + " MiB" }
	return "VmRSS " + mib(m.rss) + " (VmHWM " + mib(m.hwm) + ", Pss " + mib(m.pss) + ", anonymous " + mib(m.anon) + ")"
}

func readMemory(t testing.TB, pid int) memory {
	t.Helper()
	var m memory
	fields := func(file string, into map[string]*int64) bool {
		data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/" + file)
		if err != nil {
			return false
		}
		for _, line := range strings.Split(string(data), "\n") {
			k, v, _ := strings.Cut(line, ":")
			if p := into[k]; p != nil {
				*p, _ = strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			}
		}
		return true
	}
	if !fields("status", map[string]*int64{"VmRSS": &m.rss, "VmHWM": &m.hwm}) {
		t.Fatalf("no /proc/%d/status", pid)
	}
	fields("smaps_rollup", map[string]*int64{"Pss": &m.pss, "Anonymous": &m.anon})
	return m
}

// TestStandinRSS measures the stand-in's resident set mid-turn (the model
// request in flight, deltas streamed): a thousand of them must fit.
func TestStandinRSS(t *testing.T) {
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skip("no /proc: cannot read a resident set")
	}
	const limit = 12 << 10 // KiB: generous; it is a few MiB
	bin := buildStandin(t, t.TempDir())
	fake := startFake(t)
	release := make(chan struct{})
	fake.Push(fakemodel.Reply{Steps: []fakemodel.Step{{Text: strings.Repeat("streamed text ", 64)}, {Stall: time.Minute, Release: release}, {Text: "done"}}})
	turn := provider.Turn{Prompt: "measure me", Cwd: t.TempDir(), Policy: provider.WorkspaceWrite}
	p := startStandin(t, bin, fake, "", turn.Cwd, turn)
	h := &recorder{}
	type ran struct {
		res provider.Result
		err error
	}
	done := make(chan ran, 1)
	go func() {
		res, err := (&Adapter{}).Run(context.Background(), p.pipes, turn, h)
		done <- ran{res, err}
	}()
	for deadline := time.Now().Add(30 * time.Second); !strings.HasSuffix(h.Texts(), "streamed text "); {
		if time.Now().After(deadline) {
			close(release)
			t.Fatalf("no text streamed within 30s (%q)", h.Texts())
		}
		time.Sleep(5 * time.Millisecond)
	}
	m := readMemory(t, p.cmd.Process.Pid)
	close(release)
	r := <-done
	p.wait(t)
	if r.err != nil || r.res.Status != provider.StatusCompleted || !strings.HasSuffix(r.res.Text, "done") {
		t.Errorf("result %+v, %v", r.res, r.err)
	}
	t.Logf("the stand-in mid-turn: %v", m)
	if m.rss > limit || m.rss == 0 {
		t.Errorf("VmRSS %d KiB, want at most %d KiB", m.rss, limit)
	}
}

// TestStandinMany runs NLX_STANDIN_MANY turns at once (skipped when
// unset), each through the adapter against its own stand-in, and logs
// their resident sets mid-turn: what the scale tests count on.
func TestStandinMany(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("NLX_STANDIN_MANY"))
	if n <= 0 {
		t.Skip("set NLX_STANDIN_MANY=N to run N stand-in turns at once")
	}
	bin := buildStandin(t, t.TempDir())
	fake := startFake(t)
	release := make(chan struct{})
	for range n {
		fake.Push(fakemodel.Reply{Steps: []fakemodel.Step{{Text: "streamed"}, {Stall: time.Minute, Release: release}, {Text: " done"}}})
	}
	type ran struct {
		res provider.Result
		err error
	}
	procs := make([]*codexProc, n)
	recs := make([]*recorder, n)
	done := make(chan ran, n)
	start := time.Now()
	for i := range n {
		turn := provider.Turn{Prompt: "turn " + strconv.Itoa(i), Cwd: t.TempDir(), Policy: provider.WorkspaceWrite}
		procs[i], recs[i] = startStandin(t, bin, fake, "", turn.Cwd, turn), &recorder{}
		go func() {
			res, err := (&Adapter{}).Run(context.Background(), procs[i].pipes, turn, recs[i])
			done <- ran{res, err}
		}()
	}
	for i := range n {
		for deadline := time.Now().Add(2 * time.Minute); recs[i].Texts() != "streamed"; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				close(release)
				t.Fatalf("turn %d streamed nothing within 2 minutes", i)
			}
		}
	}
	streamed := time.Since(start)
	var total memory
	var most int64
	for _, p := range procs {
		m := readMemory(t, p.cmd.Process.Pid)
		total.rss, total.pss, total.anon = total.rss+m.rss, total.pss+m.pss, total.anon+m.anon
		most = max(most, m.rss)
	}
	close(release)
	for range n {
		if r := <-done; r.err != nil || r.res.Status != provider.StatusCompleted || r.res.Text != "streamed done" {
			t.Errorf("result %+v, %v", r.res, r.err)
		}
	}
	for _, p := range procs {
		p.wait(t)
	}
	mib := func(k int64) float64 { return float64(k) / 1024 }
	t.Logf("%d stand-ins mid-turn after %v: VmRSS total %.1f MiB (mean %.2f, max %.2f), Pss total %.1f MiB, anonymous total %.1f MiB; all done after %v",
		n, streamed.Round(time.Millisecond), mib(total.rss), mib(total.rss)/float64(n), mib(most), mib(total.pss), mib(total.anon),
		time.Since(start).Round(time.Millisecond))
}
