package state

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
)

// EgressRow is one connection of a launch through its inference proxy.
type EgressRow struct {
	LaunchID  string `json:"launch_id"`
	Seq       int64  `json:"seq"`
	Host      string `json:"host"`
	Port      int    `json:"port"`
	Method    string `json:"method"`
	Decision  string `json:"decision"` // egress.Allowed or egress.Refused
	Reason    string `json:"reason,omitempty"`
	Addr      string `json:"addr,omitempty"`
	BytesUp   int64  `json:"bytes_up"`
	BytesDown int64  `json:"bytes_down"`
	StartedAt string `json:"started_at"`
	EndedAt   string `json:"ended_at"`
}

// RecordEgress appends a connection to its launch's record.
func (db *DB) RecordEgress(ctx context.Context, e EgressRow) error {
	return db.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO egress_connections (launch_id, seq, host, port, method, decision, reason,
			addr, bytes_up, bytes_down, started_at, ended_at) VALUES (?, (SELECT coalesce(max(seq), 0) + 1 FROM egress_connections
			WHERE launch_id = ?), ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, e.LaunchID, e.LaunchID, e.Host, e.Port, e.Method, e.Decision,
			e.Reason, e.Addr, e.BytesUp, e.BytesDown, e.StartedAt, e.EndedAt)
		if err != nil {
			return fmt.Errorf("record a connection of launch %s: %w", e.LaunchID, err)
		}
		return nil
	})
}

// Egress lists the connections of the given launches, in order.
func (db *DB) Egress(ctx context.Context, launchIDs ...string) ([]EgressRow, error) {
	if len(launchIDs) == 0 {
		return nil, nil
	}
	args := make([]any, len(launchIDs))
	for i, id := range launchIDs {
		args[i] = id
	}
	return collect(ctx, db.rdb, "egress connections", `SELECT launch_id, seq, host, port, method, decision, reason, addr,
		bytes_up, bytes_down, started_at, ended_at FROM egress_connections WHERE launch_id IN (?`+strings.Repeat(", ?", len(launchIDs)-1)+`)
		ORDER BY started_at, launch_id, seq`, args,
		func(rows *sql.Rows, e *EgressRow) error {
			return rows.Scan(&e.LaunchID, &e.Seq, &e.Host, &e.Port, &e.Method, &e.Decision, &e.Reason, &e.Addr,
				&e.BytesUp, &e.BytesDown, &e.StartedAt, &e.EndedAt)
		})
}
