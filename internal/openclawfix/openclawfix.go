// Package openclawfix writes synthetic OpenClaw state directories: the
// fixtures of nlx's OpenClaw importer tests and the input of its benchmark.
//
// OpenClaw is a self-hosted agent gateway; its state directory (normally
// ~/.openclaw) holds the config (openclaw.json, JSON5), the cron store, the
// per-agent session indexes and pi-format JSONL transcripts, skills,
// credentials and assorted runtime files, in one of four on-disk eras (the
// research notes openclaw-state.md describe them and cite OpenClaw's
// sources). Write generates one such tree, deterministically from its
// Options (same Options, same bytes, on any machine), and returns a Truth:
// what it wrote, with the number of records of each kind of the
// classification the importer follows (package preserve's record kinds),
// counted here independently of the importer so that its tests can compare
// against it as an oracle, and every secret value it wrote.
//
// Nothing here reads the clock: every timestamp derives from Options.Now.
package openclawfix

import (
	"bufio"
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/bits"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Options say what to generate. Zero fields take their defaults, except Era.
type Options struct {
	Era             int       // 1, 2, 3 or 4 (4: era 3 plus agents/<id>/agent/openclaw-agent.sqlite, which nlx refuses)
	Jobs            int       // default 70; at least MinJobs
	Sessions        int       // default 800, spread over two agents "main" (3/4) and "ops" (1/4); at least MinSessions
	TranscriptBytes int64     // approximate total bytes of active transcripts; default 8 MiB
	Seed            uint64    // default 1
	Now             time.Time // default 2026-11-20T12:00:00Z; every timestamp derives from it
}

// Defaults and lower bounds of Options.
const (
	DefaultJobs            = 70
	DefaultSessions        = 800
	DefaultTranscriptBytes = 8 << 20
	DefaultSeed            = 1
	MinJobs                = 20   // room for every special job (one-shots, the running one, ...)
	MinSessions            = 8    // room for every session key shape
	minTranscriptBytes     = 5120 // per session, on average
)

// DefaultNow is Options.Now's default.
var DefaultNow = time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC)

// JobTruth is one cron job as written.
type JobTruth struct {
	ID, Name, AgentID, Kind string // Kind: "at", "every", "cron", or an unsupported one ("on-exit")
	Expr, TZ                string
	EveryMs                 int64
	At                      string // schedule as written
	Message                 string // payload.message (agentTurn) or payload.text (systemEvent)
	PayloadKind             string // "agentTurn" or "systemEvent"
	SessionTarget           string
	Enabled                 bool
	RunningAtMs             int64  // non-zero for the interrupted one
	LastRunStatus           string // "", "ok", "error", "skipped"
	Runs                    int    // run-log entries written for it
}

// Truth is what Write wrote.
type Truth struct {
	Era               int
	Counts            map[string]int64 // per Kind (its string), every kind present (0 where none)
	Secrets           []string         // every secret value written anywhere, each unique
	Jobs              []JobTruth       // in the store's order
	Running           string           // id of the job with runningAtMs set (exactly one)
	CompletedOneShots []string         // ids of `at` jobs that ran ok and were kept (enabled:false, deleteAfterRun:false)
	PendingOneShots   []string         // ids of `at` jobs not yet run (at after Now)
	Unknown           []string         // relative paths (slash-separated, sorted) of the files of kind unknown
	Files             int64            // regular files written
	Bytes             int64            // their total size
}

// Kind is a record kind of the classification the importer follows (the
// same values as preserve.Kinds, defined here again: this is its oracle).
type Kind string

// The record kinds, in the classification's order.
const (
	KindConfig             Kind = "config"
	KindJobs               Kind = "jobs"
	KindQuarantined        Kind = "quarantined"
	KindRuns               Kind = "runs"
	KindSessions           Kind = "sessions"
	KindTranscripts        Kind = "transcripts"
	KindTranscriptEntries  Kind = "transcript_entries"
	KindTranscriptArchives Kind = "transcript_archives"
	KindSkills             Kind = "skills"
	KindSkillInstalls      Kind = "skill_installs"
	KindAuthProfiles       Kind = "auth_profiles"
	KindChannelCredentials Kind = "channel_credentials"
	KindLeftovers          Kind = "leftovers"
	KindSystem             Kind = "system"
	// KindUnknown is spelled in two pieces only because internal/constcheck
	// forbids the bare literal (it is also the value of another concept's
	// constant); this is the record kind, not that concept.
	KindUnknown Kind = "unknown"
)

// Kinds are all record kinds, in the classification's order.
var Kinds = []Kind{KindConfig, KindJobs, KindQuarantined, KindRuns, KindSessions, KindTranscripts,
	KindTranscriptEntries, KindTranscriptArchives, KindSkills, KindSkillInstalls, KindAuthProfiles,
	KindChannelCredentials, KindLeftovers, KindSystem, KindUnknown}

// Releases are the OpenClaw versions that wrote each era's files
// (openclaw.json meta.lastTouchedVersion, schema_meta.app_version).
var Releases = map[int]string{1: "2026.4.12", 2: "2026.5.27", 3: "2026.6.8", 4: "2026.7.2"}

// fakeHome is the OpenClaw state directory's path as the files written say
// it (workspace paths, transcript cwd): never the real directory, so that a
// tree does not depend on where it is written. Only the era-3 cron
// store_key is the real absolute path, as OpenClaw writes it.
const fakeHome = "/home/claw/.openclaw"

// Write writes an OpenClaw state directory of o.Era into dir, which must
// not exist or be empty, and returns what it wrote.
func Write(dir string, o Options) (*Truth, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := prepareDir(dir); err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("openclawfix: %w", err)
	}
	g := &gen{
		o: o, dir: dir, abs: abs, era: o.Era, nowMs: o.Now.UnixMilli(),
		secretSet: map[string]bool{}, records: map[Kind]int64{}, sizes: map[string]int64{},
		truth: &Truth{Era: o.Era},
	}
	g.rel = g.release()
	steps := []struct {
		name string
		fn   func() error
	}{
		{"config", g.writeConfig},
		{"cron", g.writeCron},
		{"sessions", g.writeSessions},
		{"skills", g.writeSkills},
		{"auth", g.writeAuth},
		{"credentials", g.writeCredentials},
		{"system files", g.writeSystemFiles},
		{"unknown files", g.writeUnknownFiles},
	}
	for _, s := range steps {
		if err := s.fn(); err != nil {
			return nil, fmt.Errorf("openclawfix: %s: %w", s.name, err)
		}
	}
	g.count()
	return g.truth, nil
}

func (o Options) withDefaults() (Options, error) {
	if o.Era < 1 || o.Era > 4 {
		return o, fmt.Errorf("openclawfix: era %d: want 1, 2, 3 or 4", o.Era)
	}
	if o.Jobs == 0 {
		o.Jobs = DefaultJobs
	}
	if o.Sessions == 0 {
		o.Sessions = DefaultSessions
	}
	if o.TranscriptBytes == 0 {
		o.TranscriptBytes = DefaultTranscriptBytes
	}
	if o.Seed == 0 {
		o.Seed = DefaultSeed
	}
	if o.Now.IsZero() {
		o.Now = DefaultNow
	}
	o.Now = o.Now.UTC().Truncate(time.Millisecond)
	switch {
	case o.Jobs < MinJobs:
		return o, fmt.Errorf("openclawfix: %d jobs: want at least %d", o.Jobs, MinJobs)
	case o.Sessions < MinSessions:
		return o, fmt.Errorf("openclawfix: %d sessions: want at least %d", o.Sessions, MinSessions)
	case o.TranscriptBytes < int64(o.Sessions)*minTranscriptBytes:
		return o, fmt.Errorf("openclawfix: %d transcript bytes for %d sessions: want at least %d", o.TranscriptBytes, o.Sessions, int64(o.Sessions)*minTranscriptBytes)
	}
	return o, nil
}

func prepareDir(dir string) error {
	ents, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("openclawfix: %w", err)
		}
	case err != nil:
		return fmt.Errorf("openclawfix: %w", err)
	case len(ents) > 0:
		return fmt.Errorf("openclawfix: %s is not empty", dir)
	}
	// OpenClaw keeps its state directory private.
	if err := os.Chmod(dir, 0o700); err != nil {
		return fmt.Errorf("openclawfix: %w", err)
	}
	return nil
}

// gen is one Write in progress.
type gen struct {
	o        Options
	dir, abs string
	era      int
	rel      string // the era's release
	nowMs    int64

	secretSet map[string]bool
	records   map[Kind]int64   // records inside holder files (jobs, lines, entries, rows)
	sizes     map[string]int64 // every regular file written, by slash path
	skillDirs []string         // dirs holding a SKILL.md
	bw        *bufio.Writer    // the transcripts' writer, reused

	jobs     []*job     // the cron store, in order
	sessions []*session // every session, main's first
	truth    *Truth
}

func (g *gen) release() string { return Releases[g.era] }

// secret registers a secret value; every one must be unique.
func (g *gen) secret(s string) string {
	if g.secretSet[s] {
		panic("openclawfix: duplicate secret " + s)
	}
	g.secretSet[s] = true
	g.truth.Secrets = append(g.truth.Secrets, s)
	return s
}

// ----- files -----

// fileMode is OpenClaw's mode for a file: private for the cron store,
// credentials and every other secret-bearing file, world-readable else.
func fileMode(rel string) os.FileMode {
	top, _, _ := strings.Cut(rel, "/")
	switch {
	case top == "cron" || top == "credentials" || top == "identity" || top == "devices" || top == "state":
		return 0o600
	case rel == "openclaw.json" || rel == ".env" || path.Base(rel) == "auth-profiles.json" || path.Base(rel) == "openclaw-agent.sqlite":
		return 0o600
	case strings.HasSuffix(rel, ".sh"):
		return 0o755
	}
	return 0o644
}

// dirMode is OpenClaw's mode for a directory.
func dirMode(rel string) os.FileMode {
	top, _, _ := strings.Cut(rel, "/")
	switch {
	case top == "cron" || top == "credentials" || top == "identity" || top == "devices" || top == "state":
		return 0o700
	case strings.HasPrefix(rel, "agents/") && strings.HasSuffix(rel, "/agent"):
		return 0o700
	}
	return 0o755
}

func (g *gen) mkdirs(relDir string) error {
	if relDir == "." || relDir == "" {
		return nil
	}
	parts := strings.Split(relDir, "/")
	for i := range parts {
		rel := strings.Join(parts[:i+1], "/")
		p := filepath.Join(g.dir, filepath.FromSlash(rel))
		err := os.Mkdir(p, 0o700)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		if err != nil {
			return err
		}
		if err := os.Chmod(p, dirMode(rel)); err != nil {
			return err
		}
	}
	return nil
}

// create opens a new file rel (slash-separated) for writing.
func (g *gen) create(rel string) (*os.File, error) {
	if err := g.mkdirs(path.Dir(rel)); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(g.dir, filepath.FromSlash(rel)), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	return f, nil
}

// done fixes a written file's mode and mtime (ms) and records it.
func (g *gen) done(rel string, mtimeMs int64) error {
	p := filepath.Join(g.dir, filepath.FromSlash(rel))
	if err := os.Chmod(p, fileMode(rel)); err != nil {
		return err
	}
	t := time.UnixMilli(mtimeMs)
	if err := os.Chtimes(p, t, t); err != nil {
		return err
	}
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	g.sizes[rel] = fi.Size()
	if path.Base(rel) == "SKILL.md" {
		g.skillDirs = append(g.skillDirs, path.Dir(rel))
	}
	return nil
}

// file writes a whole file.
func (g *gen) file(rel string, data []byte, mtimeMs int64) error {
	f, err := g.create(rel)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return g.done(rel, mtimeMs)
}

// renameFile renames a file below dir (slash paths).
func renameFile(dir, from, to string) error {
	return os.Rename(filepath.Join(dir, filepath.FromSlash(from)), filepath.Join(dir, filepath.FromSlash(to)))
}

// jsonFile writes v as JSON.stringify(v, null, 2) would, with a newline.
func (g *gen) jsonFile(rel string, v any, mtimeMs int64) error {
	b, err := indentJSON(v)
	if err != nil {
		return fmt.Errorf("%s: %w", rel, err)
	}
	return g.file(rel, b, mtimeMs)
}

func indentJSON(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func compactJSON(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// obj is a JSON object that keeps its keys in order (as JavaScript does).
type obj []kv

type kv struct {
	K string
	V any
}

func (o obj) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, f := range o {
		if i > 0 {
			b.WriteByte(',')
		}
		k, err := compactJSON(f.K)
		if err != nil {
			return nil, err
		}
		v, err := compactJSON(f.V)
		if err != nil {
			return nil, err
		}
		b.Write(k)
		b.WriteByte(':')
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// ----- classification (/tmp/spec-kinds.md) -----

// classify is the file class of a written regular file: the kind of the
// one record the file itself is (n 1), or n 0 for a file that is not a
// record itself (one holding records, counted where it is written, or a
// file of a skill record other than its SKILL.md).
func (g *gen) classify(rel string) (Kind, int64) {
	parts := strings.Split(rel, "/")
	base := parts[len(parts)-1]
	switch {
	case rel == "openclaw.json":
		return KindConfig, 1
	case strings.Contains(base, ".migrated"):
		return KindLeftovers, 1
	case rel == "cron/jobs.json" || rel == "cron/jobs-state.json" || rel == "cron/jobs-quarantine.json" || rel == "state/openclaw.sqlite":
		return "", 0
	case len(parts) == 3 && parts[0] == "cron" && parts[1] == "runs" && strings.HasSuffix(base, ".jsonl"):
		return "", 0
	case len(parts) == 4 && parts[0] == "agents" && parts[2] == "sessions":
		switch {
		case base == "sessions.json":
			return "", 0
		case strings.HasSuffix(base, ".jsonl"):
			return KindTranscripts, 1
		case strings.Contains(base, ".jsonl.reset.") || strings.Contains(base, ".jsonl.deleted."):
			return KindTranscriptArchives, 1
		case strings.HasPrefix(base, "sessions.json.bak."):
			return KindSystem, 1
		}
	case len(parts) == 4 && parts[0] == "agents" && parts[2] == "agent":
		switch base {
		case "auth-profiles.json":
			return "", 0
		case "auth-state.json", "models.json":
			return KindSystem, 1
		}
	}
	// Skills: the deepest skill dir holding the file.
	for _, d := range g.skillDirs {
		if rest, ok := strings.CutPrefix(rel, d+"/"); ok {
			if rest == ".clawhub/origin.json" {
				return KindSkillInstalls, 1
			}
			if strings.HasPrefix(rest, ".clawhub/") {
				break
			}
			if rest == "SKILL.md" {
				return KindSkills, 1
			}
			return "", 0
		}
	}
	switch {
	case parts[0] == "credentials" && len(parts) > 1:
		return KindChannelCredentials, 1
	case len(parts) == 1 && slices.Contains([]string{".env", "secrets.json", "exec-approvals.json", "restart-sentinel.json"}, base):
		return KindSystem, 1
	case rel == "cron/jobs.json.bak":
		return KindSystem, 1
	case len(parts) == 2 && (parts[0] == "devices" || parts[0] == "nodes" || parts[0] == "identity") && strings.HasSuffix(base, ".json"):
		return KindSystem, 1
	case len(parts) == 2 && parts[0] == "workspace" && strings.HasSuffix(base, ".md"):
		return KindSystem, 1
	case len(parts) == 3 && parts[0] == "workspace" && parts[1] == "memory" && strings.HasSuffix(base, ".md"):
		return KindSystem, 1
	case rel == "workspace/.clawhub/lock.json":
		return KindSystem, 1
	case len(parts) == 2 && parts[0] == "memory" && strings.HasSuffix(base, ".sqlite"):
		return KindSystem, 1
	case parts[0] == "logs" && len(parts) > 1:
		return KindSystem, 1
	case rel == "state/openclaw.sqlite-wal" || rel == "state/openclaw.sqlite-shm":
		return KindSystem, 1
	}
	return KindUnknown, 1
}

// count fills the Truth's counts, files and unknown list.
func (g *gen) count() {
	t := g.truth
	t.Counts = map[string]int64{}
	for _, k := range Kinds {
		t.Counts[string(k)] = g.records[k]
	}
	// Deepest skill dirs first, so that a nested skill wins over a group.
	slices.SortFunc(g.skillDirs, func(a, b string) int { return len(b) - len(a) })
	for _, rel := range sortedKeys(g.sizes) {
		t.Files++
		t.Bytes += g.sizes[rel]
		k, n := g.classify(rel)
		if n == 0 {
			continue
		}
		t.Counts[string(k)] += n
		if k == KindUnknown {
			t.Unknown = append(t.Unknown, rel)
		}
	}
	for _, j := range g.jobs {
		t.Jobs = append(t.Jobs, j.truth())
		switch {
		case j.state.RunningAtMs != 0:
			t.Running = j.id
		case j.role == roleDoneOnce:
			t.CompletedOneShots = append(t.CompletedOneShots, j.id)
		case j.role == rolePendingOnce:
			t.PendingOneShots = append(t.PendingOneShots, j.id)
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// ----- randomness -----

// rng is splitmix64: small, fast and, unlike math/rand's helpers, fixed
// forever, so that a seed gives the same tree on every Go release.
type rng struct{ s uint64 }

// newRng is the stream of one part of the generation: parts draw from
// streams of their own, so that one part's changes leave the others be.
func newRng(seed uint64, label string) *rng {
	h := uint64(14695981039346656037)
	for i := 0; i < len(label); i++ {
		h ^= uint64(label[i])
		h *= 1099511628211
	}
	r := &rng{s: seed*0x9e3779b97f4a7c15 ^ h}
	r.u64()
	return r
}

func (r *rng) u64() uint64 {
	r.s += 0x9e3779b97f4a7c15
	z := r.s
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// intn is uniform in [0, n).
func (r *rng) intn(n int) int {
	if n <= 0 {
		return 0
	}
	hi, _ := bits.Mul64(r.u64(), uint64(n))
	return int(hi)
}

// between is uniform in [lo, hi).
func (r *rng) between(lo, hi int64) int64 {
	if hi <= lo {
		return lo
	}
	h, _ := bits.Mul64(r.u64(), uint64(hi-lo))
	return lo + int64(h)
}

// pct is true with probability p percent.
func (r *rng) pct(p int) bool { return r.intn(100) < p }

func pick[T any](r *rng, xs []T) T { return xs[r.intn(len(xs))] }

func (r *rng) bytes(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.u64())
	}
	return b
}

func (r *rng) uuid() string {
	b := r.bytes(16)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b)
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

const (
	alnum  = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	b64url = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	hexLow = "0123456789abcdef"
)

func (r *rng) str(alphabet string, n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = alphabet[r.intn(len(alphabet))]
	}
	return string(b)
}

// ----- time -----

const (
	second = int64(1000)
	minute = 60 * second
	hour   = 60 * minute
	day    = 24 * hour
)

// iso is JavaScript's Date.prototype.toISOString.
func iso(ms int64) string {
	return time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z")
}

func appendISO(b []byte, ms int64) []byte {
	return time.UnixMilli(ms).UTC().AppendFormat(b, "2006-01-02T15:04:05.000Z")
}

// fileStamp is the timestamp of archived transcripts' names: toISOString
// with its colons made dashes.
func fileStamp(ms int64) string { return strings.ReplaceAll(iso(ms), ":", "-") }

// ----- openclaw.json -----

// configSecrets are the secret values of openclaw.json.
type configSecrets struct {
	botToken, hooksToken, gatewayToken, weatherKey, githubToken, googleSecret string
}

func (g *gen) writeConfig() error {
	r := newRng(g.o.Seed, "config")
	s := configSecrets{
		botToken:     g.secret(strconv.FormatInt(r.between(6_000_000_000, 8_000_000_000), 10) + ":AA" + r.str(b64url, 33)),
		hooksToken:   g.secret(r.str(hexLow, 48)),
		gatewayToken: g.secret(r.str(hexLow, 48)),
		weatherKey:   g.secret(r.str(hexLow, 32)),
		githubToken:  g.secret("ghp_" + r.str(alnum, 36)),
		googleSecret: g.secret("GOCSPX-" + r.str(b64url, 28)),
	}
	touched := g.nowMs - 2*day - 3*hour - 17*minute - 4211
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w("// OpenClaw configuration (JSON5). Comments, unquoted keys and trailing\n")
	w("// commas are fine; `openclaw config set` keeps what it can of them.\n")
	w("{\n")
	w("  meta: {\n    lastTouchedVersion: %q,\n    lastTouchedAt: %q,\n  },\n", g.rel, iso(touched))
	w("  wizard: {\n    lastRunAt: %q,\n    lastRunVersion: %q,\n    lastRunCommand: \"onboard\",\n    lastRunMode: \"local\",\n  },\n", iso(touched-41*day), Releases[1])
	w("  agents: {\n    defaults: {\n")
	w("      workspace: \"~/.openclaw/workspace\",\n")
	w("      model: { primary: \"anthropic/claude-opus-4-6\", fallbacks: [\"openai/gpt-5.2\"] },\n")
	w("      thinkingDefault: \"low\",\n      heartbeat: { every: \"30m\", target: \"last\" },\n")
	w("      maxConcurrent: 4,\n    },\n")
	w("    list: [\n")
	w("      { id: \"main\", default: true, name: \"Claw\", workspace: \"~/.openclaw/workspace\" },\n")
	w("      {\n        id: \"ops\",\n        name: \"Ops\",\n        // the ops agent runs the infrastructure checks\n")
	w("        model: { primary: \"openai/gpt-5.2\" },\n        tools: { profile: \"coding\" },\n      },\n")
	w("    ],\n  },\n")
	w("  bindings: [\n    { agentId: \"ops\", match: { channel: \"discord\", peer: { kind: \"channel\", id: \"1188201456302829608\" } } },\n  ],\n")
	w("  session: {\n    dmScope: \"per-channel-peer\",\n    reset: { mode: \"daily\", atHour: 4 },\n  },\n")
	w("  channels: {\n    telegram: {\n      enabled: true,\n      botToken: %q, // from @BotFather\n", s.botToken)
	w("      dmPolicy: \"pairing\",\n      groups: { \"*\": { requireMention: true } },\n      streamMode: \"partial\",\n    },\n")
	w("    whatsapp: {\n      dmPolicy: \"allowlist\",\n      allowFrom: [\"+15551234567\", \"+4915112345678\"],\n    },\n")
	w("    discord: { enabled: true, token: { source: \"env\", provider: \"default\", id: \"DISCORD_BOT_TOKEN\" } },\n  },\n")
	w("  gateway: {\n    port: 18789,\n    mode: \"local\",\n    bind: \"loopback\",\n    auth: { mode: \"token\", token: %q },\n  },\n", s.gatewayToken)
	w("  hooks: {\n    enabled: true,\n    path: \"/hooks\",\n    token: %q,\n", s.hooksToken)
	w("    mappings: [{ match: { path: \"gmail\" }, action: \"agent\", name: \"Gmail\", sessionKey: \"hook:gmail:{{messages[0].id}}\" }],\n  },\n")
	w("  skills: {\n    load: { watch: true },\n    entries: {\n")
	w("      \"weather-brief\": { enabled: true, apiKey: %q },\n", s.weatherKey)
	w("      \"git-digest\": {\n        enabled: true,\n        env: { GITHUB_TOKEN: %q },\n      },\n", s.githubToken)
	w("      \"calendar-sync\": { env: { GOOGLE_CLIENT_SECRET: %q }, config: { calendars: [\"primary\", \"family\"] } },\n", s.googleSecret)
	w("      \"PDF-Tools\": { enabled: false },\n    },\n  },\n")
	w("  tools: {\n    exec: { security: \"allowlist\", ask: \"on-miss\" },\n    web: { search: { provider: \"brave\" } },\n  },\n")
	w("  /* The cron store stays at its default, ~/.openclaw/cron/jobs.json. */\n")
	w("  cron: {\n    enabled: true,\n    maxConcurrentRuns: 2,\n    sessionRetention: \"24h\",\n    runLog: { maxBytes: 2000000, keepLines: 2000 },\n  },\n")
	w("  logging: { level: \"info\", consoleStyle: \"pretty\" },\n")
	w("}\n")
	return g.file("openclaw.json", []byte(b.String()), touched)
}

// ----- auth -----

func (g *gen) writeAuth() error {
	r := newRng(g.o.Seed, "auth")
	for _, agent := range []string{"main", "ops"} {
		dir := "agents/" + agent + "/agent/"
		var profiles obj
		if agent == "main" {
			claims := base64.RawURLEncoding.EncodeToString([]byte(`{"sub":"auth0|` + r.str(alnum, 24) + `","exp":` + strconv.FormatInt((g.nowMs+9*day)/1000, 10) + `}`))
			access := g.secret("eyJhbGciOiJSUzI1NiIsImtpZCI6IjE5MzQ0ZTY1In0." + claims + "." + r.str(b64url, 342))
			profiles = obj{
				{"anthropic:default", obj{{"type", "api_key"}, {"provider", "anthropic"}, {"key", g.secret("sk-ant-api03-" + r.str(alnum, 40))}}},
				{"openai:codex", obj{{"type", "oauth"}, {"provider", "openai"}, {"access", access},
					{"refresh", g.secret("rt_" + r.str(b64url, 43) + "." + r.str(b64url, 43))}, {"expires", g.nowMs + 9*day},
					{"email", "sam.ortega@example.com"}, {"accountId", r.uuid()}}},
				{"github:copilot", obj{{"type", "token"}, {"provider", "github"}, {"token", g.secret("ghu_" + r.str(alnum, 36))}, {"expires", g.nowMs + 27*day}}},
				{"openai:default", obj{{"type", "api_key"}, {"provider", "openai"}, {"keyRef", obj{{"source", "env"}, {"provider", "default"}, {"id", "OPENAI_API_KEY"}}}}},
			}
		} else {
			profiles = obj{
				{"anthropic:ops", obj{{"type", "api_key"}, {"provider", "anthropic"}, {"key", g.secret("sk-ant-api03-" + r.str(alnum, 40))}}},
				{"openai:default", obj{{"type", "api_key"}, {"provider", "openai"}, {"keyRef", obj{{"source", "env"}, {"provider", "default"}, {"id", "OPENAI_API_KEY"}}}}},
			}
		}
		g.records[KindAuthProfiles] += int64(len(profiles))
		t := g.nowMs - 6*day - 2*hour
		if err := g.jsonFile(dir+"auth-profiles.json", obj{{"version", 1}, {"profiles", profiles}}, t); err != nil {
			return err
		}
		first := profiles[0].K
		provider, _, _ := strings.Cut(first, ":")
		state := obj{{"version", 1},
			{"order", obj{{provider, []string{first}}}},
			{"lastGood", obj{{provider, first}}},
			{"usageStats", obj{{first, obj{{"lastUsed", g.nowMs - 11*minute}, {"errorCount", 0}}}}}}
		if err := g.jsonFile(dir+"auth-state.json", state, g.nowMs-11*minute); err != nil {
			return err
		}
		models := obj{{"providers", obj{
			{"anthropic", obj{{"baseUrl", "https://api.anthropic.com"}, {"api", "anthropic-messages"}, {"models", []obj{
				{{"id", "claude-opus-4-6"}, {"name", "Claude Opus 4.6"}, {"reasoning", true}, {"contextWindow", 200000}, {"maxTokens", 32000}},
				{{"id", "claude-sonnet-4-6"}, {"name", "Claude Sonnet 4.6"}, {"reasoning", true}, {"contextWindow", 200000}, {"maxTokens", 64000}},
			}}}},
			{"openai", obj{{"baseUrl", "https://api.openai.com/v1"}, {"api", "openai-responses"}, {"models", []obj{
				{{"id", "gpt-5.2"}, {"name", "GPT-5.2"}, {"reasoning", true}, {"contextWindow", 400000}, {"maxTokens", 128000}},
			}}}},
		}}}
		if err := g.jsonFile(dir+"models.json", models, t); err != nil {
			return err
		}
	}
	return nil
}

// ----- credentials, devices, identity, .env -----

func (g *gen) writeCredentials() error {
	r := newRng(g.o.Seed, "credentials")
	key := func(private bool) obj {
		v := base64.StdEncoding.EncodeToString(r.bytes(32))
		if private {
			v = g.secret(v)
		}
		return obj{{"type", "Buffer"}, {"data", v}}
	}
	pair := func() obj { return obj{{"private", key(true)}, {"public", key(false)}} }
	creds := obj{
		{"noiseKey", pair()},
		{"pairingEphemeralKeyPair", pair()},
		{"signedIdentityKey", pair()},
		{"signedPreKey", obj{{"keyPair", pair()}, {"signature", key(false)}, {"keyId", 1}}},
		{"registrationId", r.intn(16380) + 1},
		{"advSecretKey", g.secret(base64.StdEncoding.EncodeToString(r.bytes(32)))},
		{"nextPreKeyId", 31}, {"firstUnuploadedPreKeyId", 31},
		{"account", obj{{"details", base64.StdEncoding.EncodeToString(r.bytes(24))}, {"accountSignatureKey", base64.StdEncoding.EncodeToString(r.bytes(32))}}},
		{"me", obj{{"id", "15551234567:17@s.whatsapp.net"}, {"name", "Sam"}, {"lid", "204511029384512:17@lid"}}},
		{"platform", "smba"},
		{"registered", true},
	}
	t := g.nowMs - 19*day
	if err := g.jsonFile("credentials/whatsapp/default/creds.json", creds, g.nowMs-3*hour); err != nil {
		return err
	}
	code := g.secret(r.str("ABCDEFGHJKLMNPQRSTUVWXYZ23456789", 8))
	pairing := obj{{"version", 1}, {"requests", []obj{{
		{"id", "7712094388"}, {"code", code}, {"createdAt", iso(g.nowMs - 25*minute)}, {"lastSeenAt", iso(g.nowMs - 24*minute)},
		{"meta", obj{{"username", "jordan_k"}, {"firstName", "Jordan"}}},
	}}}}
	if err := g.jsonFile("credentials/telegram-pairing.json", pairing, g.nowMs-24*minute); err != nil {
		return err
	}
	if err := g.jsonFile("credentials/telegram-allowFrom.json", obj{{"version", 1}, {"allowFrom", []string{"5120938471", "6630184402"}}}, t); err != nil {
		return err
	}

	// devices/paired.json: the paired operator devices and their tokens.
	var devices obj
	for i, d := range []struct{ name, platform, client string }{{"Sam's MacBook Pro", "macos", "openclaw-macos"}, {"iPhone", "ios", "openclaw-ios"}} {
		pub := base64.RawURLEncoding.EncodeToString(r.bytes(32))
		sum := sha256.Sum256([]byte(pub))
		id := hex.EncodeToString(sum[:])
		at := g.nowMs - int64(40-i*12)*day
		devices = append(devices, kv{id, obj{
			{"deviceId", id}, {"publicKey", pub}, {"displayName", d.name}, {"platform", d.platform},
			{"clientId", d.client}, {"clientMode", "ui"}, {"role", "operator"},
			{"scopes", []string{"operator.read", "operator.write", "operator.approvals"}},
			{"tokens", obj{{"operator", obj{{"token", g.secret(r.str(b64url, 43))}, {"role", "operator"},
				{"scopes", []string{"operator.read", "operator.write", "operator.approvals"}}, {"createdAtMs", at}}}}},
			{"createdAtMs", at}, {"approvedAtMs", at + 41*second},
		}})
	}
	if err := g.jsonFile("devices/paired.json", devices, g.nowMs-28*day); err != nil {
		return err
	}

	// identity/device.json: the gateway's Ed25519 device key.
	priv := ed25519.NewKeyFromSeed(r.bytes(ed25519.SeedSize))
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return err
	}
	pubDer, err := x509.MarshalPKIXPublicKey(priv.Public())
	if err != nil {
		return err
	}
	// The secret is the key's base64 body: it is what appears verbatim in
	// the file (the PEM's newlines are JSON-escaped there).
	body := g.secret(base64.StdEncoding.EncodeToString(der))
	privPEM := string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
	if !strings.Contains(privPEM, body) {
		return errors.New("device key PEM body spans lines")
	}
	pubPEM := string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDer}))
	sum := sha256.Sum256(priv.Public().(ed25519.PublicKey))
	ident := obj{{"version", 1}, {"deviceId", hex.EncodeToString(sum[:])}, {"publicKeyPem", pubPEM}, {"privateKeyPem", privPEM}, {"createdAtMs", g.nowMs - 52*day}}
	if err := g.jsonFile("identity/device.json", ident, g.nowMs-52*day); err != nil {
		return err
	}

	env := fmt.Sprintf("# Written by `openclaw onboard`; the gateway loads it at start.\n"+
		"OPENAI_API_KEY=%s\nDISCORD_BOT_TOKEN=%s\nBRAVE_API_KEY=%s\n\n# voice\nELEVENLABS_API_KEY=%s\nOPENROUTER_API_KEY=%s\n",
		g.secret("sk-proj-"+r.str(b64url, 48)),
		g.secret("MT"+r.str(alnum, 24)+"."+r.str(b64url, 6)+"."+r.str(b64url, 38)),
		g.secret("BSA"+r.str(alnum, 28)),
		g.secret("sk_"+r.str(hexLow, 48)),
		g.secret("sk-or-v1-"+r.str(hexLow, 64)))
	return g.file(".env", []byte(env), g.nowMs-52*day)
}

// ----- skills -----

type skillFile struct {
	rel     string
	content string
}

func (g *gen) writeSkills() error {
	installed := iso(g.nowMs - 33*day)
	ws := "workspace/skills/"
	origin := func(slug, version string) string {
		b, _ := indentJSON(obj{{"version", 1}, {"registry", "https://clawhub.ai"}, {"slug", slug}, {"installedVersion", version}, {"installedAt", installed}})
		return string(b)
	}
	files := []skillFile{
		{ws + "weather-brief/SKILL.md", skillMD("weather-brief", "Morning weather briefing for the user's saved locations, with rain and wind alerts.",
			`{"openclaw":{"emoji":"🌦️","homepage":"https://openweathermap.org/api","requires":{"bins":["curl","jq"],"env":["OPENWEATHER_API_KEY"]},"primaryEnv":"OPENWEATHER_API_KEY"}}`,
			"# Weather brief\n\nRun `scripts/run.sh <city>` and summarise the next 12 hours in three lines.\nMention rain above 60% and wind above 40 km/h first.\n")},
		{ws + "weather-brief/scripts/run.sh", "#!/bin/sh\nset -eu\ncity=\"${1:-Berlin}\"\ncurl -fsS \"https://api.openweathermap.org/data/2.5/forecast?q=${city}&units=metric&appid=${OPENWEATHER_API_KEY}\" | jq '.list[:4]'\n"},
		{ws + "weather-brief/references/units.md", "# Units\n\nTemperatures in °C, wind in km/h, precipitation in mm.\n"},
		{ws + "weather-brief/.clawhub/origin.json", origin("weather-brief", "1.3.0")},
		{ws + "git-digest/SKILL.md", skillMD("git-digest", "Summarise yesterday's commits and open pull requests across the user's repositories.",
			`{"openclaw":{"emoji":"🐙","requires":{"bins":["git","gh"],"env":["GITHUB_TOKEN"]},"primaryEnv":"GITHUB_TOKEN","install":[{"id":"gh","kind":"brew","formula":"gh","bins":["gh"],"label":"Install GitHub CLI (brew)"}]}}`,
			"# Git digest\n\nUse `gh pr list --author @me` and `git log --since=yesterday` in each repo under ~/src.\n")},
		{ws + "calendar-sync/SKILL.md", skillMD("calendar-sync", "Read and create Google Calendar events for the user's calendars.",
			`{"openclaw":{"emoji":"📅","requires":{"env":["GOOGLE_CLIENT_SECRET"],"config":["skills.entries.calendar-sync.config.calendars"]},"primaryEnv":"GOOGLE_CLIENT_SECRET"}}`,
			"# Calendar sync\n\nList today's events first; never delete an event without asking.\n")},
		{ws + "devops/k8s-status/SKILL.md", skillMD("k8s-status", "Check the health of the home-lab Kubernetes cluster and report failing pods.",
			`{"openclaw":{"emoji":"☸️","os":["linux","darwin"],"requires":{"bins":["kubectl"]}}}`,
			"# k8s status\n\n`kubectl get pods -A --field-selector=status.phase!=Running` and summarise.\n")},
		{ws + "homeassistant/SKILL.md", skillMD("homeassistant", "Control Home Assistant lights, scenes and climate through its REST API.",
			`{"clawdbot":{"emoji":"🏠","requires":{"env":["HA_URL","HA_TOKEN"]},"primaryEnv":"HA_TOKEN"}}`,
			"# Home Assistant\n\nPOST to `$HA_URL/api/services/<domain>/<service>` with the bearer token.\n")},
		{ws + "PDF-Tools/SKILL.md", skillMD("PDF-Tools", "Merge, split and OCR PDF files.",
			`{"openclaw":{"emoji":"📄","requires":{"anyBins":["qpdf","pdftk"]}}}`,
			"# PDF tools\n\nUse qpdf to merge and split; ocrmypdf for scans.\n")},
		{"skills/summarize/SKILL.md", skillMD("summarize", "Summarize URLs, podcasts and local files.",
			`{"openclaw":{"emoji":"🧾","requires":{"bins":["summarize"]},"install":[{"id":"brew","kind":"brew","formula":"steipete/tap/summarize","bins":["summarize"]}]}}`,
			"# Summarize\n\n`summarize <url-or-path> --length medium`.\n")},
		{"skills/summarize/.clawhub/origin.json", origin("summarize", "0.9.2")},
		{"skills/github/SKILL.md", skillMD("github", "Interact with GitHub using the gh CLI: issues, pull requests, CI runs.",
			`{"openclaw":{"emoji":"🐙","requires":{"bins":["gh"]}}}`,
			"# GitHub\n\nPrefer `gh` over the API. Check CI with `gh run list`.\n")},
		{"skills/github/scripts/ci-status.sh", "#!/bin/sh\nset -eu\ngh run list --limit 5 --json status,conclusion,name\n"},
		{"skills/github/.clawhub/origin.json", origin("github", "2.1.0")},
	}
	for _, f := range files {
		if err := g.file(f.rel, []byte(f.content), g.nowMs-33*day); err != nil {
			return err
		}
	}
	lock := obj{{"version", 1}, {"skills", obj{{"weather-brief", obj{{"version", "1.3.0"}, {"installedAt", installed}}}}}}
	return g.jsonFile("workspace/.clawhub/lock.json", lock, g.nowMs-33*day)
}

func skillMD(name, desc, metadata, body string) string {
	return "---\nname: " + name + "\ndescription: " + desc + "\nmetadata: " + metadata + "\n---\n\n" + body
}

// ----- system and unknown files -----

func (g *gen) writeSystemFiles() error {
	approvals := obj{{"version", 1},
		{"defaults", obj{{"security", "allowlist"}, {"ask", "on-miss"}, {"askFallback", "deny"}}},
		{"agents", obj{{"main", obj{{"allowlist", []obj{
			{{"id", "b1c2d3e4"}, {"pattern", "/usr/bin/git"}, {"lastUsedAt", g.nowMs - 3*hour}, {"lastUsedCommand", "git status"}},
			{{"id", "f5a6b7c8"}, {"pattern", "/opt/homebrew/bin/gh"}, {"lastUsedAt", g.nowMs - 20*hour}},
		}}}}}},
	}
	if err := g.jsonFile("exec-approvals.json", approvals, g.nowMs-3*hour); err != nil {
		return err
	}
	md := map[string]string{
		"workspace/AGENTS.md": "# AGENTS.md\n\nThis folder is home. Treat it that way.\n\n## Every session\n\n1. Read `SOUL.md`: this is who you are.\n2. Read `memory/` for today and yesterday.\n\n## Safety\n\n- Don't run destructive commands without asking.\n- `trash` > `rm`.\n",
		"workspace/SOUL.md":   "# SOUL.md\n\nYou are Claw: direct, warm, a little dry. Have opinions. Skip the filler.\nPrivate things stay private.\n",
		"workspace/memory/" + time.UnixMilli(g.nowMs-day).UTC().Format("2006-01-02") + ".md": "# " + time.UnixMilli(g.nowMs-day).UTC().Format("2006-01-02") +
			"\n\n- Sam moved the dentist appointment to Thursday 10:30.\n- The nightly backup check failed twice (NAS offline); Sam rebooted it.\n- Prefers the digest before 7:30.\n",
	}
	for _, rel := range sortedKeys(md) {
		if err := g.file(rel, []byte(md[rel]), g.nowMs-day); err != nil {
			return err
		}
	}
	// logs/gateway.log
	r := newRng(g.o.Seed, "log")
	var b strings.Builder
	ms := g.nowMs - 2*hour
	subsystems := []string{"gateway", "telegram", "cron", "agent/embedded", "ws", "whatsapp"}
	for i := range 240 {
		ms += r.between(2*second, 50*second)
		sub := subsystems[r.intn(len(subsystems))]
		var msg string
		switch sub {
		case "gateway":
			msg = pick(r, []string{"listening on ws://127.0.0.1:18789", "config reloaded (hot)", "heartbeat tick"})
		case "telegram":
			msg = "inbound message chat=" + strconv.Itoa(5120938471+r.intn(9)) + " len=" + strconv.Itoa(r.intn(400)+3)
		case "cron":
			msg = pick(r, []string{"timer armed nextRunAtMs=" + strconv.FormatInt(ms+r.between(minute, hour), 10), "job finished status=ok durationMs=" + strconv.Itoa(r.intn(90000)+800)})
		case "agent/embedded":
			msg = "run done sessionKey=agent:main:main tokens=" + strconv.Itoa(r.intn(9000)+200)
		case "ws":
			msg = "client connected role=operator conn=" + strconv.Itoa(i)
		default:
			msg = "connection open"
		}
		fmt.Fprintf(&b, "%s [%s] info %s\n", iso(ms), sub, msg)
	}
	return g.file("logs/gateway.log", []byte(b.String()), ms)
}

func (g *gen) writeUnknownFiles() error {
	r := newRng(g.o.Seed, "unknown-files")
	cache := append([]byte("WXC1\x00\x01"), r.bytes(4090)...)
	if err := g.file("plugins-data/weather/cache.bin", cache, g.nowMs-40*minute); err != nil {
		return err
	}
	notes := "Notes from the admin (not OpenClaw's):\n\n- NAS backup target moved to /mnt/tank/claw on 2026-10-02.\n- Do not upgrade past the current release until the cron migration issue is fixed.\n"
	return g.file("notes-from-admin.txt", []byte(notes), g.nowMs-49*day)
}
