-- Preservation imports (nlx preserve, then an apply of the preservation's
-- change): what each import brought in, written in the transaction that
-- creates its held jobs, so an import is wholly there or not at all.

CREATE TABLE imports (
	preservation TEXT    PRIMARY KEY,
	manifest     TEXT    NOT NULL, -- "sha256:..." of the export's manifest.json: the source revision
	era          INTEGER NOT NULL,
	source_path  TEXT    NOT NULL,
	export_dir   TEXT    NOT NULL,
	counts       TEXT    NOT NULL, -- JSON, per record kind
	apply_id     INTEGER NOT NULL,
	imported_at  TEXT    NOT NULL
) WITHOUT ROWID;

-- One row per imported job. unsupported (a JSON list of reasons, '[]'
-- when none) keeps the job held: no release can take it into service.
CREATE TABLE imported_jobs (
	job          TEXT    PRIMARY KEY,
	preservation TEXT    NOT NULL REFERENCES imports (preservation),
	source_id    TEXT    NOT NULL, -- OpenClaw's job id
	record       TEXT    NOT NULL, -- "sha256:..." of the job's canonical record
	unsupported  TEXT    NOT NULL DEFAULT '[]',
	completed_at TEXT    NOT NULL DEFAULT '', -- a one-time job's completed occurrence, UTC
	last_outcome TEXT    NOT NULL DEFAULT ''
) WITHOUT ROWID;

-- Conversations kept as evidence (chatReset "preserve" for their
-- workspace): the session key's conversation, its transcript in the
-- export. Never a replay queue.
CREATE TABLE imported_conversations (
	preservation TEXT    NOT NULL REFERENCES imports (preservation),
	session_key  TEXT    NOT NULL,
	workspace    TEXT    NOT NULL,
	conversation TEXT    NOT NULL,
	session_id   TEXT    NOT NULL,
	transcript   TEXT    NOT NULL, -- path in the export, '' when none
	entries      INTEGER NOT NULL,
	PRIMARY KEY (preservation, session_key)
) WITHOUT ROWID;

-- Releases of held imports into service: the definitions before and
-- after and the approval that allowed it, written with the change.
CREATE TABLE releases (
	id           INTEGER PRIMARY KEY,
	address      TEXT    NOT NULL,
	apply_id     INTEGER NOT NULL,
	approval_id  INTEGER NOT NULL,
	before_spec  TEXT    NOT NULL,
	after_spec   TEXT    NOT NULL,
	at           TEXT    NOT NULL
);
