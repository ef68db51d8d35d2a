package openclawfix

import (
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	_ "modernc.org/sqlite"
)

// stateSchema is the part of OpenClaw's state/openclaw.sqlite (state
// schema 1) the fixture writes: the cron store, its run history, the
// migration record, and one table nlx does not know (task_runs).
const stateSchema = `
CREATE TABLE schema_meta (
  meta_key TEXT PRIMARY KEY,
  role TEXT NOT NULL,
  schema_version INTEGER NOT NULL,
  app_version TEXT
);
CREATE TABLE cron_jobs (
  store_key TEXT NOT NULL,
  job_id TEXT NOT NULL,
  sort_order INTEGER NOT NULL,
  name TEXT,
  enabled INTEGER NOT NULL,
  schedule_kind TEXT,
  schedule_expr TEXT,
  schedule_tz TEXT,
  every_ms INTEGER,
  at TEXT,
  payload_kind TEXT,
  payload_message TEXT,
  delivery_mode TEXT,
  next_run_at_ms INTEGER,
  running_at_ms INTEGER,
  last_run_status TEXT,
  job_json TEXT NOT NULL,
  state_json TEXT,
  schedule_identity TEXT,
  PRIMARY KEY (store_key, job_id)
);
CREATE INDEX cron_jobs_sort ON cron_jobs (store_key, sort_order);
CREATE TABLE cron_run_logs (
  store_key TEXT NOT NULL,
  job_id TEXT NOT NULL,
  seq INTEGER NOT NULL,
  ts INTEGER NOT NULL,
  status TEXT,
  entry_json TEXT NOT NULL,
  PRIMARY KEY (store_key, job_id, seq)
);
CREATE TABLE migration_runs (
  id INTEGER PRIMARY KEY,
  kind TEXT NOT NULL,
  started_at INTEGER NOT NULL,
  finished_at INTEGER,
  status TEXT NOT NULL
);
CREATE TABLE task_runs (
  id TEXT PRIMARY KEY,
  runtime TEXT NOT NULL,
  source_id TEXT,
  status TEXT NOT NULL,
  started_at INTEGER,
  ended_at INTEGER,
  summary TEXT
);
`

// agentSchema is a small agents/<id>/agent/openclaw-agent.sqlite (agent
// schema 4, era 4): sessions and transcripts moved into it.
const agentSchema = `
CREATE TABLE schema_meta (
  meta_key TEXT PRIMARY KEY,
  role TEXT NOT NULL,
  schema_version INTEGER NOT NULL,
  app_version TEXT
);
CREATE TABLE session_nodes (
  session_key TEXT PRIMARY KEY,
  current_session_id TEXT,
  entry_json TEXT
);
CREATE TABLE transcript_events (
  session_id TEXT NOT NULL,
  seq INTEGER NOT NULL,
  event_json TEXT NOT NULL,
  PRIMARY KEY (session_id, seq)
);
`

// Tables of state/openclaw.sqlite the classification knows; the rows of
// any other count one unknown record each.
const taskRunRows = 3

func (g *gen) writeStateDB() error {
	err := g.sqliteFile("state/openclaw.sqlite", 1, func(tx *sql.Tx) error {
		if _, err := tx.Exec(stateSchema); err != nil {
			return err
		}
		if _, err := tx.Exec(`INSERT INTO schema_meta VALUES ('primary', 'state', 1, ?)`, g.rel); err != nil {
			return err
		}
		key := g.storeKey()
		jobs, err := tx.Prepare(`INSERT INTO cron_jobs VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)`)
		if err != nil {
			return err
		}
		defer jobs.Close()
		runs, err := tx.Prepare(`INSERT INTO cron_run_logs VALUES (?,?,?,?,?,?)`)
		if err != nil {
			return err
		}
		defer runs.Close()
		for i, j := range g.jobs {
			def, err := compactJSON(j.definition())
			if err != nil {
				return err
			}
			st, err := compactJSON(j.state)
			if err != nil {
				return err
			}
			ident, err := j.scheduleIdentity()
			if err != nil {
				return err
			}
			s, p := j.def.Schedule, j.def.Payload
			msg := p.Message
			if p.Kind == PayloadSystemEvent {
				msg = p.Text
			}
			var mode any
			if j.def.Delivery != nil {
				mode = string(j.def.Delivery.Mode)
			}
			if _, err := jobs.Exec(key, j.id, i, j.def.Name, j.def.Enabled, string(s.Kind), nullStr(s.Expr), nullStr(s.TZ),
				nullInt(s.EveryMs), nullStr(s.At), string(p.Kind), msg, mode, nullInt(j.state.NextRunAtMs),
				nullInt(j.state.RunningAtMs), nullStr(string(j.state.LastRunStatus)), string(def), string(st), ident); err != nil {
				return fmt.Errorf("cron_jobs %s: %w", j.id, err)
			}
			for seq, e := range j.runs {
				line, err := compactJSON(e)
				if err != nil {
					return err
				}
				if _, err := runs.Exec(key, j.id, seq+1, e.Ts, string(e.Status), string(line)); err != nil {
					return fmt.Errorf("cron_run_logs %s: %w", j.id, err)
				}
				g.records[KindRuns]++
			}
		}
		g.records[KindJobs] += int64(len(g.jobs))
		at := g.migratedAt()
		if _, err := tx.Exec(`INSERT INTO migration_runs VALUES (1, 'legacy-cron-store', ?, ?, 'succeeded')`, at, at+842); err != nil {
			return err
		}
		// task_runs: the runs of the job with the most history, newest three.
		var src *job
		for _, j := range g.jobs {
			if j.def.Payload.Kind == PayloadAgentTurn && (src == nil || len(j.runs) > len(src.runs)) {
				src = j
			}
		}
		if len(src.runs) < taskRunRows {
			return errors.New("no job with three runs for task_runs")
		}
		for _, e := range src.runs[len(src.runs)-taskRunRows:] {
			id := "cron:" + src.id + ":" + strconv.FormatInt(e.RunAtMs, 10)
			if _, err := tx.Exec(`INSERT INTO task_runs VALUES (?, 'cron', ?, ?, ?, ?, ?)`, id, src.id, string(e.Status), e.RunAtMs, e.Ts, nullStr(e.Summary)); err != nil {
				return err
			}
			g.records[KindUnknown]++
		}
		return nil
	})
	if err != nil || g.era < 4 {
		return err
	}
	return g.sqliteFile("agents/main/agent/openclaw-agent.sqlite", 4, func(tx *sql.Tx) error {
		if _, err := tx.Exec(agentSchema); err != nil {
			return err
		}
		_, err := tx.Exec(`INSERT INTO schema_meta VALUES ('primary', 'agent', 4, ?)`, g.rel)
		return err
	})
}

// sqliteFile writes the SQLite database rel in one transaction, in WAL
// mode as OpenClaw keeps it, checkpointed and closed so that no -wal or
// -shm file remains.
func (g *gen) sqliteFile(rel string, userVersion int, fill func(*sql.Tx) error) (err error) {
	if err := g.mkdirs(filepath.ToSlash(filepath.Dir(rel))); err != nil {
		return err
	}
	p := filepath.Join(g.dir, filepath.FromSlash(rel))
	if _, err := os.Lstat(p); err == nil {
		return fmt.Errorf("%s exists", rel)
	}
	db, err := sql.Open("sqlite", p)
	if err != nil {
		return fmt.Errorf("%s: %w", rel, err)
	}
	db.SetMaxOpenConns(1)
	defer func() {
		if cerr := db.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("%s: close: %w", rel, cerr)
		}
		if err != nil {
			return
		}
		for _, side := range []string{"-wal", "-shm", "-journal"} {
			if _, serr := os.Lstat(p + side); serr == nil {
				err = fmt.Errorf("%s: %s left behind", rel, side)
				return
			}
		}
		err = g.done(rel, g.storeMtime())
	}()
	var mode string
	if err := db.QueryRow(`PRAGMA journal_mode=WAL`).Scan(&mode); err != nil {
		return fmt.Errorf("%s: journal_mode: %w", rel, err)
	}
	if _, err := db.Exec(`PRAGMA user_version=` + strconv.Itoa(userVersion)); err != nil {
		return fmt.Errorf("%s: user_version: %w", rel, err)
	}
	tx, err := db.Begin()
	if err != nil {
		return fmt.Errorf("%s: %w", rel, err)
	}
	if err := fill(tx); err != nil {
		tx.Rollback()
		return fmt.Errorf("%s: %w", rel, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("%s: commit: %w", rel, err)
	}
	if _, err := db.Exec(`PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
		return fmt.Errorf("%s: checkpoint: %w", rel, err)
	}
	return nil
}

func nullStr(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func nullInt(n int64) any {
	if n == 0 {
		return nil
	}
	return n
}
