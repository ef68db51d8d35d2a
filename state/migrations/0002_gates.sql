-- Safety gates: approvals bound to one plan, change and risk; resolutions of
-- outcomes nobody knew.

CREATE TABLE approvals (
	id          INTEGER PRIMARY KEY,
	plan_hash   TEXT    NOT NULL,
	address     TEXT    NOT NULL,
	risk        TEXT    NOT NULL,
	actor       TEXT    NOT NULL,
	reason      TEXT    NOT NULL,
	created_at  TEXT    NOT NULL,
	expires_at  TEXT    NOT NULL,
	consumed_at TEXT,
	consumed_by INTEGER REFERENCES applies (id)
);

CREATE INDEX approvals_by_plan ON approvals (plan_hash, address, risk);

CREATE TABLE resolutions (
	id         INTEGER PRIMARY KEY,
	journal_id INTEGER NOT NULL UNIQUE REFERENCES journal (id), -- the 'unknown' row
	address    TEXT    NOT NULL,
	outcome    TEXT    NOT NULL CHECK (outcome IN ('applied', 'not_applied')),
	actor      TEXT    NOT NULL,
	reason     TEXT    NOT NULL,
	at         TEXT    NOT NULL
);

-- Only the rare open outcomes are looked up by phase.
CREATE INDEX journal_open ON journal (phase) WHERE phase IN ('dispatched', 'unknown');
