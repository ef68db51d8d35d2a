// Package state is nlx's SQLite state: lineage and serial, applied resources,
// the journal of every apply and the single-writer lock. It is the only
// package that speaks SQL; the rest of nlx sees reconcile.Store.
package state

import (
	"context"
	"crypto/rand"
	"database/sql"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	_ "modernc.org/sqlite" // pure Go: the binary cross-compiles with CGO_ENABLED=0
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// Migration is one numbered schema step.
type Migration struct {
	Version   int
	Name      string
	SQL       string
	AppliedAt string // empty until applied
}

// migrations lists the embedded migrations in order; file names are
// NNNN_name.sql.
func migrations() ([]Migration, error) {
	entries, err := fs.ReadDir(migrationFS, "migrations")
	if err != nil {
		return nil, err
	}
	var ms []Migration
	for _, e := range entries {
		base := strings.TrimSuffix(e.Name(), ".sql")
		num, name, ok := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil {
			return nil, fmt.Errorf("migration file %s: want NNNN_name.sql", e.Name())
		}
		data, err := migrationFS.ReadFile("migrations/" + e.Name())
		if err != nil {
			return nil, err
		}
		ms = append(ms, Migration{Version: v, Name: name, SQL: string(data)})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].Version < ms[j].Version })
	for i, m := range ms {
		if m.Version != i+1 {
			return nil, fmt.Errorf("migration %d: versions must be 1, 2, 3, ... without gaps", m.Version)
		}
	}
	return ms, nil
}

// SchemaVersion is the newest state schema this nlx knows.
func SchemaVersion() int {
	ms, err := migrations()
	if err != nil {
		return 0
	}
	return len(ms)
}

// ErrNoState means the state file does not exist and was not to be created.
var ErrNoState = errors.New("no state")

// NewerSchemaError refuses a state written by a newer nlx. The file is left
// exactly as it was.
type NewerSchemaError struct {
	Path           string
	Found, Support int
}

func (e *NewerSchemaError) Error() string {
	return fmt.Sprintf("state %s has schema version %d, newer than the %d this nlx supports; upgrade nlx (the file was not changed)", e.Path, e.Found, e.Support)
}

// Options tune Open.
type Options struct {
	MustExist bool             // refuse with ErrNoState instead of creating the file
	Now       func() time.Time // clock; time.Now by default
}

// DB is an open state.
type DB struct {
	path string
	rdb  *sql.DB // deferred transactions: consistent snapshots for readers
	wdb  *sql.DB // BEGIN IMMEDIATE: one writer at a time, waiting its turn
	now  func() time.Time
}

// DefaultPath is where the state lives without --state: $NLX_STATE, else
// $XDG_STATE_HOME/nlx/state.db, else ~/.local/state/nlx/state.db.
func DefaultPath() (string, error) {
	if p := os.Getenv("NLX_STATE"); p != "" {
		return p, nil
	}
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "nlx", "state.db"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("find state: set --state or NLX_STATE: %w", err)
	}
	return filepath.Join(home, ".local", "state", "nlx", "state.db"), nil
}

// fileURI turns a path into the URI SQLite opens: escaped, so that a path
// holding '?', '#' or '%' names that path and nothing else.
func fileURI(path string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", fmt.Errorf("state path %s: %w", path, err)
	}
	return "file:" + (&url.URL{Path: abs}).EscapedPath(), nil
}

func dsn(uri string, extra string) string {
	// busy_timeout lets concurrent nlx processes queue for SQLite's write
	// lock instead of failing; the state lock (locks table) is what keeps
	// two applies apart.
	return uri + "?_pragma=busy_timeout(15000)&_pragma=foreign_keys(1)&_pragma=synchronous(NORMAL)" + extra
}

// Open opens the state at path, creating it (and its directory) on first
// use, and brings its schema up to date. A state from a newer nlx is refused
// before anything is written to it.
func Open(ctx context.Context, path string, opts Options) (*DB, error) {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	ms, err := migrations()
	if err != nil {
		return nil, fmt.Errorf("state migrations: %w", err)
	}
	uri, err := fileURI(path)
	if err != nil {
		return nil, err
	}
	_, statErr := os.Stat(path)
	switch {
	case errors.Is(statErr, os.ErrNotExist) && opts.MustExist:
		return nil, fmt.Errorf("%w at %s", ErrNoState, path)
	case errors.Is(statErr, os.ErrNotExist):
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return nil, fmt.Errorf("create state directory: %w", err)
		}
	case statErr != nil:
		return nil, fmt.Errorf("state %s: %w", path, statErr)
	default:
		if err := checkVersion(ctx, path, uri, len(ms)); err != nil {
			return nil, err
		}
	}
	wdb, err := sql.Open("sqlite", dsn(uri, "&_txlock=immediate"))
	if err != nil {
		return nil, fmt.Errorf("open state %s: %w", path, err)
	}
	wdb.SetMaxOpenConns(1)
	if err := walMode(ctx, wdb); err != nil {
		wdb.Close()
		return nil, fmt.Errorf("state %s: %w", path, err)
	}
	rdb, err := sql.Open("sqlite", dsn(uri, ""))
	if err != nil {
		wdb.Close()
		return nil, fmt.Errorf("open state %s: %w", path, err)
	}
	db := &DB{path: path, rdb: rdb, wdb: wdb, now: opts.Now}
	if err := db.migrate(ctx, ms); err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

// walMode switches the file to write-ahead logging (which persists in the
// file). SQLite does not wait on a busy file for this switch, so concurrent
// first uses retry it.
func walMode(ctx context.Context, db *sql.DB) error {
	var err error
	for attempt := 0; attempt < 200; attempt++ {
		var mode string
		if err = db.QueryRowContext(ctx, `PRAGMA journal_mode = WAL`).Scan(&mode); err == nil {
			if mode != "wal" {
				return fmt.Errorf("journal mode is %s, want wal", mode)
			}
			return nil
		}
		if !strings.Contains(err.Error(), "SQLITE_BUSY") && !strings.Contains(err.Error(), "database is locked") {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(attempt+1) * time.Millisecond):
		}
	}
	return fmt.Errorf("set WAL mode: %w", err)
}

// checkVersion reads the schema version of an existing file through a
// read-only connection, so that a newer state is never touched. Without a
// -wal file beside it the file is opened immutable: a read-only connection
// to a WAL database would otherwise create -wal and -shm files it cannot
// remove.
func checkVersion(ctx context.Context, path, uri string, support int) error {
	params := "?mode=ro&_pragma=busy_timeout(15000)"
	if _, err := os.Stat(path + "-wal"); errors.Is(err, os.ErrNotExist) {
		params += "&immutable=1"
	}
	ro, err := sql.Open("sqlite", uri+params)
	if err != nil {
		return fmt.Errorf("open state %s: %w", path, err)
	}
	defer ro.Close()
	var n int
	err = ro.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'`).Scan(&n)
	if err != nil {
		return fmt.Errorf("read state %s: %w", path, err)
	}
	if n == 0 {
		return nil
	}
	var v sql.NullInt64
	if err := ro.QueryRowContext(ctx, `SELECT max(version) FROM schema_migrations`).Scan(&v); err != nil {
		return fmt.Errorf("read state %s: %w", path, err)
	}
	if int(v.Int64) > support {
		return &NewerSchemaError{Path: path, Found: int(v.Int64), Support: support}
	}
	return nil
}

// migrate applies the migrations the file lacks, each recorded, all in one
// immediate transaction so concurrent first uses cannot both migrate; and
// sets the lineage once.
func (db *DB) migrate(ctx context.Context, ms []Migration) error {
	return db.write(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
			version    INTEGER PRIMARY KEY,
			name       TEXT NOT NULL,
			applied_at TEXT NOT NULL)`); err != nil {
			return fmt.Errorf("create schema_migrations: %w", err)
		}
		var cur sql.NullInt64
		if err := tx.QueryRowContext(ctx, `SELECT max(version) FROM schema_migrations`).Scan(&cur); err != nil {
			return fmt.Errorf("read schema version: %w", err)
		}
		if int(cur.Int64) > len(ms) {
			return &NewerSchemaError{Path: db.path, Found: int(cur.Int64), Support: len(ms)}
		}
		for _, m := range ms[cur.Int64:] {
			if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
				return fmt.Errorf("state migration %04d_%s: %w", m.Version, m.Name, err)
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)`,
				m.Version, m.Name, db.stamp()); err != nil {
				return fmt.Errorf("record migration %d: %w", m.Version, err)
			}
		}
		lineage, err := newLineage()
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `INSERT OR IGNORE INTO lineage (id, lineage, serial, created_at) VALUES (1, ?, 0, ?)`, lineage, db.stamp())
		if err != nil {
			return fmt.Errorf("set lineage: %w", err)
		}
		return nil
	})
}

// newLineage returns a random UUID (version 4) naming a new state.
func newLineage() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("lineage: %w", err)
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:], nil
}

// Close closes the state.
func (db *DB) Close() error {
	return errors.Join(db.wdb.Close(), db.rdb.Close())
}

// Path is the state file.
func (db *DB) Path() string { return db.path }

func (db *DB) stamp() string { return db.now().UTC().Format(time.RFC3339Nano) }

// write runs fn in an immediate transaction.
func (db *DB) write(ctx context.Context, fn func(*sql.Tx) error) error {
	tx, err := db.wdb.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("state %s: begin: %w", db.path, err)
	}
	if err := fn(tx); err != nil {
		return errors.Join(err, ignoreDone(tx.Rollback()))
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("state %s: commit: %w", db.path, err)
	}
	return nil
}

// read runs fn in a read transaction: one consistent snapshot.
func (db *DB) read(ctx context.Context, fn func(*sql.Tx) error) error {
	tx, err := db.rdb.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return fmt.Errorf("state %s: begin: %w", db.path, err)
	}
	defer tx.Rollback()
	return fn(tx)
}

func ignoreDone(err error) error {
	if errors.Is(err, sql.ErrTxDone) {
		return nil
	}
	return err
}

// Migrations lists the migrations recorded in the file.
func (db *DB) Migrations(ctx context.Context) ([]Migration, error) {
	rows, err := db.rdb.QueryContext(ctx, `SELECT version, name, applied_at FROM schema_migrations ORDER BY version`)
	if err != nil {
		return nil, fmt.Errorf("read migrations: %w", err)
	}
	defer rows.Close()
	var ms []Migration
	for rows.Next() {
		var m Migration
		if err := rows.Scan(&m.Version, &m.Name, &m.AppliedAt); err != nil {
			return nil, err
		}
		ms = append(ms, m)
	}
	return ms, rows.Err()
}
