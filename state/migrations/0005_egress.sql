-- Every connection a launch with egress inference made through its proxy,
-- allowed or refused, by launch: a turn lists those of its launches.

CREATE TABLE egress_connections (
	launch_id  TEXT    NOT NULL,
	seq        INTEGER NOT NULL,
	host       TEXT    NOT NULL,
	port       INTEGER NOT NULL,
	method     TEXT    NOT NULL,
	decision   TEXT    NOT NULL CHECK (decision IN ('allowed', 'refused')),
	reason     TEXT    NOT NULL DEFAULT '',
	addr       TEXT    NOT NULL DEFAULT '',
	bytes_up   INTEGER NOT NULL DEFAULT 0,
	bytes_down INTEGER NOT NULL DEFAULT 0,
	started_at TEXT    NOT NULL,
	ended_at   TEXT    NOT NULL,
	PRIMARY KEY (launch_id, seq)
) WITHOUT ROWID;
