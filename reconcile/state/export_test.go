package state

import "database/sql"

// Conns exposes the writer and reader pools, so that tests can read the
// per-connection PRAGMAs each was opened with.
func Conns(db *DB) (writer, reader *sql.DB) { return db.wdb, db.rdb }
