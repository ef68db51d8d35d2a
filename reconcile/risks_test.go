package reconcile_test

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/nlx-dev/nlx/internal/reason"
	"github.com/nlx-dev/nlx/plan"
	"github.com/nlx-dev/nlx/reconcile"
)

// applied returns a fixture whose state holds the pi-team example.
func applied(t *testing.T) *fixture {
	t.Helper()
	f := newFixture(t)
	if _, err := f.apply(f.plan(), reconcile.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	return f
}

// gates maps each address with risks or refusals to its codes: risks as
// they are, refusals prefixed "refused:".
func gates(p *plan.Plan) map[string][]string {
	out := map[string][]string{}
	for _, c := range p.Changes {
		var codes []string
		for _, r := range c.Risks {
			codes = append(codes, string(r.Code))
		}
		for _, r := range c.Refused {
			codes = append(codes, "refused:"+string(r.Code))
		}
		if len(codes) > 0 {
			sort.Strings(codes)
			out[c.Address] = codes
		}
	}
	return out
}

// appendFile adds CUE to a file of the fixture's config.
func (f *fixture) appendFile(file, text string) {
	f.t.Helper()
	path := filepath.Join(f.dir, file)
	data, err := os.ReadFile(path)
	if err != nil {
		f.t.Fatal(err)
	}
	if err := os.WriteFile(path, append(data, text...), 0o644); err != nil {
		f.t.Fatal(err)
	}
}

// hold marks the applied resource at address held (an import under
// review), in the snapshot the fixture plans from.
func (f *fixture) hold(address string) {
	f.snapshot = func(s *reconcile.Snapshot) {
		for i := range s.Resources {
			if s.Resources[i].Address() == address {
				s.Resources[i].Status = "held"
			}
		}
	}
}

// TestEachRiskFromItsCause: every risk and refusal arises from the change
// that should cause it, on the change it belongs to, and nowhere else.
func TestEachRiskFromItsCause(t *testing.T) {
	const newPlatformClaude = `
connections: "platform-claude": {
	owner:          "alice"
	scope:          "team"
	workspace:      "platform"
	provider:       "claude"
	billing:        "api"
	credentialHome: "platform/claude"
	generation:     1
}
`
	tests := []struct {
		name  string
		edit  func(f *fixture)
		gates map[string][]string
	}{
		{"a cron line: no risk", func(f *fixture) {
			f.edit("jobs.cue", `"30 6 * * 1-5"`, `"0 7 * * 1-5"`)
		}, map[string][]string{}},
		{"a prompt and limits: no risk", func(f *fixture) {
			f.edit("jobs.cue", `Sort my notification inbox`, `Sort my whole inbox`)
			f.edit("workspaces.cue", `memory: "3Gi"`, `memory: "2Gi"`)
		}, map[string][]string{}},
		{"image_migration: a workspace moves to another image", func(f *fixture) {
			f.appendFile("images.cue", "images: \"pi-runtime-2\": {platforms: [\"linux/arm64\"], base: \"scratch\", layers: []}\n")
			f.edit("workspaces.cue", "owner:     \"alice\"\n\t\timage:     \"pi-runtime\"", "owner:     \"alice\"\n\t\timage:     \"pi-runtime-2\"")
		}, map[string][]string{"workspace.alice": {string(plan.RiskImageMigration)}}},
		{"destructive: a job deleted", func(f *fixture) {
			f.edit("jobs.cue", "\t\"bob-inbox-triage\": {\n\t\tworkspace:  \"bob\"\n\t\tconnection: \"bob-codex\"\n\t\tschedule: {cron: \"0 8 * * *\", timezone: \"Europe/Berlin\"}\n\t\tprompt:      \"Sort my notification inbox into act, read and ignore.\"\n\t\tconcurrency: \"queue\"\n\t}\n", "")
		}, map[string][]string{"job.bob-inbox-triage": {string(plan.RiskDestructive)}}},
		{"destructive: a conversation key changes (chat reset)", func(f *fixture) {
			f.edit("jobs.cue", `"platform/digest"`, `"platform/digest-2"`)
		}, map[string][]string{"job.nightly-digest": {string(plan.RiskDestructive)}}},
		{"destructive: a workspace resets chats after every run", func(f *fixture) {
			f.edit("workspaces.cue", `chatReset: "never"`, `chatReset: "per_run"`)
		}, map[string][]string{"workspace.bob": {string(plan.RiskDestructive)}}},
		{"destructive: a connection replaced", func(f *fixture) {
			f.edit("connections.cue", "scope:          \"personal\"\n\t\tworkspace:      \"bob\"", "scope:          \"team\"\n\t\tworkspace:      \"bob\"")
		}, map[string][]string{"connection.bob-codex": {string(plan.RiskDestructive)}}},
		{"permission_widening: workspace policy", func(f *fixture) {
			f.edit("workspaces.cue", `policy:    "read_only"`, `policy:    "workspace_write"`)
		}, map[string][]string{"workspace.alice": {string(plan.RiskPermissionWidening)}}},
		{"permission_widening: network egress", func(f *fixture) {
			f.edit("workspaces.cue", `network: egress: "none"`, `network: egress: "full"`)
		}, map[string][]string{"workspace.bob": {string(plan.RiskPermissionWidening)}}},
		{"permission_widening: network egress none to inference", func(f *fixture) {
			f.edit("workspaces.cue", `network: egress: "none"`, `network: egress: "inference"`)
		}, map[string][]string{"workspace.bob": {string(plan.RiskPermissionWidening)}}},
		{"permission_widening: network egress inference to full", func(f *fixture) {
			f.edit("workspaces.cue", `network: egress: "inference"`, `network: egress: "full"`)
		}, map[string][]string{"workspace.platform": {string(plan.RiskPermissionWidening)}}},
		{"no risk: network egress narrows", func(f *fixture) {
			f.edit("workspaces.cue", `network: egress: "inference"`, `network: egress: "none"`)
		}, map[string][]string{}},
		{"permission_widening: an inference endpoint added", func(f *fixture) {
			f.edit("providers.cue", `inference: ["api.anthropic.com:443"]`, `inference: ["api.anthropic.com:443", "statsig.anthropic.com:443"]`)
		}, map[string][]string{"provider.claude": {string(plan.RiskPermissionWidening)}}},
		{"no risk: an inference endpoint removed", func(f *fixture) {
			f.edit("providers.cue", `inference: ["api.openai.com:443", "chatgpt.com:443"]`, `inference: ["api.openai.com:443"]`)
		}, map[string][]string{}},
		{"permission_widening: a member added", func(f *fixture) {
			f.edit("workspaces.cue", `members: bob: "admin"`, `members: {bob: "admin", carol: "member"}`)
		}, map[string][]string{"workspace.bob": {string(plan.RiskPermissionWidening)}}},
		{"permission_widening: a member becomes admin", func(f *fixture) {
			f.edit("workspaces.cue", `carol: "member"`, `carol: "admin"`)
		}, map[string][]string{"workspace.platform": {string(plan.RiskPermissionWidening)}}},
		{"no risk: an admin becomes member", func(f *fixture) {
			f.edit("workspaces.cue", `alice: "admin"
			bob:   "member"`, `alice: "admin"
			bob:   "member"`)
			f.edit("workspaces.cue", `policy:    "workspace_write"
		chatReset: "never"`, `policy:    "read_only"
		chatReset: "never"`)
		}, map[string][]string{}},
		{"permission_widening: background authority", func(f *fixture) {
			f.edit("jobs.cue", `concurrency: "queue"`, `concurrency: "queue"
		backgroundAuthority: true`)
		}, map[string][]string{"job.bob-inbox-triage": {string(plan.RiskPermissionWidening)}}},
		{"permission_widening: a job's policy widens to its workspace's", func(f *fixture) {
			f.edit("workspaces.cue", `policy:    "read_only"`, `policy:    "workspace_write"`)
			f.edit("jobs.cue", `policy: "read_only"`, `policy: "workspace_write"`)
		}, map[string][]string{"workspace.alice": {string(plan.RiskPermissionWidening)}, "job.alice-review-queue": {string(plan.RiskPermissionWidening)}}},
		{"permission_widening: an operator added", func(f *fixture) {
			f.edit("host.cue", `operators: ["alice"]`, `operators: ["alice", "bob"]`)
		}, map[string][]string{"host.config": {string(plan.RiskPermissionWidening)}}},
		{"permission_widening: the two-person rule switched off", func(f *fixture) {
			f.edit("host.cue", `twoPersonRule: true`, `twoPersonRule: false`)
		}, map[string][]string{"host.config": {string(plan.RiskPermissionWidening)}}},
		{"credential_rebind: a connection's credential home", func(f *fixture) {
			f.edit("connections.cue", `"bob/codex"`, `"bob/codex-2"`)
		}, map[string][]string{"connection.bob-codex": {string(plan.RiskCredentialRebind)}}},
		{"credential_rebind: a connection's owner", func(f *fixture) {
			f.edit("connections.cue", "owner:          \"alice\"\n\t\tscope:          \"team\"", "owner:          \"carol\"\n\t\tscope:          \"team\"")
		}, map[string][]string{"connection.platform-codex": {string(plan.RiskCredentialRebind)}}},
		{"credential_rebind: a job moves to another connection it names", func(f *fixture) {
			f.appendFile("connections.cue", newPlatformClaude)
			f.edit("jobs.cue", "connection: \"platform-codex\"\n\t\tschedule: {cron: \"0 16 * * 5\"", "connection: \"platform-claude\"\n\t\tschedule: {cron: \"0 16 * * 5\"")
		}, map[string][]string{"job.weekly-release-notes": {string(plan.RiskCredentialRebind)}}},
		{"implicit_substitution: a connection's billing changes under unpinned jobs", func(f *fixture) {
			f.edit("connections.cue", `billing:        "subscription"
		credentialHome: "platform/codex"`, `billing:        "api"
		credentialHome: "platform/codex"`)
		}, map[string][]string{"connection.platform-codex": {string(plan.RiskCredentialRebind), "refused:" + string(reason.ImplicitSubstitution)}}},
		{"no substitution when the jobs say so", func(f *fixture) {
			f.edit("connections.cue", `billing:        "subscription"
		credentialHome: "platform/codex"`, `billing:        "api"
		credentialHome: "platform/codex"`)
			f.appendFile("jobs.cue", "jobs: \"nightly-digest\": billing: \"api\"\njobs: \"weekly-release-notes\": billing: \"api\"\n")
		}, map[string][]string{"connection.platform-codex": {string(plan.RiskCredentialRebind)}}},
		{"disabled_requested_provider: a provider disabled under its jobs", func(f *fixture) {
			f.edit("providers.cue", "kind:    \"claude-code\"\n\t\tstatus:  \"enabled\"", "kind:    \"claude-code\"\n\t\tstatus:  \"disabled\"")
		}, map[string][]string{"provider.claude": {"refused:" + string(reason.DisabledProvider)}}},
		{"disabled_requested_provider: a new job on a disabled provider", func(f *fixture) {
			f.appendFile("connections.cue", `connections: "bob-opencode": {owner: "bob", scope: "personal", workspace: "bob", provider: "opencode", billing: "api", credentialHome: "bob/opencode", generation: 1}
`)
			f.appendFile("jobs.cue", `jobs: "bob-experiment": {workspace: "bob", connection: "bob-opencode", schedule: every: "6h", prompt: "Try opencode."}
`)
		}, map[string][]string{"job.bob-experiment": {"refused:" + string(reason.DisabledProvider)}}},
		{"no refusal with an enabled fallback", func(f *fixture) {
			f.appendFile("connections.cue", `connections: "bob-opencode": {owner: "bob", scope: "personal", workspace: "bob", provider: "opencode", billing: "api", credentialHome: "bob/opencode", generation: 1}
`)
			f.appendFile("jobs.cue", `jobs: "bob-experiment": {workspace: "bob", connection: "bob-opencode", fallbackConnection: "bob-codex", schedule: every: "6h", prompt: "Try opencode."}
`)
		}, map[string][]string{}},
		{"held_import: an imported job released", func(f *fixture) {
			f.hold("job.weekly-release-notes")
			f.edit("jobs.cue", `Draft release notes`, `Draft the release notes`)
		}, map[string][]string{"job.weekly-release-notes": {string(plan.RiskHeldImport)}}},
		{"held_import: released as imported, unchanged", func(f *fixture) {
			f.hold("job.weekly-release-notes")
		}, map[string][]string{"job.weekly-release-notes": {string(plan.RiskHeldImport)}}},
		{"a held job on a personal connection is released only with background authority", func(f *fixture) {
			f.hold("job.bob-inbox-triage")
			f.edit("jobs.cue", `Sort my notification inbox`, `Sort my whole inbox`)
		}, map[string][]string{"job.bob-inbox-triage": {string(plan.RiskHeldImport), "refused:" + string(reason.BackgroundAuthorityRequired)}}},
		{"a held import carrying unsupported work stays held", func(f *fixture) {
			f.hold("job.weekly-release-notes")
			prev := f.snapshot
			f.snapshot = func(s *reconcile.Snapshot) {
				prev(s)
				s.Held = map[string]reconcile.HeldImport{"job.weekly-release-notes": {Preservation: "oc", Unsupported: []string{"payload systemEvent"}}}
			}
		}, map[string][]string{"job.weekly-release-notes": {string(plan.RiskHeldImport), "refused:" + string(reason.ImportUnsupported)}}},
		{"a release beside a change of its connection's generation is refused", func(f *fixture) {
			f.hold("job.weekly-release-notes")
			f.edit("connections.cue", `generation:     1`, `generation:     2`)
		}, map[string][]string{"job.weekly-release-notes": {string(plan.RiskHeldImport), "refused:" + string(reason.ReleaseGenerationChanged)}}},
		{"unknown_claim: a change to a resource with an unknown outcome", func(f *fixture) {
			f.snapshot = func(s *reconcile.Snapshot) {
				s.Unknowns = append(s.Unknowns, plan.Unknown{Address: "job.bob-inbox-triage", Action: plan.Update, ApplyID: 7, At: "now"})
			}
			f.edit("jobs.cue", `Sort my notification inbox`, `Sort my whole inbox`)
		}, map[string][]string{"job.bob-inbox-triage": {string(plan.RiskUnknownClaim)}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := applied(t)
			tt.edit(f)
			got := gates(f.plan())
			if !reflect.DeepEqual(got, tt.gates) {
				t.Errorf("gates:\ngot  %v\nwant %v", got, tt.gates)
			}
		})
	}
}

func TestRiskReasonsSayWhy(t *testing.T) {
	f := applied(t)
	f.edit("workspaces.cue", `policy:    "read_only"`, `policy:    "workspace_write"`)
	f.edit("workspaces.cue", `carol: "member"`, `carol: "admin"`)
	var reasons []string
	for _, c := range f.plan().Changes {
		for _, r := range c.Risks {
			reasons = append(reasons, c.Address+": "+r.Reason)
		}
	}
	want := []string{
		"workspace.alice: policy grows from read_only to workspace_write",
		"workspace.platform: carol becomes admin",
	}
	if !reflect.DeepEqual(reasons, want) {
		t.Errorf("reasons:\ngot  %q\nwant %q", reasons, want)
	}
}

func TestApplyRefusesRefusedPlans(t *testing.T) {
	f := applied(t)
	f.edit("providers.cue", "kind:    \"claude-code\"\n\t\tstatus:  \"enabled\"", "kind:    \"claude-code\"\n\t\tstatus:  \"disabled\"")
	p := f.plan()
	before := f.fingerprint()
	_, err := f.apply(p, reconcile.ApplyOptions{})
	if err == nil || !strings.Contains(err.Error(), string(reason.DisabledProvider)) || !strings.Contains(err.Error(), "alice-review-queue") {
		t.Fatalf("got %v, want a disabled_requested_provider refusal naming the job", err)
	}
	if f.fingerprint() != before {
		t.Error("the refused apply wrote to the state")
	}
	// No approval can overcome a refusal.
	_, err = reconcile.Approve(context.Background(), f.db, p, reconcile.ApproveOptions{Actor: "alice", Reason: "please", Changes: []string{"provider.claude"}, Caller: keyCaller(t, "alice")})
	if err == nil || !strings.Contains(err.Error(), string(reason.DisabledProvider)) {
		t.Fatalf("approve of a refused change: got %v", err)
	}
}
