-- Counts every transaction that writes applied resources (an apply's
-- commit, a resolution recorded as applied): a tool proxy tells in one
-- read whether what a workspace may use can have changed, where the
-- serial (bumped when an apply begins) cannot.
ALTER TABLE lineage ADD COLUMN resources_version INTEGER NOT NULL DEFAULT 0;

-- Tool calls through a launch's tool proxy (nlx's MCP server), one row
-- per call, written once it ended or was refused: the tool the provider
-- called, where it went, a digest of its arguments (never the arguments)
-- and how it ended; nlx_report's structured result is kept whole.

CREATE TABLE tool_calls (
	id          TEXT PRIMARY KEY,
	launch_id   TEXT NOT NULL,
	turn_id     TEXT NOT NULL DEFAULT '', -- '' between turns
	workspace   TEXT NOT NULL,
	tool        TEXT NOT NULL,            -- the name the provider called
	server      TEXT NOT NULL DEFAULT '', -- the config's tool it routes to; '' for nlx's own
	args_digest TEXT NOT NULL,
	outcome     TEXT NOT NULL CHECK (outcome IN ('succeeded', 'tool_error', 'refused', 'failed')),
	reason_code TEXT NOT NULL DEFAULT '',
	message     TEXT NOT NULL DEFAULT '',
	report      TEXT NOT NULL DEFAULT '', -- nlx_report's result (JSON)
	started_at  TEXT NOT NULL,
	ended_at    TEXT NOT NULL
) WITHOUT ROWID;

CREATE INDEX tool_calls_turn ON tool_calls (turn_id, started_at) WHERE turn_id != '';
CREATE INDEX tool_calls_launch ON tool_calls (launch_id, started_at);

-- Catalog refreshes of running workers: one row per attempt on one
-- worker (a launch), recorded before anything is sent to it. An attempt
-- whose write or reload was sent and never acknowledged is unknown: never
-- retried, and it blocks every further refresh of its worker until a
-- person resolves it. At most one attempt of a worker is waiting, in
-- flight or unknown and unresolved: a constraint, not a check in Go.

CREATE TABLE catalog_refreshes (
	id               TEXT PRIMARY KEY,
	launch_id        TEXT    NOT NULL,
	workspace        TEXT    NOT NULL,
	conversation     TEXT    NOT NULL,
	provider_kind    TEXT    NOT NULL,
	trigger          TEXT    NOT NULL CHECK (trigger IN ('apply', 'manual')),
	request_id       TEXT    NOT NULL DEFAULT '', -- the nlx refresh request it answers
	actor            TEXT    NOT NULL DEFAULT '', -- who asked, for a manual one
	serial           INTEGER NOT NULL,            -- the applied serial it carries
	catalog          TEXT    NOT NULL DEFAULT '', -- the projection's digest
	tools            TEXT    NOT NULL DEFAULT '', -- the projection's tools (JSON list)
	phase            TEXT    NOT NULL CHECK (phase IN ('deferred', 'dispatched', 'catalog_refreshed', 'conflict', 'unknown',
	                                                   'failed', 'refresh_unsupported', 'superseded', 'released')),
	read_version     TEXT    NOT NULL DEFAULT '',
	written_version  TEXT    NOT NULL DEFAULT '',
	next_turn_tools  TEXT    NOT NULL DEFAULT '', -- 'unverified' once refreshed, for good
	reason_code      TEXT    NOT NULL DEFAULT '',
	reason           TEXT    NOT NULL DEFAULT '',
	owner_pid        INTEGER NOT NULL,            -- the nlx process that made it (its serve)
	owner_start      TEXT    NOT NULL,
	owner_boot       TEXT    NOT NULL,
	created_at       TEXT    NOT NULL,
	dispatched_at    TEXT    NOT NULL DEFAULT '',
	ended_at         TEXT    NOT NULL DEFAULT '',
	resolved_outcome TEXT    NOT NULL DEFAULT '' CHECK (resolved_outcome IN ('', 'applied', 'not-applied')),
	resolved_by      TEXT    NOT NULL DEFAULT '',
	resolved_reason  TEXT    NOT NULL DEFAULT '',
	resolved_at      TEXT    NOT NULL DEFAULT ''
) WITHOUT ROWID;

CREATE UNIQUE INDEX catalog_refreshes_open ON catalog_refreshes (launch_id)
	WHERE phase IN ('deferred', 'dispatched') OR (phase = 'unknown' AND resolved_at = '');
CREATE INDEX catalog_refreshes_workspace ON catalog_refreshes (workspace, created_at);

-- nlx refresh WORKSPACE: a person's request, which the serve holding the
-- workspace's workers takes (their connections are its own) and answers
-- with one attempt per worker.

CREATE TABLE refresh_requests (
	id           TEXT PRIMARY KEY,
	workspace    TEXT    NOT NULL,
	actor        TEXT    NOT NULL,
	requested_at TEXT    NOT NULL,
	taken_at     TEXT    NOT NULL DEFAULT '',
	workers      INTEGER NOT NULL DEFAULT 0, -- how many running workers the serve found
	done_at      TEXT    NOT NULL DEFAULT ''
) WITHOUT ROWID;

CREATE INDEX refresh_requests_open ON refresh_requests (requested_at) WHERE done_at = '';
