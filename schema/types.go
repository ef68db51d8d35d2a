package schema

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"cuelang.org/go/cue/token"

	"github.com/nlx-dev/nlx/internal/bytesize"
)

// Kind names a resource kind as it appears at the top level of a config.
type Kind string

// The resource kinds, in dependency order: a kind may refer only to kinds
// before it.
const (
	KindHost         Kind = "host"
	KindProvider     Kind = "provider"
	KindImage        Kind = "image"
	KindTool         Kind = "tool"
	KindWorkspace    Kind = "workspace"
	KindConnection   Kind = "connection"
	KindSkill        Kind = "skill"
	KindJob          Kind = "job"
	KindPreservation Kind = "preservation"
)

// Kinds lists every kind with its dependency rank: changes are applied in
// increasing rank and deletes in decreasing rank.
var Kinds = []struct {
	Kind  Kind
	Field string // top-level config field
	Rank  int
}{
	{KindHost, "host", 0},
	{KindProvider, "providers", 0},
	{KindImage, "images", 0},
	{KindTool, "tools", 0},
	{KindWorkspace, "workspaces", 1},
	{KindConnection, "connections", 2},
	{KindSkill, "skills", 2},
	{KindJob, "jobs", 3},
	{KindPreservation, "preservations", 4},
}

// Rank returns the dependency rank of k, or -1 for an unknown kind.
func (k Kind) Rank() int {
	for _, e := range Kinds {
		if e.Kind == k {
			return e.Rank
		}
	}
	return -1
}

// Field returns the top-level config field holding resources of kind k.
func (k Kind) Field() string {
	for _, e := range Kinds {
		if e.Kind == k {
			return e.Field
		}
	}
	return ""
}

// Config is a validated configuration: the user's CUE package unified with
// #Config, decoded, and cross-checked.
type Config struct {
	Host          *Host                    `json:"host,omitempty"`
	Providers     map[string]*Provider     `json:"providers,omitempty"`
	Images        map[string]*Image        `json:"images,omitempty"`
	Tools         map[string]*Tool         `json:"tools,omitempty"`
	Workspaces    map[string]*Workspace    `json:"workspaces,omitempty"`
	Connections   map[string]*Connection   `json:"connections,omitempty"`
	Skills        map[string]*Skill        `json:"skills,omitempty"`
	Jobs          map[string]*Job          `json:"jobs,omitempty"`
	Preservations map[string]*Preservation `json:"preservations,omitempty"`

	// Inputs lists every file the config was made from, sorted by name.
	Inputs Inputs `json:"-"`
	// FastPath reports that Load took the fast path (fast.go); diagnostic only.
	FastPath bool `json:"-"`
}

// HostName is the name of the one host resource: host.config.
const HostName = "config"

// Host holds the host-wide settings: who may approve.
type Host struct {
	Operators     []string   `json:"operators"`
	TwoPersonRule bool       `json:"twoPersonRule"`
	Retention     *Retention `json:"retention,omitempty"`
	// Actors are the identities actors prove themselves by, by actor.
	Actors map[string]Identity `json:"actors,omitempty"`
}

// Identity is how an actor proves who they are on the host: the calling
// process's OS user, or a signature by one of the keys.
type Identity struct {
	Unix string   `json:"unix,omitempty"`
	Keys []string `json:"keys,omitempty"` // authorized_keys lines
}

// Retention is how long nlx gc keeps settled state.
type Retention struct {
	Days int `json:"days"`
}

// DefaultRetentionDays is what nlx gc keeps without host.retention.
const DefaultRetentionDays = 90

// RetentionDays is the configured retention, or the default.
func (h *Host) RetentionDays() int {
	if h == nil || h.Retention == nil || h.Retention.Days <= 0 {
		return DefaultRetentionDays
	}
	return h.Retention.Days
}

// IsOperator reports whether actor is a host operator.
func (h *Host) IsOperator(actor string) bool {
	if h == nil {
		return false
	}
	for _, o := range h.Operators {
		if o == actor {
			return true
		}
	}
	return false
}

// Provider registers a provider program (Codex app-server, Claude Code, ...).
type Provider struct {
	Kind         string            `json:"kind"`
	Status       string            `json:"status"`
	Version      string            `json:"version"`
	Command      []string          `json:"command"`
	Capabilities []string          `json:"capabilities,omitempty"`
	Feature      string            `json:"feature,omitempty"`
	Env          map[string]string `json:"env,omitempty"`
	// Inference are the host:port endpoints the provider reaches through
	// nlx's proxy in a workspace with egress "inference".
	Inference []string `json:"inference,omitempty"`
}

// Enabled reports whether the provider may run.
func (p *Provider) Enabled() bool { return p.Status == "enabled" }

// Image describes a native OCI image built for one or more platforms.
type Image struct {
	Ref        string            `json:"ref,omitempty"`
	Platforms  []string          `json:"platforms,omitempty"`
	Base       string            `json:"base,omitempty"`
	Layers     []Layer           `json:"layers,omitempty"`
	Entrypoint []string          `json:"entrypoint,omitempty"`
	Cmd        []string          `json:"cmd,omitempty"`
	Env        map[string]string `json:"env,omitempty"`
	Workdir    string            `json:"workdir,omitempty"`
	User       string            `json:"user,omitempty"`
	Labels     map[string]string `json:"labels,omitempty"`
	Output     string            `json:"output,omitempty"`
	Registry   string            `json:"registry,omitempty"`

	// Digest is the image index digest the plan resolved it to; filled
	// when planning, never written in a config.
	Digest string `json:"digest,omitempty"`
}

// Layer is one image layer; exactly one of Files, Go, Skills and Nlx is set.
type Layer struct {
	Files  string    `json:"files,omitempty"`
	Go     string    `json:"go,omitempty"`
	Skills []string  `json:"skills,omitempty"`
	Nlx    *NlxLayer `json:"nlx,omitempty"`
	Dest   string    `json:"dest"`

	// Pos is where the layer's source field (files, go, skills or nlx) is
	// written: errors found when the layer is built (a Go package that
	// does not build) are positioned there. Not part of the spec.
	Pos token.Position `json:"-"`
}

// NlxLayer is a layer holding this nlx (`nlx: {}`): the running nlx's own
// source, cross-compiled per platform. It has no settings yet.
type NlxLayer struct{}

// Source names the layer's source field: "files", "go", "skills" or "nlx".
func (l *Layer) Source() string {
	switch {
	case l.Files != "":
		return "files"
	case l.Go != "":
		return "go"
	case len(l.Skills) > 0:
		return "skills"
	case l.Nlx != nil:
		return "nlx"
	}
	return ""
}

// Workspace is where a team's or a person's provider processes run.
type Workspace struct {
	Team      string            `json:"team"`
	Kind      string            `json:"kind"`
	Owner     string            `json:"owner,omitempty"`
	Image     string            `json:"image,omitempty"`
	Policy    string            `json:"policy"`
	ChatReset string            `json:"chatReset"`
	Members   map[string]string `json:"members"`
	Limits    Limits            `json:"limits"`
	Skills    []string          `json:"skills,omitempty"`
	// Tools are the tools (Config.Tools) the workspace's providers may
	// use, through nlx's tool proxy.
	Tools   []string `json:"tools,omitempty"`
	Network Network  `json:"network"`
	// IdleRelease is how long a provider process nlx serve keeps warm
	// between the turns of its conversation waits for the next one before
	// it is stopped (default 10m; "0s": never kept).
	IdleRelease string `json:"idleRelease,omitempty"`

	// ImageDigest pins the image the workspace runs: the index digest the
	// plan resolved its image to. Filled when planning, never in a config.
	ImageDigest string `json:"imageDigest,omitempty"`
}

// DefaultIdleRelease is a workspace's idleRelease when it names none.
const DefaultIdleRelease = 10 * time.Minute

// IdleReleaseDuration is the workspace's idleRelease (DefaultIdleRelease
// when unset); at most a day.
func (w *Workspace) IdleReleaseDuration() (time.Duration, error) {
	if w.IdleRelease == "" {
		return DefaultIdleRelease, nil
	}
	d, err := time.ParseDuration(w.IdleRelease)
	if err != nil || d < 0 || d > 24*time.Hour {
		return 0, fmt.Errorf("idleRelease %q must be a duration from 0s to 24h", w.IdleRelease)
	}
	return d, nil
}

// Tool is an MCP server workspaces may be granted (tools). Exactly one of
// Command (a stdio server nlx starts, in a sandbox of its own) and URL (a
// streamable HTTP server already listening on the host's loopback or on a
// Unix socket) is set. Providers never see it: nlx's tool proxy holds it.
type Tool struct {
	Command []string `json:"command,omitempty"`
	URL     string   `json:"url,omitempty"`
	// Endpoint is the HTTP path of the MCP endpoint on a unix: URL's socket.
	Endpoint string            `json:"endpoint,omitempty"`
	Env      map[string]string `json:"env,omitempty"`
	// Secrets are variables of the command read at launch, each from a
	// secret reference (env:NAME, file:PATH or keychain:NAME).
	Secrets map[string]string `json:"secrets,omitempty"`
	Egress  string            `json:"egress"` // the command's network: "none" or "full"
	Scope   string            `json:"scope"`  // "team" or "personal"
	Owner   string            `json:"owner"`  // the team of a team tool, the actor of a personal one
}

// IsURL reports whether the tool is a server already listening (url), not
// a command nlx starts.
func (t *Tool) IsURL() bool { return t.URL != "" }

// IsUnix reports whether the tool's server listens on a Unix socket.
func (t *Tool) IsUnix() bool { return strings.HasPrefix(t.URL, "unix://") }

// SocketPath is the path of a unix: URL's socket, or "".
func (t *Tool) SocketPath() string {
	if !t.IsUnix() {
		return ""
	}
	return strings.TrimPrefix(t.URL, "unix://")
}

// Limits are a workspace's cgroup limits.
type Limits struct {
	Memory string  `json:"memory"` // read it with MemoryBytes
	CPU    float64 `json:"cpu"`
	Pids   int64   `json:"pids"`
}

// MemoryBytes returns the memory limit in bytes. It is the one reading of a
// workspace's memory size: Load refuses a config whose size it refuses
// (invalid_value at the field), and launch takes the bytes of an applied
// workspace from it, so no two readings can disagree. A size that does
// not fit in 63 bits is an error, never wrapped into a smaller limit, and
// so is 0, which a cgroup would take as no limit at all.
func (l Limits) MemoryBytes() (int64, error) {
	n, err := bytesize.Parse(l.Memory)
	switch {
	case err != nil:
		return 0, fmt.Errorf("memory limit: %w", err)
	case n == 0:
		return 0, fmt.Errorf("memory limit %q is no limit: a workspace's memory is capped (bytes, or with a Ki, Mi or Gi suffix)", l.Memory)
	}
	return n, nil
}

// Network is a workspace's network policy.
type Network struct {
	Egress string `json:"egress"`
}

// Connection binds an owner's credentials for one provider to a workspace.
type Connection struct {
	Owner          string `json:"owner"`
	Scope          string `json:"scope"`
	Workspace      string `json:"workspace"`
	Provider       string `json:"provider"`
	Billing        string `json:"billing"`
	CredentialHome string `json:"credentialHome"`
	Secret         string `json:"secret,omitempty"`
	Generation     int64  `json:"generation"`
}

// Skill is a skill package in the Agent Skills format.
type Skill struct {
	Path    string `json:"path"`
	Version string `json:"version"`
	Scope   string `json:"scope"`
	Owner   string `json:"owner"`

	// Filled by the loader from the package directory, not from CUE.
	Description string `json:"description"`
	Digest      string `json:"digest"`
}

// Job is a scheduled provider run.
type Job struct {
	Workspace           string   `json:"workspace"`
	Connection          string   `json:"connection"`
	Schedule            Schedule `json:"schedule"`
	Conversation        string   `json:"conversation,omitempty"`
	Prompt              string   `json:"prompt"`
	Skill               string   `json:"skill,omitempty"`
	Policy              string   `json:"policy,omitempty"`
	Provider            string   `json:"provider,omitempty"`
	Billing             string   `json:"billing,omitempty"`
	FallbackConnection  string   `json:"fallbackConnection,omitempty"`
	Enabled             bool     `json:"enabled"`
	BackgroundAuthority bool     `json:"backgroundAuthority"`
	Concurrency         string   `json:"concurrency"`
	CatchUp             string   `json:"catchUp"`
}

// Schedule is exactly one of a cron expression with its time zone, an
// interval, or a one-time instant.
type Schedule struct {
	Cron     string `json:"cron,omitempty"`
	Timezone string `json:"timezone,omitempty"`
	Every    string `json:"every,omitempty"`
	At       string `json:"at,omitempty"`
}

// Preservation is a plan to import an OpenClaw installation into nlx.
type Preservation struct {
	Source     Source                 `json:"source"`
	Workspace  string                 `json:"workspace"`
	Connection string                 `json:"connection"`
	Agents     map[string]AgentTarget `json:"agents,omitempty"`
	Timezone   string                 `json:"timezone,omitempty"`
	Export     string                 `json:"export"`
	Expected   Expected               `json:"expected"`
	ChatReset  map[string]string      `json:"chatReset"`
	Import     *ImportPin             `json:"import,omitempty"` // pinned by the planner, never configured
}

// AgentTarget is where an OpenClaw agent's jobs and conversations go.
type AgentTarget struct {
	Workspace  string `json:"workspace"`
	Connection string `json:"connection"`
}

// ImportPin is the export a preservation's import is bound to: the
// planner writes it into the preservation's spec from the export's
// manifest (as image digests are pinned into workspaces), so that a new
// export is a change of the preservation and the applied state records
// the source revision it imported.
type ImportPin struct {
	Manifest string `json:"manifest"` // "sha256:..." of manifest.json
	Era      int    `json:"era"`
}

// Target is where agent's records go: its entry in Agents, else the
// preservation's workspace and connection.
func (p *Preservation) Target(agent string) AgentTarget {
	if t, ok := p.Agents[agent]; ok {
		return t
	}
	return AgentTarget{Workspace: p.Workspace, Connection: p.Connection}
}

// Workspaces lists the workspaces the preservation targets, sorted.
func (p *Preservation) Workspaces() []string {
	set := map[string]bool{p.Workspace: true}
	for _, t := range p.Agents {
		set[t.Workspace] = true
	}
	return slices.Sorted(maps.Keys(set))
}

// Source names an installation to import.
type Source struct {
	Kind    string `json:"kind"`
	Path    string `json:"path"`
	LockDir string `json:"lockDir,omitempty"`
}

// The record kinds of an OpenClaw installation (#RecordKind): what nlx
// preserve counts and hashes, and what expected.counts and
// expected.hashes name.
var RecordKinds = []string{"config", "jobs", "quarantined", "runs", "sessions", "transcripts", "transcript_entries",
	"transcript_archives", "skills", "skill_installs", "auth_profiles", "channel_credentials", "leftovers", "system", "unknown"}

// Expected are the counts and hashes an export must match.
type Expected struct {
	Counts map[string]int64  `json:"counts"`
	Hashes map[string]string `json:"hashes,omitempty"`
}
