package state

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"modernc.org/sqlite"
)

// Foreign SQLite databases: another program's store (OpenClaw's
// state/openclaw.sqlite) that nlx preserve reads. SQLite is spoken here
// alone, so this file offers what an importer needs and nothing of nlx's
// own schema: a consistent copy by SQLite's online-backup API (never a
// read of the live file), its tables, their rows as values, and the
// redaction of secret columns in the copy.

// ForeignCopy copies the database at src into a new file dst with SQLite's
// online-backup API, never writing beside src: SQLite opening a WAL
// database in place would create its -wal and -shm there, even read-only.
// Without a -wal beside it, src is complete in itself and is opened
// immutable (no lock, no file created). With one (its writer stopped
// without a checkpoint), src and its -wal are first copied byte for byte
// into a scratch directory beside dst, and the backup reads that copy,
// which SQLite recovers as its writer left it. A writer still running is
// what nlx preserve's gate refuses.
func ForeignCopy(ctx context.Context, src, dst string) error {
	abs, err := filepath.Abs(src)
	if err != nil {
		return fmt.Errorf("foreign database %s: %w", src, err)
	}
	from := "file:" + (&url.URL{Path: abs}).EscapedPath() + "?mode=ro&immutable=1"
	if _, err := os.Stat(abs + "-wal"); err == nil {
		scratch, err := os.MkdirTemp(filepath.Dir(dst), ".wal-copy-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(scratch)
		cp := filepath.Join(scratch, filepath.Base(abs))
		for _, suffix := range []string{"", "-wal"} {
			if err := copyBytes(abs+suffix, cp+suffix); err != nil {
				return fmt.Errorf("copy %s%s: %w", src, suffix, err)
			}
		}
		from = "file:" + (&url.URL{Path: cp}).EscapedPath()
	}
	if err := foreignBackup(ctx, from, dst); err != nil {
		os.Remove(dst)
		return fmt.Errorf("copy %s by the online-backup API: %w", src, err)
	}
	return nil
}

func copyBytes(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

func foreignBackup(ctx context.Context, srcDSN, dst string) error {
	db, err := sql.Open(driverName, srcDSN)
	if err != nil {
		return err
	}
	defer db.Close()
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	dstAbs, err := filepath.Abs(dst)
	if err != nil {
		return err
	}
	return conn.Raw(func(dc any) error {
		b, ok := dc.(interface {
			NewBackup(string) (*sqlite.Backup, error)
		})
		if !ok {
			return errors.New("the SQLite driver offers no online backup")
		}
		bk, err := b.NewBackup(dstAbs)
		if err != nil {
			return err
		}
		for {
			more, err := bk.Step(1024)
			if err != nil {
				bk.Finish()
				return err
			}
			if !more {
				break
			}
			if err := ctx.Err(); err != nil {
				bk.Finish()
				return err
			}
		}
		return bk.Finish()
	})
}

// Foreign is a foreign database opened read-only (a copy ForeignCopy made).
type Foreign struct {
	db *sql.DB
}

// OpenForeign opens the database file at path read-only.
func OpenForeign(ctx context.Context, path string) (*Foreign, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	db, err := sql.Open(driverName, "file:"+(&url.URL{Path: abs}).EscapedPath()+"?mode=ro&immutable=1")
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	return &Foreign{db: db}, nil
}

// Close closes it.
func (f *Foreign) Close() error { return f.db.Close() }

// UserVersion is the database's PRAGMA user_version.
func (f *Foreign) UserVersion(ctx context.Context) (int64, error) {
	var v int64
	err := f.db.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&v)
	return v, err
}

// Table is one table of a foreign database: its name, the SQL that made
// it, its columns in order and its primary key columns.
type Table struct {
	Name    string
	SQL     string
	Columns []string
	Key     []string
}

// Tables lists the database's tables (not SQLite's own), by name.
func (f *Foreign) Tables(ctx context.Context) ([]Table, error) {
	rows, err := f.db.QueryContext(ctx, `SELECT name, coalesce(sql, '') FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("list tables: %w", err)
	}
	var out []Table
	for rows.Next() {
		var t Table
		if err := rows.Scan(&t.Name, &t.SQL); err != nil {
			rows.Close()
			return nil, err
		}
		out = append(out, t)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	for i := range out {
		cols, err := f.db.QueryContext(ctx, `SELECT name, pk FROM pragma_table_info(?) ORDER BY cid`, out[i].Name)
		if err != nil {
			return nil, fmt.Errorf("columns of %s: %w", out[i].Name, err)
		}
		type keyCol struct {
			name string
			pk   int
		}
		var keys []keyCol
		for cols.Next() {
			var name string
			var pk int
			if err := cols.Scan(&name, &pk); err != nil {
				cols.Close()
				return nil, err
			}
			out[i].Columns = append(out[i].Columns, name)
			if pk > 0 {
				keys = append(keys, keyCol{name, pk})
			}
		}
		cols.Close()
		slices.SortFunc(keys, func(a, b keyCol) int { return a.pk - b.pk })
		for _, k := range keys {
			out[i].Key = append(out[i].Key, k.name)
		}
	}
	return out, nil
}

func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// Rows calls fn with each row of t, in primary-key order (rowid order for
// a table without one), its values by column: int64, float64, string,
// []byte or nil.
func (f *Foreign) Rows(ctx context.Context, t Table, fn func(values []any) error) error {
	cols := make([]string, len(t.Columns))
	for i, c := range t.Columns {
		cols[i] = quoteIdent(c)
	}
	order := "rowid"
	if len(t.Key) > 0 {
		keys := make([]string, len(t.Key))
		for i, k := range t.Key {
			keys[i] = quoteIdent(k)
		}
		order = strings.Join(keys, ", ")
	}
	rows, err := f.db.QueryContext(ctx, "SELECT "+strings.Join(cols, ", ")+" FROM "+quoteIdent(t.Name)+" ORDER BY "+order)
	if err != nil {
		return fmt.Errorf("read %s: %w", t.Name, err)
	}
	defer rows.Close()
	vals := make([]any, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	for rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			return fmt.Errorf("read %s: %w", t.Name, err)
		}
		if err := fn(vals); err != nil {
			return err
		}
	}
	return rows.Err()
}

// ForeignRedact replaces, in the database file at path (a copy nlx owns),
// every non-null value of the named columns of table with marker(row key):
// the copy keeps its shape and loses the secrets.
func ForeignRedact(ctx context.Context, path, table string, columns []string, marker func(rowid int64, column string) string) error {
	abs, err := filepath.Abs(path)
	if err != nil {
		return err
	}
	db, err := sql.Open(driverName, "file:"+(&url.URL{Path: abs}).EscapedPath())
	if err != nil {
		return err
	}
	defer db.Close()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	rows, err := tx.QueryContext(ctx, "SELECT rowid FROM "+quoteIdent(table))
	if err != nil {
		return fmt.Errorf("redact %s: %w", table, err)
	}
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return err
		}
		ids = append(ids, id)
	}
	rows.Close()
	for _, id := range ids {
		for _, c := range columns {
			q := "UPDATE " + quoteIdent(table) + " SET " + quoteIdent(c) + " = ? WHERE rowid = ? AND " + quoteIdent(c) + " IS NOT NULL"
			if _, err := tx.ExecContext(ctx, q, marker(id, c), id); err != nil {
				return fmt.Errorf("redact %s.%s row %s: %w", table, c, strconv.FormatInt(id, 10), err)
			}
		}
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	// The copy is read as a file again: no WAL beside it.
	_, err = db.ExecContext(ctx, `PRAGMA journal_mode=DELETE`)
	return err
}

// driverName is modernc.org/sqlite's database/sql driver.
const driverName = "sqlite"
