package main

import (
	"context"
	"strings"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/nlx-dev/nlx/state"
)

// cmdWaitrefresh STATE WORKSPACE|ID PHASE[,PHASE...] [VAR] waits until the
// newest catalog refresh attempt of the workspace (or the attempt with
// that id, when it starts with rf-) is in one of the phases, and sets VAR
// to its id. ! waits 5s and fails if it does.
func cmdWaitrefresh(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) < 3 || len(args) > 4 {
		ts.Fatalf("usage: waitrefresh STATE WORKSPACE|ID PHASE[,PHASE...] [VAR]")
	}
	ctx := context.Background()
	phases := strings.Split(args[2], ",")
	wait := 2 * time.Minute
	if neg {
		wait = 5 * time.Second
	}
	deadline := time.Now().Add(wait)
	last := "none"
	for time.Now().Before(deadline) {
		db, err := state.Open(ctx, ts.MkAbs(args[0]), state.Options{ReadOnly: true})
		if err == nil {
			var rows []state.RefreshRow
			if strings.HasPrefix(args[1], "rf-") {
				var r state.RefreshRow
				if r, err = db.Refresh(ctx, args[1]); err == nil {
					rows = []state.RefreshRow{r}
				}
			} else {
				rows, err = db.Refreshes(ctx, args[1], "", 1)
			}
			db.Close()
			if err == nil && len(rows) > 0 {
				last = rows[0].ID + " " + string(rows[0].Phase)
				for _, p := range phases {
					if string(rows[0].Phase) != p {
						continue
					}
					if neg {
						ts.Fatalf("refresh %s is %s", rows[0].ID, p)
					}
					if len(args) == 4 {
						ts.Setenv(args[3], rows[0].ID)
					}
					return
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !neg {
		ts.Fatalf("%s: no refresh in phase %s (newest: %s)", args[1], args[2], last)
	}
}
