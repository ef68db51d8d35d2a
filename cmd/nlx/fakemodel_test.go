package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/nlx-dev/nlx/internal/fakemodel"
	"github.com/nlx-dev/nlx/state"
)

// fakeModelKey holds each script's fake model (testscript Values).
type fakeModelKey struct{}

// fakeModelBox is where a script's fake model lives once started.
type fakeModelBox struct{ s *fakemodel.Server }

// cmdFakemodel drives the fake model of a script, served in the test
// process on 127.0.0.1 (the one fake of the provider tests):
//
//	fakemodel start              start it; $FAKEMODEL_URL is its base URL, $FAKEMODEL_ADDR its host:port
//	fakemodel push STEP...       queue one reply: text:T, reasoning:T, command:CMD, 'call:TOOL {JSON}', stall:DUR, disconnect, error:STATUS
//	fakemodel wait               block until every pushed reply was taken by an agent request (60s at most)
//	fakemodel saw TEXT           some agent request carried TEXT in its conversation (! : none did)
//	fakemodel lastsaw TEXT       the last agent request carried TEXT (! : it did not)
//	fakemodel header NAME VALUE  the last agent request had header NAME holding VALUE
//	fakemodel tools              print the tools of the last agent request, one per line
//	fakemodel requests N         exactly N agent requests were made
func cmdFakemodel(ts *testscript.TestScript, neg bool, args []string) {
	box, _ := ts.Value(fakeModelKey{}).(*fakeModelBox)
	if box == nil || len(args) == 0 {
		ts.Fatalf("usage: fakemodel start|push|wait|saw|tools|requests")
	}
	if args[0] != "start" && box.s == nil {
		ts.Fatalf("fakemodel %s: not started", args[0])
	}
	switch args[0] {
	case "start":
		s, err := fakemodel.Start()
		ts.Check(err)
		box.s = s
		ts.Defer(s.Close)
		ts.Setenv("FAKEMODEL_URL", s.URL())
		ts.Setenv("FAKEMODEL_ADDR", strings.TrimPrefix(s.URL(), "http://"))
	case "push":
		var r fakemodel.Reply
		for _, a := range args[1:] {
			kind, val, _ := strings.Cut(a, ":")
			switch kind {
			case "text":
				r.Steps = append(r.Steps, fakemodel.Step{Text: val})
			case "reasoning":
				r.Steps = append(r.Steps, fakemodel.Step{Reasoning: val})
			case "command":
				r.Steps = append(r.Steps, fakemodel.Step{Command: val})
			case "call":
				name, args, _ := strings.Cut(val, " ")
				r.Steps = append(r.Steps, fakemodel.Step{Call: &fakemodel.Call{Name: name, Arguments: json.RawMessage(args)}})
			case "stall":
				d, err := time.ParseDuration(val)
				ts.Check(err)
				r.Steps = append(r.Steps, fakemodel.Step{Stall: d})
			case "disconnect":
				r.Steps = append(r.Steps, fakemodel.Step{Disconnect: true})
			case "error":
				var status int
				fmt.Sscan(val, &status)
				r.Steps = append(r.Steps, fakemodel.Step{Error: &fakemodel.APIError{Status: status, Type: "server_error", Message: "scripted failure"}})
			default:
				ts.Fatalf("fakemodel push: unknown step %q", a)
			}
		}
		box.s.Push(r)
	case "wait":
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		ts.Check(box.s.WaitTaken(ctx))
	case "saw":
		if len(args) != 2 {
			ts.Fatalf("usage: fakemodel saw TEXT")
		}
		seen := false
		for _, r := range box.s.AgentRequests() {
			for _, t := range r.Texts {
				if strings.Contains(t, args[1]) {
					seen = true
				}
			}
		}
		if seen == neg {
			ts.Fatalf("fakemodel saw %q: %v", args[1], seen)
		}
	case "lastsaw":
		reqs := box.s.AgentRequests()
		if len(args) != 2 || len(reqs) == 0 {
			ts.Fatalf("usage: fakemodel lastsaw TEXT, after an agent request")
		}
		seen := strings.Contains(strings.Join(reqs[len(reqs)-1].Texts, "\n"), args[1])
		if seen == neg {
			ts.Fatalf("fakemodel lastsaw %q: %v in %q", args[1], seen, reqs[len(reqs)-1].Texts)
		}
	case "header":
		reqs := box.s.AgentRequests()
		if len(args) != 3 || len(reqs) == 0 {
			ts.Fatalf("usage: fakemodel header NAME VALUE, after an agent request")
		}
		got := reqs[len(reqs)-1].Header.Get(args[1])
		if strings.Contains(got, args[2]) == neg {
			ts.Fatalf("fakemodel header %s: %q", args[1], got)
		}
	case "tools":
		reqs := box.s.AgentRequests()
		if len(reqs) == 0 {
			ts.Fatalf("fakemodel tools: no agent request yet")
		}
		fmt.Fprintln(ts.Stdout(), strings.Join(reqs[len(reqs)-1].Tools, "\n"))
	case "requests":
		var n int
		fmt.Sscan(args[1], &n)
		if got := len(box.s.AgentRequests()); (got == n) == neg {
			ts.Fatalf("fakemodel requests: %d agent requests, want %d", got, n)
		}
	default:
		ts.Fatalf("fakemodel: unknown subcommand %q", args[0])
	}
}

// cmdWaitpermission STATE VAR waits until a permission request is pending
// in the state and sets VAR to its id.
func cmdWaitpermission(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: waitpermission STATE VAR")
	}
	ctx := context.Background()
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		db, err := state.Open(ctx, ts.MkAbs(args[0]), state.Options{ReadOnly: true})
		if err == nil {
			rows, err := db.Permissions(ctx, false, "")
			db.Close()
			if err == nil && len(rows) > 0 {
				ts.Setenv(args[1], rows[0].ID)
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	ts.Fatalf("no permission request became pending")
}

// cmdHTTPServe VAR serves "other-server" on a new loopback port of the
// host for the rest of the script, and sets VAR to its host:port.
func cmdHTTPServe(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: httpserve VAR")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	ts.Check(err)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "other-server") })}
	go srv.Serve(ln)
	ts.Defer(func() { srv.Close() })
	ts.Setenv(args[0], ln.Addr().String())
}

// cmdLastTurn STATE VAR sets VAR to the id of the newest turn.
func cmdLastTurn(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: lastturn STATE VAR")
	}
	ctx := context.Background()
	db, err := state.Open(ctx, ts.MkAbs(args[0]), state.Options{ReadOnly: true})
	ts.Check(err)
	defer db.Close()
	rows, err := db.Turns(ctx, 1)
	ts.Check(err)
	if len(rows) == 0 {
		ts.Fatalf("lastturn: no turn yet")
	}
	ts.Setenv(args[1], rows[0].ID)
}
