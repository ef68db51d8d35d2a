-- Provider processes: an identity is recorded before a launch counts as
-- running; a stop receipt, written once the process tree is proven gone,
-- releases it. Rows stay as the record of what ran.

CREATE TABLE processes (
	launch_id  TEXT    PRIMARY KEY,
	workspace  TEXT    NOT NULL,
	pid        INTEGER NOT NULL,
	started_at TEXT    NOT NULL,
	identity   TEXT    NOT NULL, -- the launch identity, JSON
	status     TEXT    NOT NULL CHECK (status IN ('running', 'stopped')),
	receipt    TEXT,             -- the stop receipt, JSON, once stopped
	stopped_at TEXT
) WITHOUT ROWID;

CREATE INDEX processes_running ON processes (status) WHERE status = 'running';
