// Package state is nlx's SQLite state: lineage and serial, applied resources,
// the journal of every apply and the single-writer lock. It is the only
// package that speaks SQL; the rest of nlx sees reconcile.Store.
package state

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nlx-dev/nlx/internal/reason"
	"golang.org/x/sys/unix"
	_ "modernc.org/sqlite"
)

// ErrNoState means the state file does not exist and was not to be created.
var ErrNoState = &reason.Error{Code: reason.NoState, Msg: "no state"}

// Reason codes of states nlx will not open. The file is left exactly as it
// was.
const (
// reason.NotAnNlxState: the file is a database (or not even that) without
// nlx's tables; nlx never adds them to someone else's database.
// reason.StateDamaged: an nlx state missing what every state has (its
// lineage row); it is never reinitialised, which would restart the
// serial and forget what the plans made against it were bound to.
// reason.StateOutdated: a reading command found a state from an older
// nlx; reading commands never migrate, `nlx state upgrade` does.
)

// Options tune Open.
type Options struct {
	MustExist bool // refuse with ErrNoState instead of creating the file
	// ReadOnly opens the state for reading only: nothing is created,
	// migrated or repaired, and no write is ever attempted, so a reading
	// command works on a read-only file or directory. MustExist is implied.
	ReadOnly bool
	Now      func() time.Time // clock; time.Now by default
}

// DB is an open state.
type DB struct {
	path     string
	rdb      *sql.DB // deferred transactions: consistent snapshots for readers
	wdb      *sql.DB // BEGIN IMMEDIATE: one writer at a time, waiting its turn; nil when read-only
	now      func() time.Time
	readOnly bool
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
// use, and brings its schema up to date. A state from a newer nlx, a
// database that is not an nlx state and a damaged state are refused before
// anything is written to them. With Options.ReadOnly nothing is ever
// written.
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
	fi, statErr := os.Stat(path)
	switch {
	case errors.Is(statErr, os.ErrNotExist) && (opts.MustExist || opts.ReadOnly):
		return nil, fmt.Errorf("%w at %s", ErrNoState, path)
	case errors.Is(statErr, os.ErrNotExist):
		// The directory is searchable (the provider's user reaches the
		// workspaces, credential homes and skills beside the state
		// through it), not listable; the state file is root's alone.
		// SQLite gives its -wal and -shm files the database's mode.
		if err := os.MkdirAll(filepath.Dir(path), 0o711); err != nil {
			return nil, fmt.Errorf("create state directory: %w", err)
		}
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err == nil {
			err = f.Close()
		} else if errors.Is(err, fs.ErrExist) {
			err = nil // another first use made it
		}
		if err != nil {
			return nil, fmt.Errorf("create state %s: %w", path, err)
		}
	case statErr != nil:
		return nil, fmt.Errorf("state %s: %w", path, statErr)
	case !fi.Mode().IsRegular():
		return nil, reason.New(reason.NotAnNlxState, "state %s is not a regular file", path)
	default:
		found, err := inspect(ctx, path, inspectDSN(path, uri), len(ms))
		if err != nil {
			return nil, err
		}
		if opts.ReadOnly {
			if found.fresh {
				return nil, reason.New(reason.NotAnNlxState, "%s is an empty database, not an nlx state; nothing was changed", path)
			}
			if found.version < len(ms) {
				return nil, reason.New(reason.StateOutdated, "state %s has schema version %d, older than this nlx's %d; reading commands never migrate it: run `nlx state upgrade` (or any apply)", path, found.version, len(ms))
			}
			rdb, err := sql.Open("sqlite", readOnlyDSN(path, uri))
			if err != nil {
				return nil, fmt.Errorf("open state %s: %w", path, err)
			}
			return &DB{path: path, rdb: rdb, now: opts.Now, readOnly: true}, nil
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

// inspectDSN opens the file read-only to see what it is before anything is
// written. Without a -wal file beside it (nobody is writing it now) it is
// opened immutable: a read-only connection to a WAL database creates -wal
// and -shm files where it can, and cannot remove them.
func inspectDSN(path, uri string) string {
	params := "?mode=ro&_pragma=busy_timeout(15000)"
	if _, err := os.Stat(path + "-wal"); errors.Is(err, os.ErrNotExist) {
		params += "&immutable=1"
	}
	return uri + params
}

// readOnlyDSN is how a reading command opens the state. Where this process
// may write the directory, the connection is an ordinary one limited to
// queries (query_only): it coordinates with a concurrent writer through the
// -wal and -shm files as every connection does, and the last one to close
// removes them, so the files end as they were. Where it may not (a state
// directory this user cannot write), the file is opened read-only, and
// immutable when no -wal file shows a writer at work.
func readOnlyDSN(path, uri string) string {
	if unix.Access(filepath.Dir(path), unix.W_OK) == nil && unix.Access(path, unix.W_OK) == nil {
		return uri + "?mode=rw&_pragma=query_only(1)&_pragma=busy_timeout(15000)&_pragma=foreign_keys(1)"
	}
	return inspectDSN(path, uri)
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

// found is what inspect learnt of an existing file.
type found struct {
	fresh   bool // an empty database: no tables at all
	version int  // the newest migration recorded
}

// inspect reads what an existing file is through a read-only connection, so
// that a newer state, a foreign database or a damaged state is never
// touched: an empty database is fresh (a first use may initialise it); one
// with nlx's tables and its lineage row is a state; anything else is
// refused.
func inspect(ctx context.Context, path, roDSN string, support int) (found, error) {
	ro, err := sql.Open("sqlite", roDSN)
	if err != nil {
		return found{}, fmt.Errorf("open state %s: %w", path, err)
	}
	defer ro.Close()
	rows, err := ro.QueryContext(ctx, `SELECT name FROM sqlite_master WHERE type = 'table'`)
	if err != nil {
		if strings.Contains(err.Error(), "file is not a database") || strings.Contains(err.Error(), "SQLITE_NOTADB") {
			return found{}, reason.New(reason.NotAnNlxState, "%s is not an nlx state (not a SQLite database); nothing was changed", path)
		}
		return found{}, fmt.Errorf("read state %s: %w", path, err)
	}
	tables := map[string]bool{}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			rows.Close()
			return found{}, fmt.Errorf("read state %s: %w", path, err)
		}
		tables[name] = true
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return found{}, fmt.Errorf("read state %s: %w", path, err)
	}
	if len(tables) == 0 {
		return found{fresh: true}, nil
	}
	if !tables["schema_migrations"] || !tables["lineage"] {
		return found{}, reason.New(reason.NotAnNlxState, "%s is a SQLite database with %d table(s) but not nlx's (no schema_migrations or lineage table); nlx never adds its tables to another database, and nothing was changed", path, len(tables))
	}
	var v sql.NullInt64
	if err := ro.QueryRowContext(ctx, `SELECT max(version) FROM schema_migrations`).Scan(&v); err != nil {
		return found{}, fmt.Errorf("read state %s: %w", path, err)
	}
	if int(v.Int64) > support {
		return found{}, &NewerSchemaError{Path: path, Found: int(v.Int64), Support: support}
	}
	if err := lineageExists(ctx, ro, path); err != nil {
		return found{}, err
	}
	return found{version: int(v.Int64)}, nil
}

// lineageExists refuses a state without its lineage row.
func lineageExists(ctx context.Context, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}, path string) error {
	var n int
	if err := q.QueryRowContext(ctx, `SELECT count(*) FROM lineage WHERE id = 1`).Scan(&n); err != nil {
		return fmt.Errorf("read state %s: %w", path, err)
	}
	if n != 1 {
		return reason.New(reason.StateDamaged, "state %s has no lineage row: it is damaged, and nlx will not reinitialise it (that would restart its serial); restore it from a backup, and nothing was changed", path)
	}
	return nil
}

// Close closes the state.
func (db *DB) Close() error {
	if db.wdb == nil {
		return db.rdb.Close()
	}
	return errors.Join(db.wdb.Close(), db.rdb.Close())
}

// ErrReadOnly means a write was attempted on a state opened read-only: a
// defect in the command, never something a user can cause.
var ErrReadOnly = &reason.Error{Code: reason.StateReadOnly, Msg: "state opened read-only"}

// Path is the state file.
func (db *DB) Path() string { return db.path }

func (db *DB) stamp() string { return db.now().UTC().Format(time.RFC3339Nano) }

// write runs fn in an immediate transaction.
func (db *DB) write(ctx context.Context, fn func(*sql.Tx) error) error {
	if db.wdb == nil {
		return fmt.Errorf("state %s: %w", db.path, ErrReadOnly)
	}
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

// queryer is a *sql.DB or a *sql.Tx.
type queryer interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// collect runs query and scans each row into a T with scan; what names the
// rows in errors.
func collect[T any](ctx context.Context, q queryer, what, query string, args []any, scan func(*sql.Rows, *T) error) ([]T, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", what, err)
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		var v T
		if err := scan(rows, &v); err != nil {
			return nil, fmt.Errorf("read %s: %w", what, err)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", what, err)
	}
	return out, nil
}
