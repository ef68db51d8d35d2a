package state

import (
	"context"
	"crypto/rand"
	"database/sql"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"

	"github.com/nlx-dev/nlx/internal/reason"
	_ "modernc.org/sqlite"
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

// NewerSchemaError refuses a state written by a newer nlx. The file is left
// exactly as it was.
type NewerSchemaError struct {
	Path           string
	Found, Support int
}

// As presents the error as state_too_new.
func (e *NewerSchemaError) As(target any) bool {
	return reason.Present(target, &reason.Error{Code: reason.StateTooNew, Msg: e.message(), Err: e})
}

func (e *NewerSchemaError) Error() string { return string(reason.StateTooNew) + ": " + e.message() }

func (e *NewerSchemaError) message() string {
	return fmt.Sprintf("state %s has schema version %d, newer than the %d this nlx supports; upgrade nlx (the file was not changed)", e.Path, e.Found, e.Support)
}

// migrate applies the migrations the file lacks, each recorded, all in one
// immediate transaction so concurrent first uses cannot both migrate; and
// sets the lineage once, when it creates the state.
func (db *DB) migrate(ctx context.Context, ms []Migration) error {
	return db.write(ctx, func(tx *sql.Tx) error {
		var tables int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'table'`).Scan(&tables); err != nil {
			return fmt.Errorf("read state tables: %w", err)
		}
		fresh := tables == 0
		if !fresh {
			// Checked again under the write lock: another first use may
			// have initialised the file since inspect, or something else
			// written it.
			var nlx int
			if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN ('schema_migrations', 'lineage')`).Scan(&nlx); err != nil {
				return fmt.Errorf("read state tables: %w", err)
			}
			if nlx != 2 {
				return reason.New(reason.NotAnNlxState, "%s is a SQLite database but not nlx's state; nothing was changed", db.path)
			}
		}
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
		if !fresh {
			if err := lineageExists(ctx, tx, db.path); err != nil {
				return err
			}
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
		if !fresh {
			return nil
		}
		lineage, err := newLineage()
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO lineage (id, lineage, serial, created_at) VALUES (1, ?, 0, ?)`, lineage, db.stamp())
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

// Migrations lists the migrations recorded in the file.
func (db *DB) Migrations(ctx context.Context) ([]Migration, error) {
	return collect(ctx, db.rdb, "migrations", `SELECT version, name, applied_at FROM schema_migrations ORDER BY version`, nil,
		func(rows *sql.Rows, m *Migration) error { return rows.Scan(&m.Version, &m.Name, &m.AppliedAt) })
}
