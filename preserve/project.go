package preserve

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nlx-dev/nlx/schema"
)

// Projections are nlx's reading of an installation: what an import
// creates (held jobs, conversations kept as evidence) and what the
// operator adopts by hand (skills, connections as references). They
// depend on the installation only; where its records go (workspaces,
// connections, a zone for tz-less cron jobs) is the preservation's config,
// applied when planning (Spec).
type Projections struct {
	Jobs          []ProjectedJob          `json:"jobs"`
	Conversations []ProjectedConversation `json:"conversations"`
	Skills        []ProjectedSkill        `json:"skills"`
	Connections   []ProjectedConnection   `json:"connections"`
}

// ProjectedJob is one OpenClaw cron job as an nlx job.
type ProjectedJob struct {
	Name     string `json:"name"`      // the nlx job name, from OpenClaw's
	SourceID string `json:"source_id"` // OpenClaw's job id
	Agent    string `json:"agent"`
	Record   string `json:"record"` // "sha256:..." of the job's canonical record
	// The schedule as nlx writes it; Cron has no Timezone when OpenClaw's
	// job had none (Spec takes the preservation's).
	Schedule     schema.Schedule `json:"schedule"`
	Prompt       string          `json:"prompt"`
	Conversation string          `json:"conversation,omitempty"`
	Enabled      bool            `json:"enabled"` // exactly as it was
	// Completed is a one-time job's completed occurrence (its at, UTC):
	// imported as a succeeded claim, so that it never runs again.
	Completed string `json:"completed,omitempty"`
	// Running is when OpenClaw started a run it never recorded the end of
	// (state.runningAtMs): imported as an unknown claim.
	Running     string   `json:"running,omitempty"`
	LastOutcome string   `json:"last_outcome,omitempty"`
	Unsupported []string `json:"unsupported,omitempty"` // what nlx cannot do of it: it stays held
	Dropped     []string `json:"dropped,omitempty"`     // what nlx does not carry over, and why
}

// ProjectedConversation is one session: its key as an nlx conversation
// key, its transcript kept as evidence.
type ProjectedConversation struct {
	Agent        string `json:"agent"`
	SessionKey   string `json:"session_key"`
	Conversation string `json:"conversation"`
	SessionID    string `json:"session_id"`
	Transcript   string `json:"transcript,omitempty"` // path in the export's raw/
	Entries      int64  `json:"entries"`
}

// ProjectedSkill is one skill package, checked as the Agent Skills format.
type ProjectedSkill struct {
	Dir         string   `json:"dir"` // in the export's raw/
	Name        string   `json:"name"`
	Description string   `json:"description,omitempty"`
	Valid       bool     `json:"valid"`
	Problems    []string `json:"problems,omitempty"`
}

// ProjectedConnection is one auth profile as a reference to where its
// secret stays: never a value.
type ProjectedConnection struct {
	Agent      string   `json:"agent"`
	Profile    string   `json:"profile"`
	Provider   string   `json:"provider"`
	Type       string   `json:"type"` // api_key, token, oauth
	References []string `json:"references"`
}

// Spec is the held nlx job the import creates for j under p, and what of
// j keeps it held whatever the release says.
func (j *ProjectedJob) Spec(p *schema.Preservation) (schema.Job, []string) {
	t := p.Target(j.Agent)
	sched := j.Schedule
	unsupported := slices.Clone(j.Unsupported)
	if sched.Cron != "" && sched.Timezone == "" {
		if p.Timezone == "" {
			unsupported = append(unsupported, "cron without a time zone (OpenClaw used the gateway's local zone): set the preservation's timezone")
			sched.Timezone = "UTC" // held either way; the spec stays a valid job
		} else {
			sched.Timezone = p.Timezone
		}
	}
	return schema.Job{
		Workspace:    t.Workspace,
		Connection:   t.Connection,
		Schedule:     sched,
		Conversation: j.Conversation,
		Prompt:       j.Prompt,
		Enabled:      j.Enabled,
		Concurrency:  "skip",
		CatchUp:      "skip",
	}, unsupported
}

// slug makes an nlx name of s: ^[a-z][a-z0-9-]{0,62}$, or "" when s has
// nothing to make it of.
func slug(s string, max int) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(s) {
		switch {
		case r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
			if dash && b.Len() > 0 {
				b.WriteByte('-')
			}
			dash = false
			b.WriteRune(r)
		default:
			dash = true
		}
	}
	out := b.String()
	if out != "" && (out[0] < 'a' || out[0] > 'z') {
		out = "n-" + out
	}
	if len(out) > max {
		out = strings.TrimRight(out[:max], "-")
	}
	return out
}

func shortHash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:4])
}

// names gives each wanted name a unique nlx name: the slug, or the slug
// and a short hash of its key when taken or too long.
type names map[string]bool

func (n names) take(want, key, fallback string) string {
	s := slug(want, 54)
	if s == "" {
		s = fallback
	}
	if n[s] {
		s = s + "-" + shortHash(key)
	}
	n[s] = true
	return s
}

func str(m map[string]any, k string) string {
	v, _ := m[k].(string)
	return v
}

func num(m map[string]any, k string) (int64, bool) {
	switch v := m[k].(type) {
	case json.Number:
		n, err := v.Int64()
		if err != nil {
			f, ferr := v.Float64()
			return int64(f), ferr == nil
		}
		return n, true
	case float64:
		return int64(v), true
	}
	return 0, false
}

func msInstant(ms int64) string {
	return time.UnixMilli(ms).UTC().Format(time.RFC3339Nano)
}

// every writes OpenClaw's everyMs as an nlx duration.
func every(ms int64) string {
	switch {
	case ms%3600000 == 0:
		return strconv.FormatInt(ms/3600000, 10) + "h"
	case ms%60000 == 0:
		return strconv.FormatInt(ms/60000, 10) + "m"
	case ms%1000 == 0:
		return strconv.FormatInt(ms/1000, 10) + "s"
	}
	return strconv.FormatInt(ms, 10) + "ms"
}

// cronSession is the job id of a cron job's own session key,
// agent:<a>:cron:<jobId> (not a per-run one).
func cronSession(key string) (agent, job string, ok bool) {
	parts := strings.Split(key, ":")
	if len(parts) == 4 && parts[0] == "agent" && parts[2] == "cron" {
		return parts[1], parts[3], true
	}
	return "", "", false
}

// project makes the projections of what was scanned: independent of any
// preservation's config (Spec and Export.Import place them).
func project(f *facts) *Projections {
	out := &Projections{Jobs: []ProjectedJob{}, Conversations: []ProjectedConversation{}, Skills: []ProjectedSkill{}, Connections: []ProjectedConnection{}}
	jobNames := names{}
	byID := map[string]string{}
	for _, jf := range f.Jobs {
		j := projectJob(jf, f.LastRuns[jf.ID])
		j.Name = jobNames.take(str(jf.Def, "name"), jf.ID, "job-"+shortHash(jf.ID))
		byID[jf.ID] = j.Name
		out.Jobs = append(out.Jobs, j)
	}
	convNames := names{}
	for name := range jobNames {
		convNames[name] = true // a cron job's own session is its job's conversation
	}
	for _, s := range f.Sessions {
		c := ProjectedConversation{Agent: s.Agent, SessionKey: s.Key, SessionID: s.SessionID}
		if _, job, ok := cronSession(s.Key); ok && byID[job] != "" {
			c.Conversation = byID[job]
		} else {
			rest := s.Key
			if strings.HasPrefix(rest, "agent:"+s.Agent+":") {
				rest = strings.TrimPrefix(rest, "agent:"+s.Agent+":")
			}
			c.Conversation = convNames.take(s.Agent+"-"+rest, s.Agent+"/"+s.Key, "session-"+shortHash(s.Key))
		}
		file := s.File
		if file == "" && s.SessionID != "" {
			file = s.SessionID + ".jsonl"
		}
		if file != "" {
			rel := path.Join("agents", s.Agent, "sessions", path.Base(file))
			if n, ok := f.Entries[rel]; ok {
				c.Transcript, c.Entries = rel, n
			}
		}
		out.Conversations = append(out.Conversations, c)
	}
	// Jobs targeting a session continue its conversation.
	sessionConv := map[string]string{}
	for _, c := range out.Conversations {
		sessionConv[c.SessionID] = c.Conversation
	}
	for i := range out.Jobs {
		if id, ok := strings.CutPrefix(out.Jobs[i].Conversation, "session:"); ok {
			if conv := sessionConv[id]; conv != "" {
				out.Jobs[i].Conversation = conv
			} else {
				out.Jobs[i].Unsupported = append(out.Jobs[i].Unsupported, fmt.Sprintf("sessionTarget session:%s names no session of the installation", id))
				out.Jobs[i].Conversation = ""
			}
		}
	}
	for _, s := range f.Skills {
		out.Skills = append(out.Skills, ProjectedSkill{Dir: s.Dir, Name: s.Name, Description: s.Description, Valid: len(s.Problems) == 0, Problems: s.Problems})
	}
	for _, p := range f.Profiles {
		refs := p.Refs
		if refs == nil {
			refs = []string{}
		}
		out.Connections = append(out.Connections, ProjectedConnection{Agent: p.Agent, Profile: p.ID, Provider: p.Provider, Type: p.Type, References: refs})
	}
	return out
}

// projectJob reads one cron job (docs/preservation.md lists every field
// relied on).
func projectJob(jf jobFact, lastRun string) ProjectedJob {
	d, st := jf.Def, jf.State
	if st == nil {
		st = map[string]any{}
	}
	j := ProjectedJob{SourceID: jf.ID, Agent: str(d, "agentId"), Record: "sha256:" + hex.EncodeToString(jf.Record[:])}
	if j.Agent == "" {
		j.Agent = "main"
	}
	if e, ok := d["enabled"].(bool); ok {
		j.Enabled = e
	} else {
		j.Enabled = true // OpenClaw's default
	}
	sched, _ := d["schedule"].(map[string]any)
	if sched == nil {
		sched = map[string]any{}
	}
	kind := str(sched, "kind")
	switch kind {
	case "at":
		at := str(sched, "at")
		if ms, ok := num(sched, "atMs"); ok && at == "" {
			at = msInstant(ms)
		}
		t, err := time.Parse(time.RFC3339Nano, at)
		if err != nil {
			j.Unsupported = append(j.Unsupported, fmt.Sprintf("at %q is not an RFC 3339 instant", at))
			j.Schedule.At = "1970-01-01T00:00:00Z"
		} else {
			j.Schedule.At = t.UTC().Format(time.RFC3339)
			if t.Nanosecond() != 0 {
				j.Dropped = append(j.Dropped, "the fraction of a second of at: nlx schedules whole seconds")
			}
		}
	case "every":
		ms, ok := num(sched, "everyMs")
		if !ok || ms <= 0 {
			j.Unsupported = append(j.Unsupported, "every without a positive everyMs")
			ms = 3600000
		}
		j.Schedule.Every = every(ms)
		if _, ok := sched["anchorMs"]; ok {
			j.Dropped = append(j.Dropped, "anchorMs: nlx aligns every to the Unix epoch, so occurrences may shift within the interval")
		}
	case "cron":
		expr := str(sched, "expr")
		if expr == "" {
			expr = str(sched, "cron") // the legacy shape
		}
		j.Schedule.Cron, j.Schedule.Timezone = expr, str(sched, "tz")
		if _, err := schema.ParseCron(expr); err != nil {
			j.Unsupported = append(j.Unsupported, fmt.Sprintf("cron %q: %v", expr, err))
			j.Schedule.Cron = "0 0 1 1 *"
		}
		if _, ok := sched["staggerMs"]; ok {
			j.Dropped = append(j.Dropped, "staggerMs: nlx runs at the scheduled minute")
		}
	default:
		j.Unsupported = append(j.Unsupported, fmt.Sprintf("schedule kind %q: nlx schedules at, every and cron only", kind))
		j.Schedule.At = "1970-01-01T00:00:00Z"
	}
	payload, _ := d["payload"].(map[string]any)
	if payload == nil {
		payload = map[string]any{}
	}
	switch pk := str(payload, "kind"); pk {
	case "agentTurn":
		j.Prompt = str(payload, "message")
		for _, f := range []string{"model", "fallbacks", "thinking", "timeoutSeconds", "toolsAllow", "lightContext"} {
			if _, ok := payload[f]; ok {
				j.Dropped = append(j.Dropped, "payload."+f+": the job's connection and provider decide")
			}
		}
	case "systemEvent":
		j.Prompt = str(payload, "text")
		j.Unsupported = append(j.Unsupported, "payload systemEvent injects an event into the main session: nlx runs agent turns only")
	default:
		if m := str(d, "message"); m != "" && pk == "" {
			j.Prompt = m // the legacy top-level message
		} else {
			j.Unsupported = append(j.Unsupported, fmt.Sprintf("payload kind %q: nlx runs agent turns only", pk))
		}
	}
	if strings.TrimSpace(j.Prompt) == "" {
		j.Unsupported = append(j.Unsupported, "an empty prompt")
		j.Prompt = "(empty in OpenClaw)"
	}
	switch target := str(d, "sessionTarget"); {
	case target == "" || target == "isolated":
	case strings.HasPrefix(target, "session:"):
		j.Conversation = target // resolved to the session's conversation by project
	default:
		j.Unsupported = append(j.Unsupported, fmt.Sprintf("sessionTarget %q runs in the agent's live chat session: nlx runs each job in a conversation of its own", target))
	}
	if del, ok := d["delivery"].(map[string]any); ok && str(del, "mode") != "" && str(del, "mode") != "none" {
		j.Dropped = append(j.Dropped, "delivery "+str(del, "mode")+": nlx sends no notifications; the turn's result is recorded")
	}
	if fa, ok := d["failureAlert"]; ok && fa != false {
		j.Dropped = append(j.Dropped, "failureAlert: nlx sends no notifications")
	}
	if d["deleteAfterRun"] == true {
		j.Dropped = append(j.Dropped, "deleteAfterRun: nlx keeps a completed one-time job, never running it again")
	}
	if ms, ok := num(st, "runningAtMs"); ok && ms > 0 {
		j.Running = msInstant(ms)
	}
	j.LastOutcome = str(st, "lastRunStatus")
	if j.LastOutcome == "" {
		j.LastOutcome = str(st, "lastStatus")
	}
	if j.LastOutcome == "" {
		j.LastOutcome = lastRun
	}
	if kind == "at" && j.Schedule.At != "" && (j.LastOutcome == "ok" || j.LastOutcome == "skipped") && j.Running == "" {
		// OpenClaw disables a one-shot after an ok or skipped run.
		j.Completed = j.Schedule.At
	}
	return j
}
