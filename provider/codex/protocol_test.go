package codex

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/nlx-dev/nlx/internal/reason"
	"github.com/nlx-dev/nlx/provider"
)

// Synthetic transcripts: the adapter's logic at the edges the real
// program does not reach on demand (protocol violations, early exits,
// retries, a server that never ends an interrupted turn).

const (
	synThread = "thr_1"
	synTurn   = "turn_1"
)

// codexSays is a codex line of a synthetic transcript.
func codexSays(t *testing.T, v any) entry {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return entry{Dir: fromCodex, Msg: b}
}

// codexRaw is a codex line as is.
func codexRaw(line string) entry { return entry{Dir: fromCodex, Msg: json.RawMessage(line)} }

// nlxSends is an nlx line compared by its members.
func nlxSends(t *testing.T, v any) entry {
	t.Helper()
	e := codexSays(t, v)
	e.Dir, e.Subset = fromNLX, true
	return e
}

type obj = map[string]any

// handshake is the start of a synthetic turn, up to the turn running.
func handshake(t *testing.T) []entry {
	return []entry{
		nlxSends(t, obj{"method": "initialize", "id": 1}),
		codexSays(t, obj{"id": 1, "result": obj{"userAgent": "codex", "codexHome": "/h", "platformFamily": "unix", "platformOs": "linux"}}),
		nlxSends(t, obj{"method": "initialized"}),
		nlxSends(t, obj{"method": "thread/start", "id": 2}),
		codexSays(t, obj{"id": 2, "result": obj{"thread": obj{"id": synThread}}}),
		nlxSends(t, obj{"method": "turn/start", "id": 3, "params": obj{"threadId": synThread}}),
		codexSays(t, obj{"id": 3, "result": obj{"turn": obj{"id": synTurn, "status": "inProgress", "items": []any{}}}}),
		codexSays(t, obj{"method": "turn/started", "params": obj{"threadId": synThread, "turn": obj{"id": synTurn, "status": "inProgress", "items": []any{}}}}),
	}
}

func notify(t *testing.T, m method, params obj) entry {
	if _, ok := params["threadId"]; !ok {
		params["threadId"] = synThread
	}
	return codexSays(t, obj{"method": string(m), "params": params})
}

func itemNote(t *testing.T, m method, item obj) entry {
	return notify(t, m, obj{"turnId": synTurn, "item": item})
}

func delta(t *testing.T, m method, item, d string) entry {
	return notify(t, m, obj{"turnId": synTurn, "itemId": item, "delta": d})
}

func completedTurn(t *testing.T, status turnStatus, extra obj) entry {
	turn := obj{"id": synTurn, "status": string(status), "items": []any{}}
	for k, v := range extra {
		turn[k] = v
	}
	return notify(t, notifyTurnCompleted, obj{"turn": turn})
}

func usage(t *testing.T, turn string, total, last int64) entry {
	b := func(n int64) obj {
		return obj{"inputTokens": n, "cachedInputTokens": 0, "outputTokens": n / 10, "reasoningOutputTokens": 0, "totalTokens": n + n/10}
	}
	return notify(t, notifyTokenUsage, obj{"turnId": turn, "tokenUsage": obj{"total": b(total), "last": b(last)}})
}

func cat(parts ...[]entry) []entry {
	var out []entry
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func TestSyntheticTranscripts(t *testing.T) {
	t.Parallel()
	turn := provider.Turn{Prompt: "hi", Cwd: "/workspace", Policy: provider.WorkspaceWrite}
	tests := []struct {
		name    string
		turn    *provider.Turn
		entries func(t *testing.T) []entry
		status  provider.Status
		code    reason.Code // of the result's error ("" for none)
		errIs   error       // Run's error
		text    string
		msg     string // in the error's message
		check   func(t *testing.T, r replayed, h *recorder)
	}{
		{name: "final text only, no delta", status: provider.StatusCompleted, text: "whole message",
			entries: func(t *testing.T) []entry {
				return cat(handshake(t), []entry{
					itemNote(t, notifyItemStarted, obj{"type": "agentMessage", "id": "m1", "text": ""}),
					itemNote(t, notifyItemCompleted, obj{"type": "agentMessage", "id": "m1", "text": "whole message"}),
					completedTurn(t, turnCompleted, nil),
				})
			},
			check: func(t *testing.T, r replayed, h *recorder) {
				if got := h.Texts(); got != "whole message" || len(h.Of(provider.EventText)) != 1 {
					t.Errorf("text events %+v", h.Of(provider.EventText))
				}
			}},
		{name: "text only in turn/completed's items", status: provider.StatusCompleted, text: "from the items",
			entries: func(t *testing.T) []entry {
				return cat(handshake(t), []entry{
					completedTurn(t, turnCompleted, obj{"items": []any{obj{"type": "agentMessage", "id": "m1", "text": "from the items"}}}),
				})
			}},
		{name: "a retried stream restarts its message", status: provider.StatusCompleted, text: "second try",
			entries: func(t *testing.T) []entry {
				return cat(handshake(t), []entry{
					itemNote(t, notifyItemStarted, obj{"type": "agentMessage", "id": "m1", "text": ""}),
					delta(t, notifyAgentMessageDelta, "m1", "first "),
					notify(t, notifyError, obj{"turnId": synTurn, "willRetry": true, "error": obj{"message": "Reconnecting... 1/5"}}),
					itemNote(t, notifyItemStarted, obj{"type": "agentMessage", "id": "m1", "text": ""}),
					delta(t, notifyAgentMessageDelta, "m1", "second "),
					delta(t, notifyAgentMessageDelta, "m1", "try"),
					itemNote(t, notifyItemCompleted, obj{"type": "agentMessage", "id": "m1", "text": "second try"}),
					completedTurn(t, turnCompleted, nil),
				})
			}},
		{name: "two messages, other turns and threads ignored", status: provider.StatusCompleted, text: "one two",
			entries: func(t *testing.T) []entry {
				return cat(handshake(t), []entry{
					delta(t, notifyAgentMessageDelta, "m1", "one "),
					notify(t, notifyAgentMessageDelta, obj{"threadId": "other", "turnId": "x", "itemId": "m9", "delta": "NOT OURS"}),
					notify(t, notifyAgentMessageDelta, obj{"turnId": "older", "itemId": "m8", "delta": "NOT OURS"}),
					delta(t, notifyAgentMessageDelta, "m2", "two"),
					completedTurn(t, turnCompleted, nil),
				})
			}},
		{name: "usage of this turn only", status: provider.StatusCompleted,
			entries: func(t *testing.T) []entry {
				return cat(handshake(t), []entry{
					usage(t, "earlier", 100, 100), // restated on resume
					usage(t, synTurn, 150, 50),
					usage(t, synTurn, 230, 80),
					completedTurn(t, turnCompleted, nil),
				})
			},
			check: func(t *testing.T, r replayed, h *recorder) {
				if r.res.Usage.InputTokens != 130 || r.res.Usage.OutputTokens != 13 {
					t.Errorf("usage %+v, want 130 in, 13 out", r.res.Usage)
				}
				if n := len(h.Of(provider.EventUsage)); n != 2 {
					t.Errorf("%d usage events, want 2", n)
				}
			}},
		{name: "tools", status: provider.StatusCompleted,
			entries: func(t *testing.T) []entry {
				return cat(handshake(t), []entry{
					itemNote(t, notifyItemStarted, obj{"type": "commandExecution", "id": "c1", "command": "ls", "cwd": "/workspace", "status": "inProgress", "commandActions": []any{}}),
					delta(t, notifyCommandOutput, "c1", "a.txt\n"),
					itemNote(t, notifyItemCompleted, obj{"type": "commandExecution", "id": "c1", "command": "ls", "cwd": "/workspace", "status": "failed",
						"aggregatedOutput": "a.txt\n", "exitCode": 2, "commandActions": []any{}}),
					itemNote(t, notifyItemStarted, obj{"type": "fileChange", "id": "f1", "status": "inProgress", "changes": []any{obj{"path": "/workspace/a", "kind": obj{"type": "add"}, "diff": "x"}}}),
					itemNote(t, notifyItemCompleted, obj{"type": "fileChange", "id": "f1", "status": "completed", "changes": []any{obj{"path": "/workspace/a", "kind": obj{"type": "add"}, "diff": "x"}}}),
					completedTurn(t, turnCompleted, nil),
				})
			},
			check: func(t *testing.T, r replayed, h *recorder) {
				var got []string
				for _, e := range h.Events() {
					if e.Tool != nil {
						got = append(got, string(e.Type)+":"+e.Tool.ID+":"+e.Tool.Name+":"+e.Tool.Input+":"+e.Tool.Output+":"+string(e.Tool.Status))
					}
				}
				want := []string{
					"tool_start:c1:commandExecution:ls::running",
					"tool_update:c1:commandExecution::a.txt\n:running",
					"tool_end:c1:commandExecution:ls:a.txt\n:failed",
					"tool_start:f1:fileChange:/workspace/a::running",
					"tool_end:f1:fileChange:/workspace/a::completed",
				}
				if strings.Join(got, "|") != strings.Join(want, "|") {
					t.Errorf("tool events\n  %q\nwant\n  %q", got, want)
				}
			}},
		{name: "unknown server request refused, turn goes on", status: provider.StatusCompleted, text: "fine",
			entries: func(t *testing.T) []entry {
				return cat(handshake(t), []entry{
					codexRaw(`{"method":"x/unknownRequest","id":"u1","params":{"threadId":"thr_1"}}`),
					nlxSends(t, obj{"id": "u1", "error": obj{"code": float64(errMethodNotFound)}}),
					delta(t, notifyAgentMessageDelta, "m1", "fine"),
					completedTurn(t, turnCompleted, nil),
				})
			}},
		{name: "an approval with bad params is declined", status: provider.StatusCompleted,
			entries: func(t *testing.T) []entry {
				return cat(handshake(t), []entry{
					codexRaw(`{"method":"item/commandExecution/requestApproval","id":7,"params":{"itemId":42}}`),
					nlxSends(t, obj{"id": float64(7), "error": obj{"code": float64(errInvalidParams)}}),
					completedTurn(t, turnCompleted, nil),
				})
			}},
		{name: "turn failed", status: provider.StatusFailed, code: reason.ProviderError, msg: "stream disconnected: EOF",
			entries: func(t *testing.T) []entry {
				return cat(handshake(t), []entry{
					completedTurn(t, turnFailed, obj{"error": obj{"message": "stream disconnected", "additionalDetails": "EOF"}}),
				})
			}},
		{name: "turn failed, message only in the error notification", status: provider.StatusFailed, code: reason.ProviderError, msg: "quota exceeded",
			entries: func(t *testing.T) []entry {
				return cat(handshake(t), []entry{
					notify(t, notifyError, obj{"turnId": synTurn, "willRetry": false, "error": obj{"message": "quota exceeded"}}),
					completedTurn(t, turnFailed, nil),
				})
			}},
		{name: "interrupted unasked", status: provider.StatusFailed, code: reason.ProviderError, msg: "unasked",
			entries: func(t *testing.T) []entry {
				return cat(handshake(t), []entry{completedTurn(t, turnInterrupted, nil)})
			}},
		{name: "exit mid-turn", status: provider.StatusFailed, code: reason.ProviderExited, text: "half",
			entries: func(t *testing.T) []entry {
				return cat(handshake(t), []entry{delta(t, notifyAgentMessageDelta, "m1", "half"), {Dir: eofHere}})
			}},
		{name: "exit before initialize's answer", status: provider.StatusFailed, code: reason.ProviderExited, msg: "initialize",
			entries: func(t *testing.T) []entry {
				return []entry{nlxSends(t, obj{"method": "initialize"}), {Dir: eofHere}}
			}},
		{name: "not JSON", status: provider.StatusFailed, code: reason.ProviderProtocol,
			entries: func(t *testing.T) []entry {
				return []entry{nlxSends(t, obj{"method": "initialize"}), codexRaw(`Error: something went wrong`)}
			}},
		{name: "an answer to nothing asked", status: provider.StatusFailed, code: reason.ProviderProtocol,
			entries: func(t *testing.T) []entry {
				return []entry{nlxSends(t, obj{"method": "initialize"}), codexRaw(`{"id":99,"result":{}}`)}
			}},
		{name: "neither request nor response", status: provider.StatusFailed, code: reason.ProviderProtocol,
			entries: func(t *testing.T) []entry {
				return []entry{nlxSends(t, obj{"method": "initialize"}), codexRaw(`{"id":1}`)}
			}},
		{name: "thread without id", status: provider.StatusFailed, code: reason.ProviderProtocol,
			entries: func(t *testing.T) []entry {
				return cat(handshake(t)[:4], []entry{codexSays(t, obj{"id": 2, "result": obj{"thread": obj{}}})})
			}},
		{name: "initialize refused", status: provider.StatusFailed, code: reason.ProviderError, msg: "Already initialized",
			entries: func(t *testing.T) []entry {
				return []entry{nlxSends(t, obj{"method": "initialize"}), codexRaw(`{"id":1,"error":{"code":-32600,"message":"Already initialized"}}`)}
			}},
		{name: "turn/start refused", status: provider.StatusFailed, code: reason.ProviderError, msg: "thread not found",
			entries: func(t *testing.T) []entry {
				return cat(handshake(t)[:6], []entry{codexRaw(`{"id":3,"error":{"code":-32600,"message":"thread not found"}}`)})
			}},
		{name: "resume rejected", turn: &provider.Turn{Prompt: "hi", Cwd: "/workspace", Policy: provider.DangerFullAccess, Resume: "thr_old"},
			errIs: provider.ErrResumeRejected,
			entries: func(t *testing.T) []entry {
				return []entry{
					handshake(t)[0], handshake(t)[1], handshake(t)[2],
					nlxSends(t, obj{"method": "thread/resume", "id": 2, "params": obj{"threadId": "thr_old", "approvalPolicy": "never", "sandbox": "danger-full-access", "excludeTurns": true}}),
					codexRaw(`{"id":2,"error":{"code":-32600,"message":"no rollout found for thread id thr_old"}}`),
				}
			}},
		{name: "cancel before the thread", status: provider.StatusInterrupted, code: reason.TurnCancelled,
			entries: func(t *testing.T) []entry {
				return cat(handshake(t)[:4], []entry{{Dir: cancelHere}})
			}},
		{name: "cancel before turn/start's answer", status: provider.StatusInterrupted, code: reason.TurnCancelled,
			entries: func(t *testing.T) []entry {
				h := handshake(t)
				return cat(h[:6], []entry{{Dir: cancelHere}}, h[6:7], []entry{
					nlxSends(t, obj{"method": "turn/interrupt", "id": 4, "params": obj{"threadId": synThread, "turnId": synTurn}}),
					codexSays(t, obj{"id": 4, "result": obj{}}),
					completedTurn(t, turnInterrupted, nil),
				})
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tu := turn
			if tt.turn != nil {
				tu = *tt.turn
			}
			h := &recorder{}
			r := replay(t, tt.entries(t), tu, h)
			if tt.errIs != nil {
				if !errors.Is(r.err, tt.errIs) {
					t.Fatalf("Run error %v, want %v", r.err, tt.errIs)
				}
				return
			}
			if r.err != nil {
				t.Fatalf("Run error %v", r.err)
			}
			if r.res.Status != tt.status {
				t.Errorf("status %s, want %s (result %+v, error %+v)", r.res.Status, tt.status, r.res, r.res.Error)
			}
			switch {
			case tt.code == "" && r.res.Error != nil:
				t.Errorf("error %+v, want none", r.res.Error)
			case tt.code != "" && (r.res.Error == nil || r.res.Error.Code != tt.code):
				t.Errorf("error %+v, want code %s", r.res.Error, tt.code)
			case tt.msg != "" && !strings.Contains(r.res.Error.Message, tt.msg):
				t.Errorf("message %q, want it to contain %q", r.res.Error.Message, tt.msg)
			}
			if tt.text != "" && r.res.Text != tt.text {
				t.Errorf("text %q, want %q", r.res.Text, tt.text)
			}
			if len(r.sent) != 0 {
				t.Errorf("the adapter sent more than the transcript: %q", r.sent)
			}
			if tt.check != nil {
				tt.check(t, r, h)
			}
		})
	}
}

// TestInterruptGrace: a server that never ends the interrupted turn is
// given up on after provider.Grace.
func TestInterruptGrace(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("waits provider.Grace")
	}
	entries := cat(handshake(t), []entry{
		{Dir: cancelHere},
		nlxSends(t, obj{"method": "turn/interrupt", "id": 4}),
	})
	start := time.Now()
	r := replay(t, entries, provider.Turn{Prompt: "hi", Cwd: "/workspace", Policy: provider.WorkspaceWrite}, &recorder{})
	d := time.Since(start)
	if r.err != nil || r.res.Status != provider.StatusInterrupted || r.res.Error == nil || r.res.Error.Code != reason.TurnCancelled {
		t.Fatalf("result %+v, %v", r.res, r.err)
	}
	if d < provider.Grace || d > provider.Grace+2*time.Second {
		t.Errorf("Run returned after %v, want about %v", d, provider.Grace)
	}
}

// TestCancelledBeforeRun: a context that ended before Run sends nothing.
func TestCancelledBeforeRun(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(reason.New(reason.MembershipRevoked, "gone"))
	stdinR, stdinW := io.Pipe()
	stdoutR, stdoutW := io.Pipe()
	defer stdoutW.Close()
	sent := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(stdinR)
		sent <- b
	}()
	res, err := (&Adapter{}).Run(ctx, provider.Pipes{Stdin: stdinW, Stdout: stdoutR}, provider.Turn{Prompt: "hi"}, &recorder{})
	if err != nil || res.Status != provider.StatusInterrupted || res.Error == nil || res.Error.Code != reason.MembershipRevoked {
		t.Fatalf("Run = %+v, %v", res, err)
	}
	if b := <-sent; len(b) != 0 {
		t.Errorf("sent %q, want nothing", b)
	}
}
