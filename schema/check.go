package schema

import (
	"errors"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"

	"cuelang.org/go/cue"

	version "github.com/hashicorp/go-version"
	"github.com/nlx-dev/nlx/internal/reason"
	"github.com/robfig/cron/v3"
)

// cronParser accepts the five-field cron lines of crontab(5) and the
// @daily-style descriptors.
var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// ParseCron reads a job's cron line: five fields or an @daily-style
// descriptor. The zone is the schedule's timezone field, never a TZ= or
// CRON_TZ= prefix in the line (robfig's parser panics on one without a
// space after it), and an interval is written as every, not @every.
func ParseCron(line string) (*cron.SpecSchedule, error) {
	if strings.HasPrefix(line, "TZ=") || strings.HasPrefix(line, "CRON_TZ=") {
		return nil, errors.New("give the zone in timezone, not in the line")
	}
	parsed, err := cronParser.Parse(line)
	if err != nil {
		return nil, err
	}
	spec, ok := parsed.(*cron.SpecSchedule)
	if !ok {
		return nil, errors.New("not a crontab line; an interval is written as every")
	}
	return spec, nil
}

// policyRank orders policies from narrowest to widest.
var policyRank = map[string]int{
	"read_only":          0,
	"workspace_write":    1,
	"trusted_local":      2,
	"danger_full_access": 3,
}

// PolicyWider reports whether policy a grants more than policy b.
func PolicyWider(a, b string) bool { return policyRank[a] > policyRank[b] }

// egressRank orders network egress from narrowest to widest.
var egressRank = map[string]int{"none": 0, "inference": 1, "full": 2}

// EgressWider reports whether egress a reaches more than egress b.
func EgressWider(a, b string) bool { return egressRank[a] > egressRank[b] }

// reSecretName matches environment variable names that carry credentials.
var reSecretName = regexp.MustCompile(`(?i)(secret|token|passw(or)?d|api_?key|private_?key|credential|auth)`)

// checkEnv refuses a credential written as a value into an environment: it
// would end up in the state, in plans and in images. The value is never
// shown.
func (l *loader) checkEnv(env map[string]string, field, name string) {
	give := "give a reference"
	if field == "tools" {
		give = "give it in secrets, as a reference" // a tool's env is passed as written
	}
	for _, k := range slices.Sorted(maps.Keys(env)) {
		if reSecretName.MatchString(k) && !reSecretRef.MatchString(env[k]) {
			l.addAt(at(field, name, "env", k), reason.RawSecretValue,
				"%s looks like a credential; %s (env:NAME, file:PATH or keychain:NAME), never a value; the value is not shown", k, give)
		}
	}
}

// memo runs check once per distinct kind and value: a fleet repeats the same
// few cron lines and zones thousands of times.
func (l *loader) memo(kind, value string, check func() error) error {
	key := kind + "\x00" + value
	if err, ok := l.checked[key]; ok {
		return err
	}
	if l.checked == nil {
		l.checked = map[string]error{}
	}
	err := check()
	l.checked[key] = err
	return err
}

// check runs the rules that need more than one resource or more than CUE can
// say: references, scopes, versions, schedules.
func (l *loader) check(cfg *Config) {
	l.checkActors(cfg.Host)
	for _, name := range slices.Sorted(maps.Keys(cfg.Providers)) {
		p := cfg.Providers[name]
		if _, err := version.NewConstraint(p.Version); err != nil {
			l.addAt(at("providers", name, "version"), reason.InvalidValue, "version constraint %q: %v", p.Version, err)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(cfg.Providers)) {
		l.checkEnv(cfg.Providers[name].Env, "providers", name)
	}
	for _, name := range slices.Sorted(maps.Keys(cfg.Images)) {
		l.checkEnv(cfg.Images[name].Env, "images", name)
		for i := range cfg.Images[name].Layers {
			layer := &cfg.Images[name].Layers[i]
			// Building the layer can fail later (a Go package that does
			// not build): it is positioned at the source field.
			if src := layer.Source(); src != "" {
				layer.Pos = l.pos(at("images", name, "layers", i, src))
			}
			for j, s := range layer.Skills {
				if cfg.Skills[s] == nil {
					l.addAt(at("images", name, "layers", i, "skills", j), reason.DanglingReference, "no skill %q", s)
				}
			}
			if layer.Files != "" {
				if err := checkRelative(layer.Files); err != nil {
					l.addAt(at("images", name, "layers", i, "files"), reason.InvalidValue, "%v", err)
				}
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(cfg.Tools)) {
		l.checkTool(name, cfg.Tools[name])
	}
	for _, name := range slices.Sorted(maps.Keys(cfg.Workspaces)) {
		l.checkWorkspace(cfg, name, cfg.Workspaces[name])
	}
	l.checkImageSkills(cfg)
	for _, name := range slices.Sorted(maps.Keys(cfg.Connections)) {
		c := cfg.Connections[name]
		if cfg.Workspaces[c.Workspace] == nil {
			l.addAt(at("connections", name, "workspace"), reason.DanglingReference, "no workspace %q", c.Workspace)
		}
		if cfg.Providers[c.Provider] == nil {
			l.addAt(at("connections", name, "provider"), reason.DanglingReference, "no provider %q", c.Provider)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(cfg.Skills)) {
		s := cfg.Skills[name]
		if _, err := version.NewSemver(s.Version); err != nil {
			l.addAt(at("skills", name, "version"), reason.InvalidValue, "version %q is not a semantic version: %v", s.Version, err)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(cfg.Jobs)) {
		l.checkJob(cfg, name, cfg.Jobs[name])
	}
	for _, name := range slices.Sorted(maps.Keys(cfg.Preservations)) {
		l.checkPreservation(cfg, name, cfg.Preservations[name])
	}
}

// checkActors refuses identities that would not prove one actor: a key
// that does not parse, or a key or an OS user claimed by two actors.
func (l *loader) checkActors(h *Host) {
	if h == nil {
		return
	}
	keyOwner, userOwner := map[string]string{}, map[string]string{}
	for _, actor := range slices.Sorted(maps.Keys(h.Actors)) {
		id := h.Actors[actor]
		if id.Unix != "" {
			if other, ok := userOwner[id.Unix]; ok {
				l.addAt(at("host", "actors", actor, "unix"), reason.InvalidValue, "OS user %s is already actor %s's: one OS user proves one actor", id.Unix, other)
			}
			userOwner[id.Unix] = actor
		}
		for i, line := range id.Keys {
			fp, err := KeyFingerprint(line)
			if err != nil {
				l.addAt(at("host", "actors", actor, "keys", i), reason.InvalidValue, "%v", err)
				continue
			}
			if other, ok := keyOwner[fp]; ok {
				l.addAt(at("host", "actors", actor, "keys", i), reason.InvalidValue, "key %s is already actor %s's: one key proves one actor", fp, other)
			}
			keyOwner[fp] = actor
		}
	}
}

func (l *loader) checkWorkspace(cfg *Config, name string, w *Workspace) {
	if _, err := w.Limits.MemoryBytes(); err != nil {
		l.addAt(at("workspaces", name, "limits", "memory"), reason.InvalidValue, "%v", err)
	}
	// CUE compares decimals exactly: cpu: 1e-400 is > 0 there, but 0 as the
	// float64 a cgroup quota is computed from, and 0 is no limit.
	if !(w.Limits.CPU > 0) {
		l.addAt(at("workspaces", name, "limits", "cpu"), reason.InvalidValue,
			"cpu limit rounds to 0 cores, which a cgroup takes as no limit; give a fraction of a core such as 0.5")
	}
	if _, err := w.IdleReleaseDuration(); err != nil {
		l.addAt(at("workspaces", name, "idleRelease"), reason.InvalidValue, "%v", err)
	}
	switch {
	case w.Kind == "personal" && w.Owner == "":
		l.addAt(at("workspaces", name, "kind"), reason.PersonalOwner, "a personal workspace needs an owner")
	case w.Kind == "team" && w.Owner != "":
		l.addAt(at("workspaces", name, "owner"), reason.PersonalOwner, "only a personal workspace has an owner; a team workspace belongs to its team")
	}
	if w.Image != "" && cfg.Images[w.Image] == nil {
		l.addAt(at("workspaces", name, "image"), reason.DanglingReference, "no image %q", w.Image)
	}
	for i, s := range w.Skills {
		l.checkSkillUse(cfg, w, s, at("workspaces", name, "skills", i))
	}
	for i, t := range w.Tools {
		if j := slices.Index(w.Tools, t); j < i {
			l.addAt(at("workspaces", name, "tools", i), reason.InvalidValue, "tool %q is granted twice (also at tools[%d])", t, j)
			continue
		}
		l.checkToolUse(cfg, w, t, at("workspaces", name, "tools", i))
	}
}

// checkTool checks what CUE cannot say of a tool: its command names a
// program, no credential is written into its environment, and no variable
// is both config and a secret.
func (l *loader) checkTool(name string, t *Tool) {
	if len(t.Command) > 0 && t.Command[0] == "" {
		l.addAt(at("tools", name, "command", 0), reason.InvalidValue, "the command's first element is the program to run; it is empty")
	}
	l.checkEnv(t.Env, "tools", name)
	for _, k := range slices.Sorted(maps.Keys(t.Secrets)) {
		if _, ok := t.Env[k]; ok {
			l.addAt(at("tools", name, "secrets", k), reason.InvalidValue, "%s is set in env too: a variable is either config (env) or read from a secret (secrets)", k)
		}
	}
}

// checkToolUse checks that workspace w may be granted tool t, by the rule
// of skills (checkSkillUse).
func (l *loader) checkToolUse(cfg *Config, w *Workspace, t string, sel []cue.Selector) {
	tool := cfg.Tools[t]
	if tool == nil {
		l.addAt(sel, reason.DanglingReference, "no tool %q", t)
		return
	}
	l.checkScope(w, "tool", t, tool.Scope, tool.Owner, "granted to", reason.ToolScopeMismatch, sel)
}

// checkSkillUse checks that workspace w may use skill s.
func (l *loader) checkSkillUse(cfg *Config, w *Workspace, s string, sel []cue.Selector) {
	sk := cfg.Skills[s]
	if sk == nil {
		l.addAt(sel, reason.DanglingReference, "no skill %q", s)
		return
	}
	l.checkScope(w, "skill", s, sk.Scope, sk.Owner, "used in", reason.SkillScopeMismatch, sel)
}

// checkScope checks that workspace w may use the kind named name, of scope
// and owner: a team one belongs to w's team; a personal one only to the
// owner of a personal workspace. use says how w would use it ("used in").
func (l *loader) checkScope(w *Workspace, kind, name, scope, owner, use string, code reason.Code, sel []cue.Selector) {
	switch {
	case scope == "team" && owner != w.Team:
		l.addAt(sel, code, "team %s %q belongs to team %q, not to this workspace's team %q", kind, name, owner, w.Team)
	case scope == "personal" && w.Kind != "personal":
		l.addAt(sel, code, "personal %s %q cannot be %s team workspace", kind, name, use)
	case scope == "personal" && owner != w.Owner:
		l.addAt(sel, code, "personal %s %q belongs to %q, not to this workspace's owner %q", kind, name, owner, w.Owner)
	}
}

func (l *loader) checkJob(cfg *Config, name string, j *Job) {
	w := cfg.Workspaces[j.Workspace]
	if w == nil {
		l.addAt(at("jobs", name, "workspace"), reason.DanglingReference, "no workspace %q", j.Workspace)
	}
	c := cfg.Connections[j.Connection]
	switch {
	case c == nil:
		l.addAt(at("jobs", name, "connection"), reason.DanglingReference, "no connection %q", j.Connection)
	case w == nil:
	case c.Workspace != j.Workspace:
		l.addAt(at("jobs", name, "connection"), reason.ConnectionWorkspace,
			"connection %q belongs to workspace %q, not to the job's workspace %q", j.Connection, c.Workspace, j.Workspace)
	case c.Scope == "personal" && w.Kind == "team":
		l.addAt(at("jobs", name, "connection"), reason.PersonalOnTeam,
			"personal connection %q (owner %s) cannot run jobs of team workspace %q", j.Connection, c.Owner, j.Workspace)
	default:
		if j.Provider != "" && j.Provider != c.Provider {
			l.addAt(at("jobs", name, "provider"), reason.JobPinMismatch,
				"the job pins provider %q but its connection %q uses %q", j.Provider, j.Connection, c.Provider)
		}
		if j.Billing != "" && j.Billing != c.Billing {
			l.addAt(at("jobs", name, "billing"), reason.JobPinMismatch,
				"the job pins billing %q but its connection %q bills %q", j.Billing, j.Connection, c.Billing)
		}
	}
	if f := j.FallbackConnection; f != "" && w != nil {
		fc := cfg.Connections[f]
		switch {
		case fc == nil:
			l.addAt(at("jobs", name, "fallbackConnection"), reason.DanglingReference, "no connection %q", f)
		case fc.Workspace != j.Workspace:
			l.addAt(at("jobs", name, "fallbackConnection"), reason.ConnectionWorkspace,
				"connection %q belongs to workspace %q, not to the job's workspace %q", f, fc.Workspace, j.Workspace)
		case fc.Scope == "personal" && w.Kind == "team":
			l.addAt(at("jobs", name, "fallbackConnection"), reason.PersonalOnTeam,
				"personal connection %q (owner %s) cannot run jobs of team workspace %q", f, fc.Owner, j.Workspace)
		case f == j.Connection:
			l.addAt(at("jobs", name, "fallbackConnection"), reason.InvalidValue, "the fallback connection is the job's own connection")
		}
	}
	if j.Skill != "" && w != nil {
		l.checkSkillUse(cfg, w, j.Skill, at("jobs", name, "skill"))
	}
	if j.Policy != "" && w != nil && PolicyWider(j.Policy, w.Policy) {
		l.addAt(at("jobs", name, "policy"), reason.JobPolicyWider,
			"job policy %s is wider than workspace %q's policy %s", j.Policy, j.Workspace, w.Policy)
	}
	s := j.Schedule
	switch {
	case s.Cron != "":
		if err := l.memo("cron", s.Cron, func() error { _, err := ParseCron(s.Cron); return err }); err != nil {
			l.addAt(at("jobs", name, "schedule", "cron"), reason.InvalidValue, "cron %q: %v", s.Cron, err)
		}
		if err := l.memo("tz", s.Timezone, func() error { _, err := time.LoadLocation(s.Timezone); return err }); err != nil || s.Timezone == "" || s.Timezone == "Local" {
			l.addAt(at("jobs", name, "schedule", "timezone"), reason.InvalidValue, "unknown time zone %q (use an IANA name such as Europe/Berlin or UTC)", s.Timezone)
		}
	case s.Every != "":
		if d, err := time.ParseDuration(s.Every); err != nil || d < time.Minute {
			l.addAt(at("jobs", name, "schedule", "every"), reason.InvalidValue, "interval %q must be a duration of at least 1m", s.Every)
		}
	case s.At != "":
		if _, err := time.Parse(time.RFC3339, s.At); err != nil {
			l.addAt(at("jobs", name, "schedule", "at"), reason.InvalidValue, "time %q must be RFC 3339, such as 2026-12-01T09:00:00Z", s.At)
		}
	}
}

// checkPreservation checks where a preservation's records go: each target
// workspace exists, each connection is in its workspace, and each target
// workspace has an explicit chat-reset decision (and only those do).
func (l *loader) checkPreservation(cfg *Config, name string, p *Preservation) {
	target := func(t AgentTarget, path ...any) {
		field := func(f string) []any { return append(slices.Clone(path), f) }
		if cfg.Workspaces[t.Workspace] == nil {
			l.addAt(at(field("workspace")...), reason.DanglingReference, "no workspace %q", t.Workspace)
			return
		}
		switch c := cfg.Connections[t.Connection]; {
		case c == nil:
			l.addAt(at(field("connection")...), reason.DanglingReference, "no connection %q", t.Connection)
		case c.Workspace != t.Workspace:
			l.addAt(at(field("connection")...), reason.ConnectionWorkspace, "connection %q belongs to workspace %q, not %q", t.Connection, c.Workspace, t.Workspace)
		}
	}
	target(AgentTarget{Workspace: p.Workspace, Connection: p.Connection}, "preservations", name)
	for _, agent := range slices.Sorted(maps.Keys(p.Agents)) {
		target(p.Agents[agent], "preservations", name, "agents", agent)
	}
	for _, w := range p.Workspaces() {
		if _, ok := p.ChatReset[w]; !ok {
			l.addAt(at("preservations", name, "chatReset"), reason.InvalidValue,
				"no chat-reset decision for workspace %q, which the import targets: say %q: \"preserve\" or \"reset\"", w, w)
		}
	}
	for _, w := range slices.Sorted(maps.Keys(p.ChatReset)) {
		if !slices.Contains(p.Workspaces(), w) {
			l.addAt(at("preservations", name, "chatReset", w), reason.InvalidValue,
				"workspace %q is not a target of this import: a chat-reset decision applies only to the workspace it names", w)
		}
	}
	if p.Timezone != "" {
		if _, err := time.LoadLocation(p.Timezone); err != nil || p.Timezone == "Local" {
			l.addAt(at("preservations", name, "timezone"), reason.InvalidValue, "timezone %q is not an IANA time zone", p.Timezone)
		}
	}
}
