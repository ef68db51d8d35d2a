package state_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"github.com/nlx-dev/nlx/plan"
	"github.com/nlx-dev/nlx/state"
)

// uuidV4 is the text form of a random (version 4, RFC 4122 variant) UUID.
var uuidV4 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// clock returns a fixed clock, so that every recorded time is known.
func clock(rfc3339 string) func() time.Time {
	at, err := time.Parse(time.RFC3339, rfc3339)
	if err != nil {
		panic(err)
	}
	return func() time.Time { return at }
}

// statePath is a state file path in a fresh directory that does not exist
// yet.
func statePath(t *testing.T) string {
	t.Helper()
	return filepath.Join(t.TempDir(), "nlx", "state.db")
}

// open opens the state at path and closes it when the test ends.
func open(t *testing.T, path string, opts state.Options) *state.DB {
	t.Helper()
	db, err := state.Open(context.Background(), path, opts)
	if err != nil {
		t.Fatalf("Open(%s): %v", path, err)
	}
	t.Cleanup(func() {
		if err := db.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return db
}

// raw opens path through database/sql directly, bypassing package state, as
// another program (or a future nlx) would.
func raw(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(15000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func queryInt(t *testing.T, db *sql.DB, query string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := db.QueryRow(query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

// changes reads a fixture: a JSON array of plan changes as a plan file holds
// them.
func changes(t *testing.T, name string) []plan.Change {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	var cs []plan.Change
	if err := json.Unmarshal(data, &cs); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return cs
}
