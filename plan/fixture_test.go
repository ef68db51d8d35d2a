package plan

import (
	"encoding/json"
	"testing"

	"github.com/nlx-dev/nlx/schema"
)

// The fixtures shared by the file and render tests. Every raw JSON object in
// them has its keys sorted, as reconcile's canonical specs do not need to but
// the tamper tests do: they decode a plan file into map[string]any and encode
// it again, which sorts keys, and an unmutated file must still verify.

const (
	testLineage    = "7c1e4a52-3f7b-4d0e-9a61-2b8f0c9d5e13"
	testConfigHash = "sha256:9b0d3c6a1e7f4b2d8c5a0e9f1b3d7c6a2e4f8b0d1c3a5e7f9b2d4c6a8e0f1b3d"
)

func raw(s string) json.RawMessage { return json.RawMessage(s) }

// representativePlan is a small plan that holds one of everything the views
// and the file format must handle: creates, an update with a changed, an
// added and a removed field, a replace forced by one field, a delete, risks,
// a map key with dots and list values. Its hash is filled.
func representativePlan(t testing.TB) *Plan {
	t.Helper()
	changes := []Change{
		{
			Address: "provider.codex",
			Kind:    schema.KindProvider,
			Name:    "codex",
			Action:  Create,
			Risks:   []Risk{},
			Diff: []FieldDiff{
				{Path: "command", After: raw(`["codex","app-server"]`)},
				{Path: "kind", After: raw(`"codex-app-server"`)},
				{Path: "status", After: raw(`"enabled"`)},
			},
			Before: raw(`null`),
			After:  raw(`{"command":["codex","app-server"],"kind":"codex-app-server","status":"enabled"}`),
		},
		{
			Address: "image.base",
			Kind:    schema.KindImage,
			Name:    "base",
			Action:  Replace,
			Risks:   []Risk{},
			Diff: []FieldDiff{
				{Path: "base", Before: raw(`"scratch"`), After: raw(`"registry.example/base@sha256:4e1f0b2c"`), ForcesReplace: true},
				{Path: "platforms", Before: raw(`["linux/arm64"]`), After: raw(`["linux/amd64","linux/arm64"]`)},
			},
			Before: raw(`{"base":"scratch","platforms":["linux/arm64"]}`),
			After:  raw(`{"base":"registry.example/base@sha256:4e1f0b2c","platforms":["linux/amd64","linux/arm64"]}`),
		},
		{
			Address: "workspace.alpha",
			Kind:    schema.KindWorkspace,
			Name:    "alpha",
			Action:  Update,
			Risks:   []Risk{{Code: "permission_widening", Reason: "policy grows from read_only to workspace_write | egress shrinks"}},
			Diff: []FieldDiff{
				{Path: `labels["a.b"]`, Before: raw(`"blue"`), After: raw(`"green"`)},
				{Path: "limits.memory", After: raw(`"2GiB"`)},
				{Path: "network.egress", Before: raw(`["api.openai.com"]`)},
				{Path: "policy", Before: raw(`"read_only"`), After: raw(`"workspace_write"`)},
			},
			Before: raw(`{"labels":{"a.b":"blue"},"network":{"egress":["api.openai.com"]},"policy":"read_only"}`),
			After:  raw(`{"labels":{"a.b":"green"},"limits":{"memory":"2GiB"},"policy":"workspace_write"}`),
		},
		{
			Address: "job.nightly-digest",
			Kind:    schema.KindJob,
			Name:    "nightly-digest",
			Action:  Create,
			Risks:   []Risk{},
			Refused: []Refusal{{Code: "disabled_requested_provider", Reason: "provider codex of connection team-codex is disabled"}},
			Diff: []FieldDiff{
				{Path: "connection", After: raw(`"team-codex"`)},
				{Path: "prompt", After: raw(`"Summarise \"today\" <in> & out"`)},
				{Path: "schedule.cron", After: raw(`"0 2 * * *"`)},
				{Path: "skills", After: raw(`["digest","notify"]`)},
			},
			Before: raw(`null`),
			After:  raw(`{"connection":"team-codex","prompt":"Summarise \"today\" <in> & out","schedule":{"cron":"0 2 * * *"},"skills":["digest","notify"]}`),
		},
		{
			Address: "connection.old-api",
			Kind:    schema.KindConnection,
			Name:    "old-api",
			Action:  Delete,
			Risks:   []Risk{{Code: "destructive", Reason: "deleting connection old-api"}},
			Diff: []FieldDiff{
				{Path: "billing", Before: raw(`"api"`)},
				{Path: "provider", Before: raw(`"codex"`)},
			},
			Before: raw(`{"billing":"api","provider":"codex"}`),
			After:  raw(`null`),
		},
	}
	p := &Plan{
		FormatVersion: FormatVersion,
		NlxVersion:    "v0.1.0-test",
		Actor:         "ci",
		State:         StateRef{Lineage: testLineage, Serial: 7},
		Unknowns:      []Unknown{{Address: "workspace.beta", Action: Create, ApplyID: 4, At: "2026-11-29T08:00:00Z"}},
		Inputs: Inputs{
			ConfigDir:  "examples/pi-team",
			ConfigHash: testConfigHash,
			Files: []schema.InputFile{
				{Path: "main.cue", SHA256: "1f3a5c7e9b0d2f4a6c8e0b1d3f5a7c9e2b4d6f8a0c1e3b5d7f9a2c4e6b8d0f1a", Size: 2048},
				{Path: "skills/digest/SKILL.md", SHA256: "a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b1", Size: 311},
			},
			Dirs: []string{"skills/digest"},
		},
		Changes: changes,
		Summary: Summarize(changes),
	}
	for i := range p.Changes {
		if p.Changes[i].Refused == nil {
			p.Changes[i].Refused = []Refusal{}
		}
	}
	fillHash(t, p)
	return p
}

// emptyPlan is a plan that changes nothing. Its hash is filled.
func emptyPlan(t testing.TB) *Plan {
	t.Helper()
	p := &Plan{
		FormatVersion: FormatVersion,
		NlxVersion:    "v0.1.0-test",
		State:         StateRef{Lineage: testLineage, Serial: 3},
		Inputs: Inputs{
			ConfigDir:  "examples/pi-team",
			ConfigHash: testConfigHash,
			Files:      []schema.InputFile{},
		},
		Changes: []Change{},
	}
	fillHash(t, p)
	return p
}

func fillHash(t testing.TB, p *Plan) {
	t.Helper()
	h, err := Hash(p)
	if err != nil {
		t.Fatalf("Hash: %v", err)
	}
	p.PlanHash = h
}
