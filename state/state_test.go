package state_test

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/nlx-dev/nlx/state"
)

func TestOpenCreates(t *testing.T) {
	ctx := context.Background()
	path := statePath(t)
	if _, err := os.Stat(filepath.Dir(path)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("fixture: directory %s exists before Open (stat: %v)", filepath.Dir(path), err)
	}
	db := open(t, path, state.Options{})
	if got := db.Path(); got != path {
		t.Errorf("Path() = %q, want %q", got, path)
	}

	fi, err := os.Stat(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	// Searchable by the provider's user (who reaches the workspaces
	// beside the state through it), listable by its owner only; the file
	// and its -wal and -shm are its owner's alone.
	if got := fi.Mode().Perm(); !fi.IsDir() || got != 0o711 {
		t.Errorf("state directory mode = %v, want 0711", fi.Mode())
	}
	for _, f := range []string{path, path + "-wal", path + "-shm"} {
		if fi, err := os.Stat(f); err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v, %v; want a regular file of mode 0600", f, fi, err)
		}
	}

	// journal_mode is stored in the file; foreign_keys is per connection, so
	// both of the state's pools are asked.
	var mode string
	if err := raw(t, path).QueryRow(`PRAGMA journal_mode`).Scan(&mode); err != nil {
		t.Fatal(err)
	}
	if mode != "wal" {
		t.Errorf("journal_mode = %q, want %q", mode, "wal")
	}
	w, r := state.Conns(db)
	for _, c := range []struct {
		name string
		pool *sql.DB
	}{{"writer", w}, {"reader", r}} {
		if got := queryInt(t, c.pool, `PRAGMA foreign_keys`); got != 1 {
			t.Errorf("%s: foreign_keys = %d, want 1", c.name, got)
		}
	}

	lineage, serial, err := db.Meta(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !uuidV4.MatchString(lineage) {
		t.Errorf("lineage = %q, want a version 4 UUID", lineage)
	}
	if serial != 0 {
		t.Errorf("serial = %d, want 0", serial)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	for i := range 3 {
		again := open(t, path, state.Options{MustExist: i%2 == 1})
		got, gotSerial, err := again.Meta(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got != lineage || gotSerial != 0 {
			t.Errorf("reopen %d: lineage %s serial %d, want %s serial 0", i, got, gotSerial, lineage)
		}
		if err := again.Close(); err != nil {
			t.Fatal(err)
		}
	}

	// A second state is another lineage.
	other := open(t, statePath(t), state.Options{})
	if got, _, err := other.Meta(ctx); err != nil || got == lineage {
		t.Errorf("lineage of a second new state = %q, %v; want one other than %q", got, err, lineage)
	}
}

// schemaObjects lists everything in sqlite_master, to prove that reopening
// creates, drops or alters nothing.
func schemaObjects(t *testing.T, path string) []string {
	t.Helper()
	rows, err := raw(t, path).Query(`SELECT type, name, tbl_name, coalesce(sql, '') FROM sqlite_master ORDER BY type, name`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var typ, name, tbl, sql string
		if err := rows.Scan(&typ, &name, &tbl, &sql); err != nil {
			t.Fatal(err)
		}
		out = append(out, typ+" "+name+" on "+tbl+": "+sql)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestMigrations(t *testing.T) {
	ctx := context.Background()
	path := statePath(t)

	// The embedded migrations, read from the source tree independently.
	entries, err := os.ReadDir("migrations")
	if err != nil {
		t.Fatal(err)
	}
	var want []state.Migration
	for _, e := range entries {
		num, name, ok := strings.Cut(strings.TrimSuffix(e.Name(), ".sql"), "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || !strings.HasSuffix(e.Name(), ".sql") {
			t.Fatalf("migration file %s: want NNNN_name.sql", e.Name())
		}
		want = append(want, state.Migration{Version: v, Name: name, AppliedAt: "2026-01-02T03:04:05Z"})
	}
	if got := state.SchemaVersion(); got != len(want) || got < 1 {
		t.Fatalf("SchemaVersion() = %d, want %d (the number of files in migrations/)", got, len(want))
	}

	db := open(t, path, state.Options{Now: clock("2026-01-02T03:04:05Z")})
	first, err := db.Migrations(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range first {
		if first[i].SQL != "" {
			t.Errorf("Migrations()[%d].SQL is set; the file records no SQL", i)
		}
	}
	if !reflect.DeepEqual(first, want) {
		t.Errorf("Migrations() after first Open:\n got %+v\nwant %+v", first, want)
	}
	for i, m := range first {
		if m.Version != i+1 {
			t.Errorf("Migrations()[%d].Version = %d, want %d", i, m.Version, i+1)
		}
	}
	objects := schemaObjects(t, path)
	if len(objects) == 0 {
		t.Fatal("sqlite_master is empty after Open")
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	// Reopening, with a clock that would show any new migration record, must
	// run nothing again: 0001_init.sql has plain CREATE TABLEs, so a second
	// run would also fail Open.
	for i := range 4 {
		db, err := state.Open(ctx, path, state.Options{Now: clock(fmt.Sprintf("2027-01-0%dT00:00:00Z", i+1)), MustExist: i%2 == 0})
		if err != nil {
			t.Fatalf("reopen %d: %v", i, err)
		}
		got, err := db.Migrations(ctx)
		if cerr := db.Close(); cerr != nil {
			t.Fatal(cerr)
		}
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, first) {
			t.Errorf("reopen %d: Migrations()\n got %+v\nwant %+v", i, got, first)
		}
		if got := schemaObjects(t, path); !reflect.DeepEqual(got, objects) {
			t.Errorf("reopen %d: sqlite_master\n got %q\nwant %q", i, got, objects)
		}
		if got := queryInt(t, raw(t, path), `SELECT count(*) FROM schema_migrations`); got != int64(len(want)) {
			t.Errorf("reopen %d: %d schema_migrations rows, want %d", i, got, len(want))
		}
	}
}

// fileState is what a test can see of a database file and its companions.
type fileState struct {
	DBHash string
	WAL    string // "absent" or its size
	SHM    string
}

func snapshotFiles(t *testing.T, path string) fileState {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	side := func(suffix string) string {
		fi, err := os.Stat(path + suffix)
		if errors.Is(err, fs.ErrNotExist) {
			return "absent"
		}
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprintf("%d bytes", fi.Size())
	}
	return fileState{DBHash: fmt.Sprintf("%x", sha256.Sum256(data)), WAL: side("-wal"), SHM: side("-shm")}
}

func TestOpenRefusesNewerSchema(t *testing.T) {
	ctx := context.Background()
	for _, opts := range []state.Options{{}, {MustExist: true}} {
		t.Run(fmt.Sprintf("MustExist=%v", opts.MustExist), func(t *testing.T) {
			path := statePath(t)
			db := open(t, path, state.Options{})
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			future := state.SchemaVersion() + 1
			other := raw(t, path)
			if _, err := other.Exec(`INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, 'from_the_future', '2030-01-01T00:00:00Z')`, future); err != nil {
				t.Fatal(err)
			}
			if _, err := other.Exec(`PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
				t.Fatal(err)
			}
			if err := other.Close(); err != nil {
				t.Fatal(err)
			}
			before := snapshotFiles(t, path)

			got, err := state.Open(ctx, path, opts)
			if err == nil {
				got.Close()
				t.Fatal("Open of a newer state succeeded, want *NewerSchemaError")
			}
			var newer *state.NewerSchemaError
			if !errors.As(err, &newer) {
				t.Fatalf("Open: %v (%T), want *NewerSchemaError", err, err)
			}
			if newer.Found != future || newer.Support != state.SchemaVersion() || newer.Path != path {
				t.Errorf("NewerSchemaError = %+v, want Found %d Support %d Path %s", *newer, future, state.SchemaVersion(), path)
			}
			if !strings.Contains(err.Error(), "upgrade nlx") {
				t.Errorf("error %q does not tell the operator to upgrade nlx", err)
			}
			if after := snapshotFiles(t, path); after != before {
				t.Errorf("files after the refused Open:\n got %+v\nwant %+v", after, before)
			}
		})
	}
}

func TestOpenMustExistMissing(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "nlx")
	path := filepath.Join(dir, "state.db")
	db, err := state.Open(context.Background(), path, state.Options{MustExist: true})
	if err == nil {
		db.Close()
		t.Fatal("Open with MustExist of a missing state succeeded")
	}
	if !errors.Is(err, state.ErrNoState) {
		t.Errorf("Open: %v, want an error wrapping ErrNoState", err)
	}
	if !strings.Contains(err.Error(), path) {
		t.Errorf("error %q does not name %s", err, path)
	}
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("after the refused Open, stat %s: %v; want it not to exist", dir, err)
	}
}

func TestOpenConcurrentFirstUse(t *testing.T) {
	ctx := context.Background()
	path := statePath(t)
	const n = 8
	var (
		start    = make(chan struct{})
		wg       sync.WaitGroup
		lineages [n]string
		errs     [n]error
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			db, err := state.Open(ctx, path, state.Options{})
			if err != nil {
				errs[i] = err
				return
			}
			defer db.Close()
			lineages[i], _, errs[i] = db.Meta(ctx)
		}()
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("opener %d: %v", i, err)
		}
	}
	for i := range lineages {
		if lineages[i] != lineages[0] {
			t.Errorf("opener %d saw lineage %s, opener 0 saw %s; want one lineage", i, lineages[i], lineages[0])
		}
	}

	db := raw(t, path)
	if got := queryInt(t, db, `SELECT count(*) FROM lineage`); got != 1 {
		t.Errorf("%d lineage rows, want 1", got)
	}
	for v := 1; v <= state.SchemaVersion(); v++ {
		if got := queryInt(t, db, `SELECT count(*) FROM schema_migrations WHERE version = ?`, v); got != 1 {
			t.Errorf("migration %d recorded %d times, want once", v, got)
		}
	}
	if got, want := queryInt(t, db, `SELECT count(*) FROM schema_migrations`), int64(state.SchemaVersion()); got != want {
		t.Errorf("%d schema_migrations rows, want %d", got, want)
	}
}

// TestOpenPathSpellings opens states whose directory names hold characters
// that mean something in a URI: the state must be exactly the file named,
// and nothing else may appear beside its directory.
func TestOpenPathSpellings(t *testing.T) {
	ctx := context.Background()
	tests := []struct{ name, dir string }{
		{"plain", "plain"},
		{"space", "with space"},
		{"unicode", "ümlaut"},
		{"hash", "hash#1"},
		{"question mark", "query?x=1"},
		{"percent escape", "percent%20"},
		{"percent", "percent%"},
	}
	for _, tt := range tests {
		// The subtest's name goes into t.TempDir, so it holds none of the
		// characters under test: a wrongly parsed path then still stays
		// inside the test's directory.
		t.Run(tt.name, func(t *testing.T) {
			name := tt.dir
			parent := t.TempDir()
			path := filepath.Join(parent, name, "state.db")
			db := open(t, path, state.Options{})
			lineage, _, err := db.Meta(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(path); err != nil {
				t.Errorf("state file: %v", err)
			}
			entries, err := os.ReadDir(parent)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, e := range entries {
				got = append(got, e.Name())
			}
			if want := []string{name}; !reflect.DeepEqual(got, want) {
				t.Errorf("%s holds %q, want only %q", parent, got, want)
			}
			again, err := state.Open(ctx, path, state.Options{MustExist: true})
			if err != nil {
				t.Fatalf("reopen: %v", err)
			}
			defer again.Close()
			if got, _, err := again.Meta(ctx); err != nil || got != lineage {
				t.Errorf("reopened lineage %q (%v), want %q", got, err, lineage)
			}
		})
	}
}

func TestDefaultPath(t *testing.T) {
	home := t.TempDir()
	tests := []struct {
		name, nlxState, xdg string
		want                string
	}{
		{"NLX_STATE wins", "/srv/nlx/state.db", "/var/state", "/srv/nlx/state.db"},
		{"XDG_STATE_HOME", "", "/var/state", "/var/state/nlx/state.db"},
		{"home", "", "", filepath.Join(home, ".local", "state", "nlx", "state.db")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("HOME", home)
			t.Setenv("NLX_STATE", tt.nlxState)
			t.Setenv("XDG_STATE_HOME", tt.xdg)
			got, err := state.DefaultPath()
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("DefaultPath() = %q, want %q", got, tt.want)
			}
		})
	}
}
