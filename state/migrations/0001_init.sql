-- The state of one host: lineage and serial, applied resources, the journal
-- of every apply, and the writer lock.

CREATE TABLE lineage (
	id         INTEGER PRIMARY KEY CHECK (id = 1),
	lineage    TEXT    NOT NULL,
	serial     INTEGER NOT NULL CHECK (serial >= 0),
	created_at TEXT    NOT NULL
);

CREATE TABLE resources (
	address    TEXT    PRIMARY KEY,
	kind       TEXT    NOT NULL,
	name       TEXT    NOT NULL,
	spec       TEXT    NOT NULL,
	spec_hash  TEXT    NOT NULL,
	status     TEXT    NOT NULL CHECK (status IN ('active', 'held')),
	serial     INTEGER NOT NULL, -- the serial of the apply that last wrote it
	updated_at TEXT    NOT NULL
) WITHOUT ROWID;

CREATE TABLE applies (
	id            INTEGER PRIMARY KEY,
	plan_hash     TEXT    NOT NULL,
	lock_id       TEXT    NOT NULL, -- the lock the apply runs under
	actor         TEXT    NOT NULL,
	serial_before INTEGER NOT NULL,
	serial_after  INTEGER NOT NULL,
	started_at    TEXT    NOT NULL,
	finished_at   TEXT,
	status        TEXT    NOT NULL CHECK (status IN ('running', 'completed', 'failed')),
	committed     INTEGER NOT NULL DEFAULT 0,
	failed        INTEGER NOT NULL DEFAULT 0,
	error         TEXT
);

CREATE TABLE journal (
	id       INTEGER PRIMARY KEY,
	apply_id INTEGER NOT NULL REFERENCES applies (id),
	address  TEXT    NOT NULL,
	action   TEXT    NOT NULL,
	phase    TEXT    NOT NULL CHECK (phase IN ('intended', 'dispatched', 'committed', 'failed', 'unknown')),
	at       TEXT    NOT NULL,
	detail   TEXT
);

CREATE INDEX journal_by_address ON journal (address, id);
CREATE INDEX journal_by_apply ON journal (apply_id, id);

CREATE TABLE locks (
	id          INTEGER PRIMARY KEY CHECK (id = 1),
	lock_id     TEXT    NOT NULL,
	operation   TEXT    NOT NULL,
	pid         INTEGER NOT NULL,
	pid_start   TEXT    NOT NULL,
	pid_ns      TEXT    NOT NULL, -- a pid means nothing outside its namespace
	boot_id     TEXT    NOT NULL,
	host        TEXT    NOT NULL,
	user        TEXT    NOT NULL,
	acquired_at TEXT    NOT NULL
);
