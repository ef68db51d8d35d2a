package state_test

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/nlx-dev/nlx/internal/reason"
	"github.com/nlx-dev/nlx/state"
)

// execSQL runs statements on path through a connection of its own, closed
// (and so checkpointed, its -wal and -shm removed) before it returns.
func execSQL(t *testing.T, path string, stmts ...string) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, s := range stmts {
		if _, err := db.Exec(s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}

// nlxState makes a state at path with one apply's worth of bookkeeping.
func nlxState(t *testing.T, path string) {
	t.Helper()
	db, err := state.Open(context.Background(), path, state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

func refusalCode(err error) reason.Code {
	var r *reason.Error
	if errors.As(err, &r) {
		return r.Code
	}
	return ""
}

// TestOpenRefusesWhatIsNotAState opens, in every mode, files that are not
// an intact nlx state: each is refused with its code and left exactly as it
// was (nlx's tables were once added to an unrelated database, and a state
// without its lineage row was reinitialised at serial 0).
func TestOpenRefusesWhatIsNotAState(t *testing.T) {
	modes := []struct {
		name string
		opts state.Options
	}{
		{"read-only", state.Options{ReadOnly: true}},
		{"writable", state.Options{}},
		{"writable, must exist", state.Options{MustExist: true}},
	}
	files := []struct {
		name string
		make func(t *testing.T, path string)
		code reason.Code
	}{
		{"another program's database", func(t *testing.T, path string) {
			execSQL(t, path, `CREATE TABLE notes (body TEXT)`, `INSERT INTO notes VALUES ('mine')`)
		}, reason.NotAnNlxState},
		{"another program's WAL database", func(t *testing.T, path string) {
			execSQL(t, path, `PRAGMA journal_mode = WAL`, `CREATE TABLE lineage (x)`, `INSERT INTO lineage VALUES (1)`)
		}, reason.NotAnNlxState},
		{"not a database", func(t *testing.T, path string) {
			if err := os.WriteFile(path, []byte("lineage: abc\nserial: 3\n"), 0o600); err != nil {
				t.Fatal(err)
			}
		}, reason.NotAnNlxState},
		{"nlx state without its lineage row", func(t *testing.T, path string) {
			nlxState(t, path)
			execSQL(t, path, `DELETE FROM lineage`)
		}, reason.StateDamaged},
	}
	for _, f := range files {
		for _, m := range modes {
			t.Run(f.name+"/"+m.name, func(t *testing.T) {
				path := filepath.Join(t.TempDir(), "state.db")
				f.make(t, path)
				before := snapshotFiles(t, path)
				db, err := state.Open(context.Background(), path, m.opts)
				if err == nil {
					db.Close()
					t.Fatalf("Open succeeded, want %s", f.code)
				}
				if got := refusalCode(err); got != f.code {
					t.Errorf("Open: %v (code %q), want code %s", err, got, f.code)
				}
				if after := snapshotFiles(t, path); after != before {
					t.Errorf("files after the refused Open:\n got %+v\nwant %+v", after, before)
				}
			})
		}
	}
}

// TestReadOnlyNeverWrites reads a state in every way the reading commands
// do and finds its files exactly as before; a write through the read-only
// state fails without touching it.
func TestReadOnlyNeverWrites(t *testing.T) {
	ctx := context.Background()
	path := statePath(t)
	nlxState(t, path)
	before := snapshotFiles(t, path)
	db := open(t, path, state.Options{ReadOnly: true})
	if _, err := db.Snapshot(ctx); err != nil {
		t.Fatal(err)
	}
	if _, _, err := db.Meta(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Rows(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Journal(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := db.History(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := db.LockHolder(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Processes(ctx, true); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Lock(ctx, "apply"); !errors.Is(err, state.ErrReadOnly) {
		t.Errorf("Lock on a read-only state: %v, want ErrReadOnly", err)
	}
	if err := db.Dispatch(ctx, 1, nil); !errors.Is(err, state.ErrReadOnly) {
		t.Errorf("Dispatch on a read-only state: %v, want ErrReadOnly", err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if after := snapshotFiles(t, path); after != before {
		t.Errorf("files after reading:\n got %+v\nwant %+v", after, before)
	}
}

// TestReadOnlyMissing: reading never creates a state.
func TestReadOnlyMissing(t *testing.T) {
	path := statePath(t)
	_, err := state.Open(context.Background(), path, state.Options{ReadOnly: true})
	if !errors.Is(err, state.ErrNoState) {
		t.Fatalf("Open: %v, want ErrNoState", err)
	}
	if _, err := os.Stat(filepath.Dir(path)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the state directory exists after a read-only Open: %v", err)
	}
}

// TestOutdatedState: reading commands refuse a state an older nlx wrote,
// untouched; a writing Open migrates it, keeping its lineage and serial.
func TestOutdatedState(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "state.db")
	if err := state.MigrateOnly(path, state.SchemaVersion()-1); err != nil {
		t.Fatal(err)
	}
	before := snapshotFiles(t, path)
	_, err := state.Open(ctx, path, state.Options{ReadOnly: true})
	if got := refusalCode(err); got != reason.StateOutdated {
		t.Fatalf("read-only Open: %v, want %s", err, reason.StateOutdated)
	}
	if after := snapshotFiles(t, path); after != before {
		t.Errorf("files after the refused Open:\n got %+v\nwant %+v", after, before)
	}
	db := open(t, path, state.Options{MustExist: true})
	lineage, serial, err := db.Meta(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if lineage != "old-lineage" || serial != 3 {
		t.Errorf("after migrating: lineage %s serial %d, want old-lineage serial 3", lineage, serial)
	}
	ms, err := db.Migrations(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != state.SchemaVersion() {
		t.Errorf("%d migrations recorded, want %d", len(ms), state.SchemaVersion())
	}
}

// TestEmptyFile: an empty file is an empty database; a first writing use
// makes it a state, reading refuses it.
func TestEmptyFile(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "state.db")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := state.Open(ctx, path, state.Options{ReadOnly: true}); refusalCode(err) != reason.NotAnNlxState {
		t.Fatalf("read-only Open of an empty file: %v, want %s", err, reason.NotAnNlxState)
	}
	db := open(t, path, state.Options{})
	if lineage, _, err := db.Meta(ctx); err != nil || !uuidV4.MatchString(lineage) {
		t.Errorf("Meta = %q, %v; want a new lineage", lineage, err)
	}
}
