package main

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/nlx-dev/nlx/state"
)

// cmdInstant VAR OFFSET sets VAR to now+OFFSET as RFC 3339 in UTC, whole
// seconds (for a job's `at`).
func cmdInstant(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: instant VAR OFFSET")
	}
	d, err := time.ParseDuration(args[1])
	ts.Check(err)
	ts.Setenv(args[0], time.Now().Add(d).UTC().Truncate(time.Second).Add(time.Second).Format(time.RFC3339))
}

// cmdWaitclaim STATE JOB PHASE[,PHASE...] [VAR] waits (up to two minutes)
// until the newest claim of JOB is in one of the phases, and sets VAR to
// its id. With ! it fails when such a claim appears within five seconds.
func cmdWaitclaim(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) < 3 || len(args) > 4 {
		ts.Fatalf("usage: waitclaim STATE JOB PHASE[,PHASE...] [VAR]")
	}
	phases := strings.Split(args[2], ",")
	waitState(ts, neg, args[0], "job "+args[1]+": a claim in phase "+args[2], func(ctx context.Context, db *state.DB) (string, string, bool) {
		rows, err := db.Claims(ctx, args[1], 1)
		if err != nil || len(rows) == 0 {
			return "", "none", false
		}
		return rows[0].ID, string(rows[0].Phase), slices.Contains(phases, string(rows[0].Phase))
	}, args[3:]...)
}

// waitState polls the state at path (read-only) until probe finds what
// it looks for, and sets the variable named in vars to the id it
// returns; with neg it fails when probe finds it within five seconds.
// what names it in the failure; probe also says what it found last.
func waitState(ts *testscript.TestScript, neg bool, path, what string, probe func(ctx context.Context, db *state.DB) (id, last string, found bool), vars ...string) {
	ctx := context.Background()
	wait := 2 * time.Minute
	if neg {
		wait = 5 * time.Second
	}
	deadline := time.Now().Add(wait)
	last := "none"
	for time.Now().Before(deadline) {
		db, err := state.Open(ctx, ts.MkAbs(path), state.Options{ReadOnly: true})
		if err == nil {
			id, got, found := probe(ctx, db)
			db.Close()
			last = got
			if found {
				if neg {
					ts.Fatalf("%s: found %s (%s)", what, id, got)
				}
				if len(vars) > 0 {
					ts.Setenv(vars[0], id)
				}
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !neg {
		ts.Fatalf("%s: not found (newest: %s)", what, last)
	}
}

// cmdStatefile STATE VAR sets VAR to the size and modification time of the
// state and its WAL: equal values tell that nothing wrote to it between.
func cmdStatefile(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: statefile STATE VAR")
	}
	var parts []string
	for _, p := range []string{args[0], args[0] + "-wal"} {
		if fi, err := os.Stat(ts.MkAbs(p)); err == nil {
			parts = append(parts, fmt.Sprintf("%d@%d", fi.Size(), fi.ModTime().UnixNano()))
		}
	}
	ts.Setenv(args[1], strings.Join(parts, ","))
}

// cmdHold STATE ADDRESS puts an applied resource on review hold, as an
// import does (the preservation issue's importer is what makes held
// resources; until then a test holds one by hand).
func cmdHold(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: hold STATE ADDRESS")
	}
	db, err := sql.Open("sqlite", ts.MkAbs(args[0]))
	ts.Check(err)
	defer db.Close()
	res, err := db.Exec(`UPDATE resources SET status = 'held' WHERE address = ?`, args[1])
	ts.Check(err)
	if n, _ := res.RowsAffected(); n != 1 {
		ts.Fatalf("hold: no resource %s", args[1])
	}
}
