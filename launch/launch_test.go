package launch

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nlx-dev/nlx/internal/reason"
	"github.com/nlx-dev/nlx/isolate"
	"github.com/nlx-dev/nlx/reconcile"
	"github.com/nlx-dev/nlx/schema"
)

// res is one applied resource.
type res struct {
	spec   any
	status reconcile.ResourceStatus
}

// applied is an in-memory applied state.
type applied map[string]res

var _ Applied = applied{}

func (a applied) AppliedSpec(_ context.Context, address string) ([]byte, reconcile.ResourceStatus, bool, error) {
	r, ok := a[address]
	if !ok {
		return nil, "", false, nil
	}
	spec, err := json.Marshal(r.spec)
	return spec, r.status, true, err
}

const digest = "sha256:00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"

// base is a team workspace with a team connection on an enabled Codex, a
// team skill and another owner's personal skill.
func base() applied {
	return applied{
		"workspace.platform": {schema.Workspace{Team: "platform", Kind: "team", Policy: "workspace_write",
			Limits: schema.Limits{Memory: "3Gi", CPU: 2, Pids: 512}, Skills: []string{"notes", "bobs"},
			Network: schema.Network{Egress: "none"}, ImageDigest: "sha256:abc"}, reconcile.StatusActive},
		"workspace.alice": {schema.Workspace{Team: "platform", Kind: "personal", Owner: "alice", Policy: "read_only",
			Limits: schema.Limits{Memory: "1Gi", CPU: 1, Pids: 64}, Network: schema.Network{Egress: "full"}}, reconcile.StatusActive},
		"connection.team": {schema.Connection{Owner: "alice", Scope: "team", Workspace: "platform", Provider: "codex",
			CredentialHome: "platform/codex"}, reconcile.StatusActive},
		"connection.mine": {schema.Connection{Owner: "alice", Scope: "personal", Workspace: "platform", Provider: "codex",
			CredentialHome: "alice/codex"}, reconcile.StatusActive},
		"provider.codex": {schema.Provider{Kind: "codex-app-server", Status: "enabled", Command: []string{"codex", "app-server"},
			Env: map[string]string{"RUST_LOG": "warn"}}, reconcile.StatusActive},
		"skill.notes": {schema.Skill{Scope: "team", Digest: digest}, reconcile.StatusActive},
		"skill.bobs":  {schema.Skill{Scope: "personal", Owner: "bob", Digest: digest}, reconcile.StatusActive},
	}
}

var paths = Host{WorkspaceRoot: "/srv/ws", CredentialRoot: "/srv/cred", SkillRoot: "/srv/skills"}

func TestResolve(t *testing.T) {
	l, err := Resolve(context.Background(), base(), paths, Target{Workspace: "platform", Connection: "team"})
	if err != nil {
		t.Fatal(err)
	}
	r := l.Request
	want := isolate.Request{
		Workspace: "platform", WorkspaceRoot: "/srv/ws", WorkspaceDir: "/srv/ws/platform",
		Policy: isolate.WorkspaceWrite, Egress: isolate.EgressNone,
		CredentialRoot: "/srv/cred", CredentialHome: "platform/codex",
		Limits: isolate.Limits{MemoryBytes: 3 << 30, CPU: 2, Pids: 512},
	}
	if r.Workspace != want.Workspace || r.WorkspaceDir != want.WorkspaceDir || r.Policy != want.Policy || r.Egress != want.Egress ||
		r.CredentialRoot != want.CredentialRoot || r.CredentialHome != want.CredentialHome || r.Limits != want.Limits {
		t.Errorf("request:\n got %+v\nwant %+v", r, want)
	}
	if r.Env["CODEX_HOME"] != isolate.CredentialPath || r.Env["RUST_LOG"] != "warn" {
		t.Errorf("env %v", r.Env)
	}
	// bob's personal skill stays invisible to alice's connection.
	wantSkill := filepath.Join("/srv/skills", "notes", strings.TrimPrefix(digest, "sha256:"))
	if len(r.Skills) != 1 || r.Skills[0].Name != "notes" || r.Skills[0].Dir != wantSkill {
		t.Errorf("skills %+v, want only notes at %s", r.Skills, wantSkill)
	}
	if l.ImageDigest != "sha256:abc" || l.Provider != "codex" {
		t.Errorf("image %q provider %q", l.ImageDigest, l.Provider)
	}
}

func TestResolveRefuses(t *testing.T) {
	team := Target{Workspace: "platform", Connection: "team"}
	tests := []struct {
		name   string
		edit   func(applied)
		target Target
		code   reason.Code
	}{
		{"workspace not applied", func(a applied) {}, Target{Workspace: "edited-in", Connection: "team"}, reason.NotApplied},
		{"connection not applied", func(a applied) {}, Target{Workspace: "platform", Connection: "new"}, reason.NotApplied},
		{"provider not applied", func(a applied) { delete(a, "provider.codex") }, team, reason.NotApplied},
		{"skill not applied", func(a applied) { delete(a, "skill.notes") }, team, reason.NotApplied},
		{"workspace held", func(a applied) { hold(a, "workspace.platform") }, team, reason.Held},
		{"connection held", func(a applied) { hold(a, "connection.team") }, team, reason.Held},
		{"provider held", func(a applied) { hold(a, "provider.codex") }, team, reason.Held},
		{"skill held", func(a applied) { hold(a, "skill.notes") }, team, reason.Held},
		{"provider disabled", func(a applied) {
			r := a["provider.codex"]
			p := r.spec.(schema.Provider)
			p.Status = "disabled"
			a["provider.codex"] = res{p, r.status}
		}, team, reason.ProviderDisabled},
		{"provider behind a feature flag", func(a applied) {
			r := a["provider.codex"]
			p := r.spec.(schema.Provider)
			p.Feature = "preview"
			a["provider.codex"] = res{p, r.status}
		}, team, reason.ProviderFeatureOff},
		{"connection of another workspace", func(a applied) {}, Target{Workspace: "alice", Connection: "team"}, reason.ConnectionWorkspace},
		{"personal connection on a team workspace", func(a applied) {}, Target{Workspace: "platform", Connection: "mine"}, reason.PersonalOnTeam},
		{"memory that overflows", func(a applied) {
			r := a["workspace.platform"]
			w := r.spec.(schema.Workspace)
			w.Limits.Memory = "17179869185Gi"
			a["workspace.platform"] = res{w, r.status}
		}, team, reason.InvalidAppliedSpec},
		{"memory of 0 bytes", func(a applied) { limits(a, func(l *schema.Limits) { l.Memory = "0Gi" }) }, team, reason.InvalidAppliedSpec},
		{"memory one byte past the largest", func(a applied) { limits(a, func(l *schema.Limits) { l.Memory = "8589934592Gi" }) }, team, reason.InvalidAppliedSpec},
		{"cpu of 0", func(a applied) { limits(a, func(l *schema.Limits) { l.CPU = 0 }) }, team, reason.InvalidAppliedSpec},
		{"pids of 0", func(a applied) { limits(a, func(l *schema.Limits) { l.Pids = 0 }) }, team, reason.InvalidAppliedSpec},
		{"skill digest not a digest", func(a applied) {
			a["skill.notes"] = res{schema.Skill{Scope: "team", Digest: "sha256:../../etc"}, reconcile.StatusActive}
		}, team, reason.InvalidAppliedSpec},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := base()
			tt.edit(a)
			_, err := Resolve(context.Background(), a, paths, tt.target)
			var r *reason.Error
			if !errors.As(err, &r) || r.Code != tt.code {
				t.Fatalf("Resolve: %v, want refusal %s", err, tt.code)
			}
		})
	}
}

// limits edits the limits of the applied workspace.platform.
func limits(a applied, edit func(*schema.Limits)) {
	r := a["workspace.platform"]
	w := r.spec.(schema.Workspace)
	edit(&w.Limits)
	a["workspace.platform"] = res{w, r.status}
}

// TestResolveMemoryIsSchemas holds launch to schema's reading of a memory
// size: the bytes a launch gets are the bytes the config was checked with,
// up to the largest size there is.
func TestResolveMemoryIsSchemas(t *testing.T) {
	for _, size := range []string{"4194304", "4096Ki", "512Mi", "3Gi", "8589934591Gi"} {
		t.Run(size, func(t *testing.T) {
			a := base()
			limits(a, func(l *schema.Limits) { l.Memory = size })
			want, err := schema.Limits{Memory: size}.MemoryBytes()
			if err != nil {
				t.Fatal(err)
			}
			l, err := Resolve(context.Background(), a, paths, Target{Workspace: "platform", Connection: "team"})
			if err != nil {
				t.Fatal(err)
			}
			if got := l.Request.Limits.MemoryBytes; got != want || got <= 0 {
				t.Errorf("memory %s: launch has %d bytes, schema %d", size, got, want)
			}
		})
	}
}

func hold(a applied, address string) {
	r := a[address]
	r.status = reconcile.StatusHeld
	a[address] = r
}
