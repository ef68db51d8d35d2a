-- Occurrence claims of nlx serve and nlx run: one row per occurrence of a
-- job, unique by (job, scheduled instant), written before anything is
-- launched. The binding (actor, connection, credential owner, provider,
-- billing, generation, session) is copied in when the claim is dispatched,
-- in the same transaction that begins its turn; the claim's end is written
-- in the transaction that ends the turn. A dispatched claim whose process
-- is proven gone without an end becomes unknown: never retried, and it
-- holds its conversation's workflow lock until a person resolves it.

CREATE TABLE claims (
	id               TEXT PRIMARY KEY,
	job              TEXT    NOT NULL,
	scheduled_at     TEXT    NOT NULL, -- the occurrence's instant, UTC; a manual run's request time
	trigger          TEXT    NOT NULL CHECK (trigger IN ('schedule', 'manual')),
	workspace        TEXT    NOT NULL,
	conversation     TEXT    NOT NULL, -- the conversation key: the workflow lock
	connection       TEXT    NOT NULL, -- the connection asked for
	actor            TEXT    NOT NULL, -- who the turn runs for (a manual run's initiating actor)
	serial           INTEGER NOT NULL, -- the applied serial the claim was made at
	owner_pid        INTEGER NOT NULL, -- the nlx process that made it
	owner_start      TEXT    NOT NULL,
	owner_boot       TEXT    NOT NULL,
	phase            TEXT    NOT NULL CHECK (phase IN ('claimed', 'dispatched', 'succeeded', 'failed', 'interrupted', 'unknown', 'skipped')),
	turn_id          TEXT    NOT NULL DEFAULT '',
	effective_connection TEXT NOT NULL DEFAULT '',
	credential_owner TEXT    NOT NULL DEFAULT '',
	provider         TEXT    NOT NULL DEFAULT '',
	billing          TEXT    NOT NULL DEFAULT '',
	generation       INTEGER NOT NULL DEFAULT 0,
	session          TEXT    NOT NULL DEFAULT '', -- the native session continued, when one was
	reason_code      TEXT    NOT NULL DEFAULT '',
	reason           TEXT    NOT NULL DEFAULT '',
	claimed_at       TEXT    NOT NULL,
	dispatched_at    TEXT    NOT NULL DEFAULT '',
	ended_at         TEXT    NOT NULL DEFAULT '',
	resolved_outcome TEXT    NOT NULL DEFAULT '' CHECK (resolved_outcome IN ('', 'succeeded', 'failed', 'not-run')),
	resolved_by      TEXT    NOT NULL DEFAULT '',
	resolved_reason  TEXT    NOT NULL DEFAULT '',
	resolved_at      TEXT    NOT NULL DEFAULT '',
	UNIQUE (job, scheduled_at)
) WITHOUT ROWID;

CREATE INDEX claims_open ON claims (conversation) WHERE phase IN ('claimed', 'dispatched', 'unknown');
CREATE INDEX claims_turn ON claims (turn_id) WHERE turn_id != '';
CREATE INDEX claims_job ON claims (job, claimed_at);

-- Where each job's schedule is handled up to: every occurrence at or
-- before the cursor was run, skipped or passed over.
CREATE TABLE job_cursors (
	job        TEXT PRIMARY KEY,
	cursor     TEXT NOT NULL,
	updated_at TEXT NOT NULL
) WITHOUT ROWID;

-- The serve lock: one nlx serve per state. Separate from the apply lock
-- (locks): applies go on while serve runs.
CREATE TABLE serve_lock (
	id          INTEGER PRIMARY KEY CHECK (id = 1),
	lock_id     TEXT    NOT NULL,
	pid         INTEGER NOT NULL,
	pid_start   TEXT    NOT NULL,
	pid_ns      TEXT    NOT NULL,
	boot_id     TEXT    NOT NULL,
	host        TEXT    NOT NULL,
	user        TEXT    NOT NULL,
	acquired_at TEXT    NOT NULL
);
