package openclawfix

import (
	"bufio"
	"bytes"
	"database/sql"
	"encoding/json"
	"flag"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite testdata/small")

func smallOptions(era int) Options {
	return Options{Era: era, Sessions: 40, TranscriptBytes: 1 << 20}
}

// tree is a written tree, read back: every regular file by slash path.
type tree struct {
	dir   string
	files map[string][]byte
	modes map[string]fs.FileMode
	mtime map[string]time.Time
	dirs  map[string]fs.FileMode
	links []string
}

func readTree(t *testing.T, dir string) *tree {
	t.Helper()
	tr := &tree{dir: dir, files: map[string][]byte{}, modes: map[string]fs.FileMode{}, mtime: map[string]time.Time{}, dirs: map[string]fs.FileMode{}}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		rel = filepath.ToSlash(rel)
		if rel == "." {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			tr.links = append(tr.links, rel)
		case d.IsDir():
			tr.dirs[rel] = fi.Mode().Perm()
		case d.Type().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			tr.files[rel] = b
			tr.modes[rel] = fi.Mode().Perm()
			tr.mtime[rel] = fi.ModTime()
		default:
			return fmt.Errorf("%s: unexpected type %v", rel, d.Type())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func TestWrite(t *testing.T) {
	for _, era := range []int{1, 2, 3, 4} {
		t.Run(fmt.Sprintf("era%d", era), func(t *testing.T) {
			o := smallOptions(era)
			base := t.TempDir()
			dir := filepath.Join(base, "state")
			first, err := Write(dir, o)
			if err != nil {
				t.Fatal(err)
			}
			a := readTree(t, dir)
			// Determinism: again, at the same path (era 3 writes it).
			if err := os.Rename(dir, filepath.Join(base, "first")); err != nil {
				t.Fatal(err)
			}
			second, err := Write(dir, o)
			if err != nil {
				t.Fatal(err)
			}
			b := readTree(t, dir)
			compareTrees(t, a, b, true)
			if fmt.Sprint(first) != fmt.Sprint(second) {
				t.Errorf("the truths differ")
			}
			tr := second
			checkTruthFiles(t, b, tr)
			checkCounts(t, b, era, tr)
			checkTranscripts(t, b, o, tr)
			checkJSON(t, b)
			checkJobs(t, b, era, tr, o)
			checkSecrets(t, b, tr)
			checkEra(t, b, era)
			checkModes(t, b)
		})
	}
}

func compareTrees(t *testing.T, a, b *tree, meta bool) {
	t.Helper()
	if !slices.Equal(slices.Sorted(maps.Keys(a.files)), slices.Sorted(maps.Keys(b.files))) {
		t.Fatalf("the file lists differ:\n%v\n%v", slices.Sorted(maps.Keys(a.files)), slices.Sorted(maps.Keys(b.files)))
	}
	for rel, x := range a.files {
		if !bytes.Equal(x, b.files[rel]) {
			t.Errorf("%s differs", rel)
		}
		if meta && a.modes[rel] != b.modes[rel] {
			t.Errorf("%s: mode %v, then %v", rel, a.modes[rel], b.modes[rel])
		}
		if meta && !a.mtime[rel].Equal(b.mtime[rel]) {
			t.Errorf("%s: mtime %v, then %v", rel, a.mtime[rel], b.mtime[rel])
		}
	}
	if meta && !maps.Equal(a.dirs, b.dirs) {
		t.Errorf("the directories differ:\n%v\n%v", a.dirs, b.dirs)
	}
}

func checkTruthFiles(t *testing.T, tr *tree, truth *Truth) {
	t.Helper()
	var size int64
	for _, b := range tr.files {
		size += int64(len(b))
	}
	if truth.Files != int64(len(tr.files)) || truth.Bytes != size {
		t.Errorf("truth says %d files, %d bytes; the tree has %d, %d", truth.Files, truth.Bytes, len(tr.files), size)
	}
	if len(tr.links) > 0 {
		t.Errorf("symlinks written: %v", tr.links)
	}
	for _, k := range Kinds {
		if _, ok := truth.Counts[string(k)]; !ok {
			t.Errorf("counts lack %s", k)
		}
	}
	if len(truth.Counts) != 15 {
		t.Errorf("%d kinds counted, want the 15 of the classification", len(truth.Counts))
	}
}

// ----- the independent recount, per /tmp/spec-kinds.md -----

func checkCounts(t *testing.T, tr *tree, era int, truth *Truth) {
	t.Helper()
	got, unknown := recount(t, tr)
	if !maps.Equal(got, truth.Counts) {
		for _, k := range slices.Sorted(maps.Keys(got)) {
			if got[k] != truth.Counts[k] {
				t.Errorf("%s: recounted %d, truth %d", k, got[k], truth.Counts[k])
			}
		}
	}
	if !slices.Equal(unknown, truth.Unknown) {
		t.Errorf("unknown files %v, truth %v", unknown, truth.Unknown)
	}
	// Every kind the era has is there.
	for _, k := range []string{"config", "jobs", "runs", "sessions", "transcripts", "transcript_entries", "transcript_archives",
		"skills", "skill_installs", "auth_profiles", "channel_credentials", "system", "unknown"} {
		if got[k] == 0 {
			t.Errorf("no %s", k)
		}
	}
	if (got["quarantined"] > 0) != (era == 2) {
		t.Errorf("quarantined %d in era %d", got["quarantined"], era)
	}
	if (got["leftovers"] > 0) != (era >= 3) {
		t.Errorf("leftovers %d in era %d", got["leftovers"], era)
	}
	if got["skills"] != 8 || got["skill_installs"] != 3 || got["auth_profiles"] != 6 || got["channel_credentials"] != 3 {
		t.Errorf("skills %d, installs %d, auth profiles %d, channel credentials %d", got["skills"], got["skill_installs"], got["auth_profiles"], got["channel_credentials"])
	}
}

func recount(t *testing.T, tr *tree) (map[string]int64, []string) {
	t.Helper()
	c := map[string]int64{}
	for _, k := range []string{"config", "jobs", "quarantined", "runs", "sessions", "transcripts", "transcript_entries",
		"transcript_archives", "skills", "skill_installs", "auth_profiles", "channel_credentials", "leftovers", "system", "unknown"} {
		c[k] = 0
	}
	var unknown []string
	// The skill dirs: any dir below workspace/skills/ or skills/ holding a SKILL.md.
	var skillDirs []string
	for rel := range tr.files {
		if path.Base(rel) == "SKILL.md" && (strings.HasPrefix(rel, "workspace/skills/") || strings.HasPrefix(rel, "skills/")) {
			skillDirs = append(skillDirs, path.Dir(rel))
		}
	}
	inSkill := func(rel string) (string, bool) {
		best := ""
		for _, d := range skillDirs {
			if strings.HasPrefix(rel, d+"/") && len(d) > len(best) {
				best = d
			}
		}
		return strings.TrimPrefix(rel, best+"/"), best != ""
	}
	systemRe := regexp.MustCompile(`^(\.env|secrets\.json|exec-approvals\.json|restart-sentinel\.json|agents/[^/]+/agent/(auth-state|models)\.json|agents/[^/]+/sessions/sessions\.json\.bak\.\d+|cron/jobs\.json\.bak|(devices|nodes|identity)/[^/]+\.json|workspace/[^/]+\.md|workspace/memory/[^/]+\.md|workspace/\.clawhub/lock\.json|memory/[^/]+\.sqlite|logs/.+|state/openclaw\.sqlite-(wal|shm))$`)
	activeRe := regexp.MustCompile(`^agents/[^/]+/sessions/[^/]+\.jsonl$`)
	archiveRe := regexp.MustCompile(`^agents/[^/]+/sessions/[^/]+\.jsonl\.(reset|deleted)\.[^/]+$`)
	for _, rel := range slices.Sorted(maps.Keys(tr.files)) {
		data := tr.files[rel]
		var v struct {
			Jobs     json.RawMessage            `json:"jobs"`
			Profiles map[string]json.RawMessage `json:"profiles"`
		}
		rest, skill := inSkill(rel)
		switch {
		case rel == "openclaw.json":
			c["config"]++
		case strings.Contains(path.Base(rel), ".migrated"):
			c["leftovers"]++
		case rel == "cron/jobs.json":
			mustUnmarshal(t, rel, data, &v)
			var jobs []json.RawMessage
			mustUnmarshal(t, rel, v.Jobs, &jobs)
			c["jobs"] += int64(len(jobs))
		case rel == "cron/jobs-state.json":
		case rel == "cron/jobs-quarantine.json":
			mustUnmarshal(t, rel, data, &v)
			var jobs []json.RawMessage
			mustUnmarshal(t, rel, v.Jobs, &jobs)
			c["quarantined"] += int64(len(jobs))
		case strings.HasPrefix(rel, "cron/runs/") && strings.HasSuffix(rel, ".jsonl"):
			c["runs"] += nonEmptyLines(data)
		case rel == "state/openclaw.sqlite":
			db := openCopy(t, tr, rel)
			tables := queryStrings(t, db, `SELECT name FROM sqlite_master WHERE type='table' ORDER BY name`)
			for _, tab := range tables {
				n := queryInt(t, db, `SELECT count(*) FROM "`+tab+`"`)
				switch tab {
				case "cron_jobs":
					c["jobs"] += n
				case "cron_run_logs":
					c["runs"] += n
				case "schema_meta", "migration_runs":
				default:
					c["unknown"] += n
				}
			}
		case path.Base(rel) == "sessions.json" && strings.HasPrefix(rel, "agents/"):
			var m map[string]json.RawMessage
			mustUnmarshal(t, rel, data, &m)
			c["sessions"] += int64(len(m))
		case activeRe.MatchString(rel):
			c["transcripts"]++
			c["transcript_entries"] += nonEmptyLines(data) - 1
		case archiveRe.MatchString(rel):
			c["transcript_archives"]++
		case skill && rest == ".clawhub/origin.json":
			c["skill_installs"]++
		case skill && rest == "SKILL.md":
			c["skills"]++
		case skill && !strings.HasPrefix(rest, ".clawhub/"):
			// a file of a skill record
		case path.Base(rel) == "auth-profiles.json" && strings.HasPrefix(rel, "agents/"):
			mustUnmarshal(t, rel, data, &v)
			c["auth_profiles"] += int64(len(v.Profiles))
		case strings.HasPrefix(rel, "credentials/"):
			c["channel_credentials"]++
		case systemRe.MatchString(rel):
			c["system"]++
		default:
			c["unknown"]++
			unknown = append(unknown, rel)
		}
	}
	return c, unknown
}

func mustUnmarshal(t *testing.T, rel string, data []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", rel, err)
	}
}

func nonEmptyLines(data []byte) int64 {
	var n int64
	for l := range bytes.SplitSeq(data, []byte("\n")) {
		if len(bytes.TrimSpace(l)) > 0 {
			n++
		}
	}
	return n
}

// openCopy opens a copy of a SQLite file of the tree, so that reading it
// leaves no -shm behind in the tree.
func openCopy(t *testing.T, tr *tree, rel string) *sql.DB {
	t.Helper()
	p := filepath.Join(t.TempDir(), path.Base(rel))
	if err := os.WriteFile(p, tr.files[rel], 0o600); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func queryStrings(t *testing.T, db *sql.DB, q string, args ...any) []string {
	t.Helper()
	rows, err := db.Query(q, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func queryInt(t *testing.T, db *sql.DB, q string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := db.QueryRow(q, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

// ----- transcripts and sessions -----

var (
	sessionIDRe = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,127}$`)
	entryIDRe   = regexp.MustCompile(`^[0-9a-f]{8}$`)
)

type line struct {
	Type      string          `json:"type"`
	Version   int             `json:"version"`
	ID        string          `json:"id"`
	ParentID  *string         `json:"parentId"`
	Timestamp string          `json:"timestamp"`
	Cwd       string          `json:"cwd"`
	FromID    string          `json:"fromId"`
	Summary   string          `json:"summary"`
	FirstKept string          `json:"firstKeptEntryId"`
	Tokens    int64           `json:"tokensBefore"`
	Custom    string          `json:"customType"`
	Message   json.RawMessage `json:"message"`
}

type msg struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	ToolCallID string          `json:"toolCallId"`
	StopReason string          `json:"stopReason"`
	Timestamp  int64           `json:"timestamp"`
}

type part struct {
	Type string `json:"type"`
	ID   string `json:"id"`
	Name string `json:"name"`
}

// transcriptStats checks one transcript's structure and counts its types.
func transcriptStats(t *testing.T, rel string, data []byte, types map[string]int) (compactions int, branches int) {
	t.Helper()
	lines := bytes.Split(bytes.TrimSuffix(data, []byte("\n")), []byte("\n"))
	var h line
	mustUnmarshal(t, rel, lines[0], &h)
	sid := strings.TrimSuffix(path.Base(rel), ".jsonl")
	sid, _, _ = strings.Cut(sid, "-topic-")
	sid, _, _ = strings.Cut(sid, ".jsonl")
	if h.Type != "session" || h.Version != 3 || h.ID != sid || h.Cwd == "" || h.Timestamp == "" {
		t.Errorf("%s: header %+v", rel, h)
	}
	seen := map[string]bool{}
	prev := ""
	var pending []string // tool call ids awaiting their results
	var last time.Time
	for i, l := range lines[1:] {
		var e line
		mustUnmarshal(t, rel, l, &e)
		types[e.Type]++
		if !entryIDRe.MatchString(e.ID) || seen[e.ID] {
			t.Fatalf("%s:%d: id %q bad or repeated", rel, i+2, e.ID)
		}
		switch {
		case i == 0 && e.ParentID != nil:
			t.Errorf("%s: first entry has a parent", rel)
		case i > 0 && (e.ParentID == nil || !seen[*e.ParentID]):
			t.Fatalf("%s:%d: parent not an earlier entry", rel, i+2)
		case i > 0 && *e.ParentID != prev:
			branches++
			if e.Type != "branch_summary" || e.FromID != prev {
				t.Errorf("%s:%d: a %s branches", rel, i+2, e.Type)
			}
		}
		ts, err := time.Parse(time.RFC3339Nano, e.Timestamp)
		if err != nil || ts.Before(last) || ts.After(DefaultNow) {
			t.Errorf("%s:%d: timestamp %q out of order or after Now", rel, i+2, e.Timestamp)
		}
		last = ts
		seen[e.ID] = true
		prev = e.ID
		if e.Type == "compaction" {
			compactions++
			if !seen[e.FirstKept] || e.Summary == "" || e.Tokens == 0 {
				t.Errorf("%s:%d: compaction %+v", rel, i+2, e)
			}
		}
		if e.Type != "message" {
			if len(pending) > 0 {
				t.Errorf("%s:%d: %s before the tool results", rel, i+2, e.Type)
			}
			continue
		}
		var m msg
		mustUnmarshal(t, rel, e.Message, &m)
		types["role:"+m.Role]++
		switch m.Role {
		case "toolResult":
			if len(pending) == 0 || pending[0] != m.ToolCallID {
				t.Fatalf("%s:%d: tool result %s, waiting for %v", rel, i+2, m.ToolCallID, pending)
			}
			pending = pending[1:]
		case "assistant":
			if len(pending) > 0 {
				t.Fatalf("%s:%d: assistant before the tool results", rel, i+2)
			}
			var parts []part
			mustUnmarshal(t, rel, m.Content, &parts)
			for _, p := range parts {
				types["part:"+p.Type]++
				if p.Type == "toolCall" {
					pending = append(pending, p.ID)
				}
			}
			if (len(pending) > 0) != (m.StopReason == "toolUse") {
				t.Errorf("%s:%d: stopReason %s with %d calls", rel, i+2, m.StopReason, len(pending))
			}
		case "user":
			if len(pending) > 0 {
				t.Fatalf("%s:%d: user before the tool results", rel, i+2)
			}
		default:
			t.Errorf("%s:%d: role %q", rel, i+2, m.Role)
		}
	}
	if len(pending) > 0 {
		t.Errorf("%s: ends waiting for %v", rel, pending)
	}
	return compactions, branches
}

func checkTranscripts(t *testing.T, tr *tree, o Options, truth *Truth) {
	t.Helper()
	types := map[string]int{}
	var active int64
	future, topics, branched := 0, 0, 0
	compactions := map[string]int{}
	for _, rel := range slices.Sorted(maps.Keys(tr.files)) {
		if !strings.HasPrefix(rel, "agents/") || !strings.Contains(rel, "/sessions/") || !strings.Contains(rel, ".jsonl") {
			continue
		}
		data := tr.files[rel]
		before := types["openclaw.future_entry"]
		c, b := transcriptStats(t, rel, data, types)
		if strings.HasSuffix(rel, ".jsonl") {
			active += int64(len(data))
			compactions[rel] = c
			if strings.Contains(rel, "-topic-") {
				topics++
			}
		}
		if types["openclaw.future_entry"] > before {
			future++
		}
		if b > 0 {
			branched++
		}
	}
	if d := float64(active-o.TranscriptBytes) / float64(o.TranscriptBytes); d < -0.1 || d > 0.1 {
		t.Errorf("active transcripts total %d bytes, asked %d", active, o.TranscriptBytes)
	}
	for _, k := range []string{"message", "model_change", "thinking_level_change", "compaction", "branch_summary", "custom",
		"role:user", "role:assistant", "role:toolResult", "part:text", "part:thinking", "part:toolCall"} {
		if types[k] == 0 {
			t.Errorf("no %s in any transcript", k)
		}
	}
	if future != 2 || types["openclaw.future_entry"] != 2 {
		t.Errorf("%d transcripts with %d entries of an unknown type, want 2 and 2", future, types["openclaw.future_entry"])
	}
	if topics == 0 || branched == 0 {
		t.Errorf("%d topic transcripts, %d branched", topics, branched)
	}

	// The indexes: every entry has its transcript; the key shapes are there.
	keys := map[string]bool{}
	for _, agent := range []string{"main", "ops"} {
		rel := "agents/" + agent + "/sessions/sessions.json"
		var idx map[string]struct {
			SessionID       string `json:"sessionId"`
			SessionFile     string `json:"sessionFile"`
			UpdatedAt       int64  `json:"updatedAt"`
			CompactionCount int    `json:"compactionCount"`
		}
		mustUnmarshal(t, rel, tr.files[rel], &idx)
		for k, e := range idx {
			keys[k] = true
			if !sessionIDRe.MatchString(e.SessionID) || e.UpdatedAt == 0 {
				t.Errorf("%s: %s: %+v", rel, k, e)
			}
			f := e.SessionFile
			if f == "" {
				f = e.SessionID + ".jsonl"
			}
			tf := "agents/" + agent + "/sessions/" + f
			if _, ok := tr.files[tf]; !ok {
				t.Errorf("%s: %s: no transcript %s", rel, k, f)
			}
			if compactions[tf] != e.CompactionCount {
				t.Errorf("%s: %s: compactionCount %d, transcript has %d", rel, k, e.CompactionCount, compactions[tf])
			}
		}
	}
	for _, re := range []string{`^agent:main:main$`, `^agent:ops:main$`, `^agent:main:telegram:direct:\d+$`, `^agent:main:telegram:group:-100\d+$`,
		`^agent:main:telegram:group:-100\d+:thread:\d+$`, `^agent:main:cron:[0-9a-f-]{36}$`, `^agent:ops:cron:[0-9a-f-]{36}$`, `^hook:[0-9a-f-]{36}$`,
		`^agent:main:whatsapp:direct:\+\d+$`, `^agent:ops:discord:channel:\d+$`} {
		found := false
		for k := range keys {
			found = found || regexp.MustCompile(re).MatchString(k)
		}
		if !found {
			t.Errorf("no session key like %s", re)
		}
	}
	if int64(len(keys)) != truth.Counts["sessions"] || len(keys) != o.Sessions {
		t.Errorf("%d distinct keys, %d counted, %d asked", len(keys), truth.Counts["sessions"], o.Sessions)
	}
}

// ----- JSON -----

// json5ToJSON is just enough of JSON5 for openclaw.json: comments,
// unquoted keys and trailing commas.
func json5ToJSON(src []byte) []byte {
	var out []byte
	inStr := false
	for i := 0; i < len(src); i++ {
		ch := src[i]
		switch {
		case inStr:
			out = append(out, ch)
			if ch == '\\' && i+1 < len(src) {
				i++
				out = append(out, src[i])
			} else if ch == '"' {
				inStr = false
			}
		case ch == '"':
			inStr = true
			out = append(out, ch)
		case ch == '/' && i+1 < len(src) && src[i+1] == '/':
			for i < len(src) && src[i] != '\n' {
				i++
			}
			out = append(out, '\n')
		case ch == '/' && i+1 < len(src) && src[i+1] == '*':
			end := bytes.Index(src[i+2:], []byte("*/"))
			i += end + 3
		default:
			out = append(out, ch)
		}
	}
	out = regexp.MustCompile(`([{,]\s*)([A-Za-z_$][A-Za-z0-9_$]*)\s*:`).ReplaceAll(out, []byte(`$1"$2":`))
	return regexp.MustCompile(`,(\s*[}\]])`).ReplaceAll(out, []byte(`$1`))
}

func checkJSON(t *testing.T, tr *tree) {
	t.Helper()
	for rel, data := range tr.files {
		base := path.Base(rel)
		switch {
		case rel == "openclaw.json":
			if !bytes.Contains(data, []byte("\n// ")) || !bytes.Contains(data, []byte("/*")) || !bytes.Contains(data, []byte(",\n  },")) {
				t.Errorf("openclaw.json has no comments or trailing commas: not JSON5 enough")
			}
			if json.Valid(data) {
				t.Errorf("openclaw.json is plain JSON")
			}
			var cfg struct {
				Meta struct {
					LastTouchedVersion string `json:"lastTouchedVersion"`
				} `json:"meta"`
				Agents struct {
					List []struct {
						ID string `json:"id"`
					} `json:"list"`
				} `json:"agents"`
				Cron map[string]any `json:"cron"`
			}
			if err := json.Unmarshal(json5ToJSON(data), &cfg); err != nil {
				t.Fatalf("openclaw.json: %v\n%s", err, json5ToJSON(data))
			}
			if len(cfg.Agents.List) != 2 || cfg.Agents.List[0].ID != "main" || cfg.Agents.List[1].ID != "ops" {
				t.Errorf("agents.list %+v", cfg.Agents.List)
			}
			if _, ok := cfg.Cron["store"]; ok {
				t.Errorf("cron.store set")
			}
			if !slices.Contains([]string{"2026.4.12", "2026.5.27", "2026.6.8", "2026.7.2"}, cfg.Meta.LastTouchedVersion) {
				t.Errorf("lastTouchedVersion %q", cfg.Meta.LastTouchedVersion)
			}
		case strings.Contains(base, ".json") && !strings.Contains(base, ".jsonl"):
			if !json.Valid(data) {
				t.Errorf("%s: invalid JSON", rel)
			}
		case strings.Contains(base, ".jsonl"):
			sc := bufio.NewScanner(bytes.NewReader(data))
			sc.Buffer(nil, 1<<24)
			for n := 1; sc.Scan(); n++ {
				if !json.Valid(sc.Bytes()) {
					t.Fatalf("%s:%d: invalid JSON", rel, n)
				}
			}
		}
	}
}

// ----- jobs -----

type storedJob struct {
	ID             string `json:"id"`
	JobID          string `json:"jobId"`
	Name           string `json:"name"`
	Enabled        bool   `json:"enabled"`
	DeleteAfterRun *bool  `json:"deleteAfterRun"`
	Schedule       struct {
		Kind, At, Expr, Cron, TZ string
		EveryMs                  int64 `json:"everyMs"`
		AnchorMs                 int64 `json:"anchorMs"`
	} `json:"schedule"`
	Delivery      *struct{ Mode string } `json:"delivery"`
	SessionTarget string                 `json:"sessionTarget"`
	Payload       struct {
		Kind, Message, Text string
	} `json:"payload"`
	State *jobState `json:"state"`
}

type jobState struct {
	NextRunAtMs   int64  `json:"nextRunAtMs"`
	RunningAtMs   int64  `json:"runningAtMs"`
	LastRunStatus string `json:"lastRunStatus"`
}

// readJobs reads the cron store back, however the era keeps it, with
// each job's state and number of runs.
func readJobs(t *testing.T, tr *tree, era int) ([]storedJob, map[string]int) {
	t.Helper()
	runs := map[string]int{}
	var jobs []storedJob
	switch era {
	case 1, 2:
		var s struct{ Jobs []storedJob }
		mustUnmarshal(t, "cron/jobs.json", tr.files["cron/jobs.json"], &s)
		jobs = s.Jobs
		if era == 2 {
			var st struct {
				Version int
				Jobs    map[string]struct {
					UpdatedAtMs      int64 `json:"updatedAtMs"`
					State            jobState
					ScheduleIdentity string `json:"scheduleIdentity"`
				}
			}
			mustUnmarshal(t, "cron/jobs-state.json", tr.files["cron/jobs-state.json"], &st)
			for i := range jobs {
				if jobs[i].State != nil {
					t.Errorf("era 2 job %s has its state inline", jobs[i].ID)
				}
				e, ok := st.Jobs[jobs[i].ID]
				if !ok || e.UpdatedAtMs == 0 || !strings.HasPrefix(e.ScheduleIdentity, `{"version":1,"enabled":`) {
					t.Errorf("jobs-state.json: %s: %+v", jobs[i].ID, e)
				}
				jobs[i].State = &e.State
			}
		}
		for rel, data := range tr.files {
			if id, ok := strings.CutPrefix(rel, "cron/runs/"); ok {
				runs[strings.TrimSuffix(id, ".jsonl")] = int(nonEmptyLines(data))
			}
		}
	default:
		db := openCopy(t, tr, "state/openclaw.sqlite")
		rows, err := db.Query(`SELECT job_id, job_json, state_json, running_at_ms, last_run_status, schedule_kind, enabled, store_key FROM cron_jobs ORDER BY sort_order`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var id, js, ss, kind, key string
			var running sql.NullInt64
			var last sql.NullString
			var enabled bool
			if err := rows.Scan(&id, &js, &ss, &running, &last, &kind, &enabled, &key); err != nil {
				t.Fatal(err)
			}
			var j storedJob
			mustUnmarshal(t, "job_json", []byte(js), &j)
			if j.State != nil || j.ID != id || j.Schedule.Kind != kind || j.Enabled != enabled {
				t.Errorf("cron_jobs %s: columns disagree with job_json %s", id, js)
			}
			if want := filepath.Join(tr.dir, "cron", "jobs.json"); key != want {
				t.Errorf("store_key %s, want %s", key, want)
			}
			j.State = &jobState{}
			mustUnmarshal(t, "state_json", []byte(ss), j.State)
			if j.State.RunningAtMs != running.Int64 || j.State.LastRunStatus != last.String {
				t.Errorf("cron_jobs %s: running_at_ms/last_run_status disagree with state_json", id)
			}
			jobs = append(jobs, j)
		}
		for _, id := range queryStrings(t, db, `SELECT job_id FROM cron_run_logs`) {
			runs[id]++
		}
	}
	return jobs, runs
}

func checkJobs(t *testing.T, tr *tree, era int, truth *Truth, o Options) {
	t.Helper()
	jobs, runs := readJobs(t, tr, era)
	if len(jobs) != 70 || len(truth.Jobs) != 70 {
		t.Fatalf("%d jobs stored, %d in the truth, want 70", len(jobs), len(truth.Jobs))
	}
	now := DefaultNow.UnixMilli()
	var running []string
	var done, pending []string
	kinds := map[string]int{}
	zones := map[string]bool{}
	legacy := 0
	for i, j := range jobs {
		id := j.ID
		if j.JobID != "" {
			legacy++
			id = j.JobID
			if era != 1 || j.ID != "" || j.Schedule.Cron == "" || j.Schedule.Expr != "" {
				t.Errorf("legacy job %+v in era %d", j, era)
			}
			j.Schedule.Expr = j.Schedule.Cron
		}
		jt := truth.Jobs[i]
		msg := j.Payload.Message + j.Payload.Text
		if jt.ID != id || jt.Name != j.Name || jt.Kind != j.Schedule.Kind || jt.Expr != j.Schedule.Expr || jt.TZ != j.Schedule.TZ ||
			jt.EveryMs != j.Schedule.EveryMs || jt.At != j.Schedule.At || jt.Message != msg || jt.PayloadKind != j.Payload.Kind ||
			jt.SessionTarget != j.SessionTarget || jt.Enabled != j.Enabled || jt.RunningAtMs != j.State.RunningAtMs ||
			jt.LastRunStatus != j.State.LastRunStatus || jt.Runs != runs[id] {
			t.Errorf("job %d: truth %+v, stored %+v (%d runs)", i, jt, j, runs[id])
		}
		kinds[j.Schedule.Kind]++
		kinds[j.Payload.Kind]++
		kinds[j.SessionTarget]++
		if j.Delivery != nil {
			kinds["delivery:"+j.Delivery.Mode]++
		}
		if j.Schedule.AnchorMs != 0 {
			kinds["anchorMs"]++
		}
		if j.Schedule.Kind == "cron" {
			zones[j.Schedule.TZ] = true
		}
		if j.State.RunningAtMs != 0 {
			running = append(running, id)
		}
		if j.Schedule.Kind == "at" {
			at, err := time.Parse(time.RFC3339, j.Schedule.At)
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case at.UnixMilli() < now && !j.Enabled && j.DeleteAfterRun != nil && !*j.DeleteAfterRun && j.State.LastRunStatus == "ok":
				done = append(done, id)
			case at.UnixMilli() > now && j.Enabled && j.State.NextRunAtMs == at.UnixMilli():
				pending = append(pending, id)
			}
		}
	}
	if len(running) != 1 || running[0] != truth.Running {
		t.Errorf("running jobs %v, truth %q", running, truth.Running)
	}
	if len(done) == 0 || !slices.Equal(done, truth.CompletedOneShots) || len(pending) == 0 || !slices.Equal(pending, truth.PendingOneShots) {
		t.Errorf("completed one-shots %v (truth %v), pending %v (truth %v)", done, truth.CompletedOneShots, pending, truth.PendingOneShots)
	}
	if (legacy == 1) != (era == 1) {
		t.Errorf("%d legacy jobs in era %d", legacy, era)
	}
	for _, k := range []string{"at", "every", "cron", "on-exit", "agentTurn", "isolated", "main", "anchorMs", "delivery:none", "delivery:announce", "delivery:webhook"} {
		if kinds[k] == 0 {
			t.Errorf("no job with %s", k)
		}
	}
	if kinds["systemEvent"] != 2 || kinds["on-exit"] != 1 {
		t.Errorf("%d systemEvent, %d on-exit jobs", kinds["systemEvent"], kinds["on-exit"])
	}
	for _, z := range []string{"Europe/Berlin", "America/New_York", "UTC", ""} {
		if !zones[z] {
			t.Errorf("no cron job in zone %q", z)
		}
	}
	if kinds["session:weekly-review"]+kinds["session:project-alpha"] == 0 {
		t.Errorf("no session:<id> target")
	}
	// Run-log entries (era 1/2 files) have the documented fields.
	if era <= 2 {
		for rel, data := range tr.files {
			if !strings.HasPrefix(rel, "cron/runs/") {
				continue
			}
			for l := range bytes.SplitSeq(bytes.TrimSpace(data), []byte("\n")) {
				var e map[string]any
				mustUnmarshal(t, rel, l, &e)
				for _, k := range []string{"ts", "jobId", "action", "status", "delivered", "deliveryStatus", "runAtMs", "durationMs"} {
					if _, ok := e[k]; !ok {
						t.Errorf("%s: no %s in %s", rel, k, l)
					}
				}
				if k, ok := e["sessionKey"].(string); ok && !regexp.MustCompile(`^agent:(main|ops):cron:[0-9a-f-]{36}:run:[0-9a-f-]{36}$`).MatchString(k) {
					t.Errorf("%s: sessionKey %s", rel, k)
				}
			}
		}
	}
}

// ----- secrets -----

// secretFiles are where secrets may be.
var secretFiles = regexp.MustCompile(`^(openclaw\.json|\.env|credentials/.+|devices/paired\.json|identity/device\.json|agents/[^/]+/agent/auth-profiles\.json)$`)

func checkSecrets(t *testing.T, tr *tree, truth *Truth) {
	t.Helper()
	if len(truth.Secrets) < 20 {
		t.Errorf("only %d secrets", len(truth.Secrets))
	}
	seen := map[string]bool{}
	for _, s := range truth.Secrets {
		if seen[s] || len(s) < 8 {
			t.Errorf("secret %q repeated or short", s)
		}
		seen[s] = true
		var in []string
		for rel, data := range tr.files {
			if bytes.Contains(data, []byte(s)) {
				in = append(in, rel)
			}
		}
		if len(in) == 0 {
			t.Errorf("secret %q written nowhere", s)
		}
		for _, rel := range in {
			if !secretFiles.MatchString(rel) {
				t.Errorf("secret %q in %s", s, rel)
			}
		}
	}
	for _, want := range []string{"sk-ant-api03-", "ghu_", ":AA", "sk-proj-", "rt_"} {
		found := false
		for _, s := range truth.Secrets {
			found = found || strings.Contains(s, want)
		}
		if !found {
			t.Errorf("no secret like %s", want)
		}
	}
}

// ----- per era -----

func checkEra(t *testing.T, tr *tree, era int) {
	t.Helper()
	has := func(rel string) bool { _, ok := tr.files[rel]; return ok }
	want := map[string]bool{
		"cron/jobs.json":                           era <= 2,
		"cron/jobs.json.bak":                       era <= 2,
		"cron/jobs-state.json":                     era == 2,
		"cron/jobs-quarantine.json":                era == 2,
		"cron/jobs.json.migrated":                  era >= 3,
		"cron/jobs-state.json.migrated":            era >= 3,
		"state/openclaw.sqlite":                    era >= 3,
		"state/openclaw.sqlite-wal":                false,
		"state/openclaw.sqlite-shm":                false,
		"agents/main/agent/openclaw-agent.sqlite":  era == 4,
		"agents/main/sessions/sessions.json.bak.1": true,
		"workspace/.clawhub/lock.json":             true,
		"identity/device.json":                     true,
		"logs/gateway.log":                         true,
		"workspace/memory/2026-11-19.md":           true,
	}
	for rel, w := range want {
		if has(rel) != w {
			t.Errorf("era %d: %s present %v, want %v", era, rel, has(rel), w)
		}
	}
	runsDir := false
	for rel := range tr.files {
		runsDir = runsDir || strings.HasPrefix(rel, "cron/runs/")
	}
	if runsDir != (era <= 2) {
		t.Errorf("era %d: cron/runs/ present %v", era, runsDir)
	}
	abs, err := filepath.Abs(tr.dir)
	if err != nil {
		t.Fatal(err)
	}
	if era <= 2 {
		for rel, data := range tr.files {
			if bytes.Contains(data, []byte(abs)) {
				t.Errorf("%s holds the tree's absolute path", rel)
			}
		}
		return
	}
	for _, rel := range []string{"state/openclaw.sqlite", "agents/main/agent/openclaw-agent.sqlite"} {
		if !has(rel) {
			continue
		}
		data := tr.files[rel]
		if !bytes.HasPrefix(data, []byte("SQLite format 3\x00")) || data[18] != 2 || data[19] != 2 {
			t.Errorf("%s: not a WAL-mode SQLite database", rel)
		}
		db := openCopy(t, tr, rel)
		var role, app string
		var version int64
		if err := db.QueryRow(`SELECT role, schema_version, app_version FROM schema_meta WHERE meta_key='primary'`).Scan(&role, &version, &app); err != nil {
			t.Fatal(err)
		}
		uv := queryInt(t, db, `PRAGMA user_version`)
		if rel == "state/openclaw.sqlite" && (role != "state" || version != 1 || uv != 1 || app != Releases[era]) ||
			rel != "state/openclaw.sqlite" && (role != "agent" || version != 4 || uv != 4) {
			t.Errorf("%s: schema_meta %s %d %s, user_version %d", rel, role, version, app, uv)
		}
		if rel == "state/openclaw.sqlite" {
			if n := queryInt(t, db, `SELECT count(*) FROM migration_runs`); n != 1 {
				t.Errorf("%d migration_runs", n)
			}
			if n := queryInt(t, db, `SELECT count(*) FROM task_runs`); n != 3 {
				t.Errorf("%d task_runs", n)
			}
		}
	}
}

func checkModes(t *testing.T, tr *tree) {
	t.Helper()
	for rel, m := range tr.modes {
		top, _, _ := strings.Cut(rel, "/")
		if (top == "cron" || top == "credentials") && m != 0o600 {
			t.Errorf("%s: mode %v", rel, m)
		}
		if strings.HasPrefix(rel, "workspace/") && !strings.HasSuffix(rel, ".sh") && m != 0o644 {
			t.Errorf("%s: mode %v", rel, m)
		}
	}
	for rel, m := range tr.dirs {
		top, _, _ := strings.Cut(rel, "/")
		if (top == "cron" || top == "credentials") && m != 0o700 {
			t.Errorf("%s/: mode %v", rel, m)
		}
	}
}

// ----- options -----

func TestOptions(t *testing.T) {
	for _, o := range []Options{{}, {Era: 5}, {Era: 2, Jobs: 5}, {Era: 2, Sessions: 3}, {Era: 2, TranscriptBytes: 1000}} {
		if _, err := Write(filepath.Join(t.TempDir(), "x"), o); err == nil {
			t.Errorf("%+v: no error", o)
		}
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "f"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Write(dir, smallOptions(1)); err == nil {
		t.Errorf("wrote into a directory that is not empty")
	}
	// Another seed, another tree.
	a, err := Write(filepath.Join(t.TempDir(), "a"), Options{Era: 2, Sessions: 8, TranscriptBytes: 64 << 10, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	b, err := Write(filepath.Join(t.TempDir(), "b"), Options{Era: 2, Sessions: 8, TranscriptBytes: 64 << 10, Seed: 2})
	if err != nil {
		t.Fatal(err)
	}
	if a.Jobs[0].ID == b.Jobs[0].ID || a.Secrets[0] == b.Secrets[0] {
		t.Errorf("seeds 1 and 2 gave the same jobs or secrets")
	}
}

// TestTranscriptBytes: the total of active transcripts is within 10% of
// what was asked, down to the smallest budget allowed.
func TestTranscriptBytes(t *testing.T) {
	for _, o := range []Options{
		{Era: 1, Sessions: MinSessions, TranscriptBytes: MinSessions * minTranscriptBytes},
		{Era: 2, Sessions: MinSessions, TranscriptBytes: MinSessions * minTranscriptBytes, Seed: 2},
		{Era: 3, Sessions: MinSessions, TranscriptBytes: MinSessions * minTranscriptBytes, Seed: 3},
		{Era: 2, Sessions: 100, TranscriptBytes: 2 << 20, Seed: 4},
		{Era: 3, Sessions: 24, TranscriptBytes: 128 << 10},
	} {
		dir := filepath.Join(t.TempDir(), "s")
		if _, err := Write(dir, o); err != nil {
			t.Fatal(err)
		}
		var n int64
		for rel, b := range readTree(t, dir).files {
			if strings.HasPrefix(rel, "agents/") && strings.HasSuffix(rel, ".jsonl") {
				n += int64(len(b))
			}
		}
		if d := float64(n-o.TranscriptBytes) / float64(o.TranscriptBytes); d < -0.1 || d > 0.1 {
			t.Errorf("%+v: active transcripts total %d bytes", o, n)
		}
	}
}

// ----- the committed example -----

func smallFixture() Options {
	return Options{Era: 2, Jobs: 70, Sessions: 24, TranscriptBytes: 256 << 10}
}

func TestSmallFixtureUpToDate(t *testing.T) {
	const dir = "testdata/small"
	if *update {
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
		if _, err := Write(dir, smallFixture()); err != nil {
			t.Fatal(err)
		}
	}
	fresh := filepath.Join(t.TempDir(), "small")
	if _, err := Write(fresh, smallFixture()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("%v: run go test -run TestSmallFixtureUpToDate -update", err)
	}
	compareTrees(t, readTree(t, fresh), readTree(t, dir), false)
	if t.Failed() {
		t.Log("testdata/small is stale: go test ./internal/openclawfix -run TestSmallFixtureUpToDate -update")
	}
}

// ----- speed -----

// BenchmarkWrite400MB is the benchmark's input: 400 MB of transcripts.
func BenchmarkWrite400MB(b *testing.B) {
	o := Options{Era: 2, TranscriptBytes: 400 << 20}
	for b.Loop() {
		dir := filepath.Join(b.TempDir(), "state")
		truth, err := Write(dir, o)
		if err != nil {
			b.Fatal(err)
		}
		b.SetBytes(truth.Bytes)
		b.StopTimer()
		if err := os.RemoveAll(dir); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}
