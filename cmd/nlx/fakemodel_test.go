package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/nlx-dev/nlx/internal/fakemodel"
)

// fakeModelKey holds each script's fake model (testscript Values).
type fakeModelKey struct{}

// fakeModelBox is where a script's fake model lives once started.
type fakeModelBox struct{ s *fakemodel.Server }

// cmdFakemodel drives the fake model of a script, served in the test
// process on 127.0.0.1 (the one fake of the provider tests):
//
//	fakemodel start              start it; $FAKEMODEL_URL is its base URL
//	fakemodel push STEP...       queue one reply: text:T, reasoning:T, command:CMD, stall:DUR, disconnect, error:STATUS
//	fakemodel wait               block until the next agent request arrives (60s at most)
//	fakemodel saw TEXT           some agent request carried TEXT in its conversation (! : none did)
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
		ts.Check(box.s.WaitAgent(ctx))
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
