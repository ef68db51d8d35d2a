package state

import "database/sql"

// Conns exposes the writer and reader pools, so that tests can read the
// per-connection PRAGMAs each was opened with.
func Conns(db *DB) (writer, reader *sql.DB) { return db.wdb, db.rdb }

// MigrateOnly brings a new file to schema version n and no further, with
// its lineage, as an nlx that knew only the first n migrations made it.
func MigrateOnly(path string, n int) error {
	ms, err := migrations()
	if err != nil {
		return err
	}
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		return err
	}
	defer db.Close()
	if _, err := db.Exec(`PRAGMA journal_mode = WAL`); err != nil {
		return err
	}
	if _, err := db.Exec(`CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)`); err != nil {
		return err
	}
	for _, m := range ms[:n] {
		if _, err := db.Exec(m.SQL); err != nil {
			return err
		}
		if _, err := db.Exec(`INSERT INTO schema_migrations VALUES (?, ?, '2026-01-01T00:00:00Z')`, m.Version, m.Name); err != nil {
			return err
		}
	}
	_, err = db.Exec(`INSERT INTO lineage (id, lineage, serial, created_at) VALUES (1, 'old-lineage', 3, '2026-01-01T00:00:00Z')`)
	return err
}
