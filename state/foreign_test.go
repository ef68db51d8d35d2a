package state_test

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/nlx-dev/nlx/state"
)

// TestForeignCopy: another program's WAL database is copied whole, its
// un-checkpointed writes included, and nothing is created beside it, with
// or without a -wal there.
func TestForeignCopy(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	src := filepath.Join(dir, "openclaw.sqlite")
	db, err := sql.Open("sqlite", "file:"+src+"?_pragma=journal_mode(WAL)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	for _, q := range []string{`CREATE TABLE cron_jobs (job_id TEXT PRIMARY KEY, name TEXT)`, `PRAGMA wal_checkpoint(TRUNCATE)`,
		`PRAGMA wal_autocheckpoint=0`, `INSERT INTO cron_jobs VALUES ('a', 'first'), ('b', 'second')`} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(q, err)
		}
	}
	listing := func() []string {
		entries, _ := os.ReadDir(dir)
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		return names
	}
	before := listing()
	if !slices.Contains(before, "openclaw.sqlite-wal") {
		t.Fatalf("no -wal to copy: %v", before)
	}
	for _, name := range []string{"with-wal.sqlite", "again.sqlite"} {
		dst := filepath.Join(t.TempDir(), name)
		if err := state.ForeignCopy(ctx, src, dst); err != nil {
			t.Fatal(err)
		}
		f, err := state.OpenForeign(ctx, dst)
		if err != nil {
			t.Fatal(err)
		}
		tables, err := f.Tables(ctx)
		if err != nil || len(tables) != 1 || !slices.Equal(tables[0].Key, []string{"job_id"}) {
			t.Fatalf("tables %+v %v", tables, err)
		}
		var ids []string
		err = f.Rows(ctx, tables[0], func(v []any) error { ids = append(ids, v[0].(string)); return nil })
		f.Close()
		if err != nil || !slices.Equal(ids, []string{"a", "b"}) {
			t.Errorf("rows %v %v: the WAL's writes are missing", ids, err)
		}
		if got := listing(); !slices.Equal(got, before) {
			t.Errorf("the source directory changed: %v -> %v", before, got)
		}
	}
	db.Exec(`PRAGMA wal_checkpoint(TRUNCATE)`)
	db.Close()
	os.Remove(src + "-wal")
	os.Remove(src + "-shm")
	before = listing()
	if err := state.ForeignCopy(ctx, src, filepath.Join(t.TempDir(), "x.sqlite")); err != nil {
		t.Fatal(err)
	}
	if got := listing(); !slices.Equal(got, before) {
		t.Errorf("the source directory changed: %v -> %v", before, got)
	}
}
