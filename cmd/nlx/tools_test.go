package main

import (
	"context"
	"slices"
	"strings"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/nlx-dev/nlx/state"
)

// cmdWaitrefresh STATE WORKSPACE|ID PHASE[,PHASE...] [VAR] waits until the
// newest catalog refresh attempt of the workspace (or the attempt with
// that id, when it starts with rf-) is in one of the phases, and sets VAR
// to its id. ! waits 5s and fails if it is.
func cmdWaitrefresh(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) < 3 || len(args) > 4 {
		ts.Fatalf("usage: waitrefresh STATE WORKSPACE|ID PHASE[,PHASE...] [VAR]")
	}
	phases := strings.Split(args[2], ",")
	waitState(ts, neg, args[0], args[1]+": a refresh in phase "+args[2], func(ctx context.Context, db *state.DB) (string, string, bool) {
		var rows []state.RefreshRow
		var err error
		if strings.HasPrefix(args[1], "rf-") {
			var r state.RefreshRow
			if r, err = db.Refresh(ctx, args[1]); err == nil {
				rows = []state.RefreshRow{r}
			}
		} else {
			rows, err = db.Refreshes(ctx, args[1], "", 1)
		}
		if err != nil || len(rows) == 0 {
			return "", "none", false
		}
		return rows[0].ID, rows[0].ID + " " + string(rows[0].Phase), slices.Contains(phases, string(rows[0].Phase))
	}, args[3:]...)
}
