-- Provider turns. A turn's binding (who, which connection, credential
-- owner, provider, billing, generation, policy, launch) is written before
-- the provider starts; its result once it ends. Conversations keep the
-- provider's native session handle (opaque: never a label) and nlx's own
-- summary of what was said, for a resume the provider refuses. Permission
-- requests are stored before nlx answers the provider anything.

CREATE TABLE conversations (
	workspace  TEXT NOT NULL,
	connection TEXT NOT NULL,
	name       TEXT NOT NULL,
	provider   TEXT NOT NULL,           -- the effective provider the handle belongs to
	handle     TEXT NOT NULL DEFAULT '', -- the native session handle, opaque
	summary    TEXT NOT NULL DEFAULT '', -- nlx's summary of the conversation so far
	updated_at TEXT NOT NULL,
	PRIMARY KEY (workspace, connection, name)
) WITHOUT ROWID;

CREATE TABLE turns (
	id                 TEXT PRIMARY KEY,
	workspace          TEXT NOT NULL,
	connection         TEXT NOT NULL,
	conversation       TEXT NOT NULL,
	actor              TEXT NOT NULL,
	credential_owner   TEXT NOT NULL,
	requested_provider TEXT NOT NULL,
	effective_provider TEXT NOT NULL,
	fallback_reason    TEXT NOT NULL DEFAULT '',
	billing            TEXT NOT NULL,
	generation         INTEGER NOT NULL,
	policy             TEXT NOT NULL,
	provider_version   TEXT NOT NULL DEFAULT '',
	launch_id          TEXT NOT NULL,
	session            TEXT NOT NULL DEFAULT '', -- the native handle, once known
	status             TEXT NOT NULL CHECK (status IN ('running', 'completed', 'interrupted', 'failed', 'blocked')),
	result             TEXT NOT NULL DEFAULT '',
	error_code         TEXT NOT NULL DEFAULT '',
	error_message      TEXT NOT NULL DEFAULT '',
	note               TEXT NOT NULL DEFAULT '',
	stale              TEXT NOT NULL DEFAULT '', -- what the provider finished after the turn was interrupted
	usage              TEXT NOT NULL DEFAULT '{}',
	started_at         TEXT NOT NULL,
	ended_at           TEXT NOT NULL DEFAULT ''
) WITHOUT ROWID;

CREATE INDEX turns_started ON turns (started_at);

CREATE TABLE permission_requests (
	id            TEXT PRIMARY KEY,
	turn_id       TEXT NOT NULL REFERENCES turns (id),
	kind          TEXT NOT NULL,
	tool          TEXT NOT NULL DEFAULT '',
	subject       TEXT NOT NULL, -- the command, or the paths one per line
	cwd           TEXT NOT NULL DEFAULT '',
	reason        TEXT NOT NULL DEFAULT '',
	decider       TEXT NOT NULL, -- actor:NAME (a personal workspace's turn) or admin:WORKSPACE
	status        TEXT NOT NULL CHECK (status IN ('pending', 'allowed', 'denied', 'timed_out', 'cancelled')),
	decided_by    TEXT NOT NULL DEFAULT '',
	decision_code TEXT NOT NULL DEFAULT '',
	decision_note TEXT NOT NULL DEFAULT '',
	created_at    TEXT NOT NULL,
	decided_at    TEXT NOT NULL DEFAULT ''
) WITHOUT ROWID;

CREATE INDEX permission_requests_pending ON permission_requests (status) WHERE status = 'pending';
CREATE INDEX permission_requests_turn ON permission_requests (turn_id);

-- The versions provider programs printed, probed in a sandbox, by the
-- program's resolved path; identity is the program file's (and its package
-- manifest's) device, inode, size and modification time: a changed
-- program is probed again.
CREATE TABLE provider_probes (
	program   TEXT PRIMARY KEY,
	identity  TEXT NOT NULL,
	version   TEXT NOT NULL,
	probed_at TEXT NOT NULL
) WITHOUT ROWID;
