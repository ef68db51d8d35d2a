package state

import (
	"os"
	"time"
)

// Stamp is what the state's files look like on disk: the database's and
// its write-ahead log's size and modification time. Every commit changes
// it (a commit appends to the log), so comparing stamps tells, for the
// price of two stat calls, whether anything may have changed since.
type Stamp [2]struct {
	size int64
	mod  time.Time
}

// Stamp reads the state's stamp now.
func (db *DB) Stamp() Stamp { return StampOf(db.path) }

// StampOf is the stamp of the state file at path.
func StampOf(path string) Stamp {
	var s Stamp
	for i, p := range []string{path, path + "-wal"} {
		if fi, err := os.Stat(p); err == nil {
			s[i].size, s[i].mod = fi.Size(), fi.ModTime()
		}
	}
	return s
}

// Watcher tells when the state's stamp changed.
type Watcher struct {
	path string
	last Stamp
}

// NewWatcher watches the state file at path from now.
func NewWatcher(path string) *Watcher {
	return &Watcher{path: path, last: StampOf(path)}
}

// Changed reports whether the stamp changed since the last call (or the
// watcher's start).
func (w *Watcher) Changed() bool {
	now := StampOf(w.path)
	changed := now != w.last
	w.last = now
	return changed
}
