package reconcile_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/nlx-dev/nlx/plan"
	"github.com/nlx-dev/nlx/reconcile"
	"github.com/nlx-dev/nlx/schema"
)

func sampleSnapshot() *reconcile.Snapshot {
	spec := func(s string) json.RawMessage { return json.RawMessage(s) }
	rs := []reconcile.Resource{
		{Kind: schema.KindHost, Name: schema.HostName, Status: reconcile.StatusActive, Spec: spec(`{"operators":["alice"],"twoPersonRule":true}`)},
		{Kind: schema.KindJob, Name: "imported", Status: reconcile.StatusHeld, Spec: spec(`{"prompt":"say \"hi\" <b> & \u00e9","workspace":"w"}`)},
		{Kind: schema.KindWorkspace, Name: "w", Status: reconcile.StatusActive, Spec: spec(`{"members":{"alice":"admin"}}`)},
	}
	for i := range rs {
		rs[i].Hash = reconcile.HashSpec(rs[i].Spec)
	}
	return &reconcile.Snapshot{Lineage: "7c1e4a52-3f7b-4d0e-9a61-2b8f0c9d5e13", Serial: 4, Resources: rs,
		Unknowns:      []plan.Unknown{{Address: "workspace.w", Action: plan.Create, ApplyID: 3, At: "2026-12-01T10:00:00Z"}},
		UnknownClaims: []plan.UnknownClaim{{ID: "c-1", Job: "imported", Workspace: "w", Connection: "k", ScheduledAt: "2026-12-01T09:00:00Z", At: "2026-12-01T09:00:01Z"}},
		Held:          map[string]reconcile.HeldImport{"job.imported": {Preservation: "oc", Manifest: "sha256:ab", Unsupported: []string{"channel"}}}}
}

// TestSnapshotRoundTrip: what EncodeSnapshot writes, DecodeSnapshot reads
// back as the same snapshot with the same basis, which is Snapshot.Basis.
func TestSnapshotRoundTrip(t *testing.T) {
	for _, s := range []*reconcile.Snapshot{sampleSnapshot(), {}} {
		data, basis, err := reconcile.EncodeSnapshot(s)
		if err != nil {
			t.Fatal(err)
		}
		back, got, err := reconcile.DecodeSnapshot(data)
		if err != nil {
			t.Fatalf("decode: %v\n%s", err, data)
		}
		if want, _ := s.Basis(); got != basis || basis != want {
			t.Fatalf("basis: encode %s, decode %s, Basis %s", basis, got, want)
		}
		again, _, _ := reconcile.EncodeSnapshot(back)
		if !bytes.Equal(again, data) {
			t.Fatalf("re-encoded differently:\n%s\n%s", data, again)
		}
	}
}

// TestSnapshotEncodingMatchesJSON is the oracle of the hand-written
// encoding: it is byte for byte encoding/json's of the same document.
func TestSnapshotEncodingMatchesJSON(t *testing.T) {
	s := sampleSnapshot()
	data, basis, err := reconcile.EncodeSnapshot(s)
	if err != nil {
		t.Fatal(err)
	}
	type res struct {
		Kind   schema.Kind              `json:"kind"`
		Name   string                   `json:"name"`
		Status reconcile.ResourceStatus `json:"status"`
		Hash   string                   `json:"hash"`
		Spec   json.RawMessage          `json:"spec"`
	}
	type held struct {
		Preservation string   `json:"preservation"`
		Manifest     string   `json:"manifest"`
		Unsupported  []string `json:"unsupported"`
	}
	doc := struct {
		Format        string              `json:"format"`
		FormatVersion int                 `json:"format_version"`
		Lineage       string              `json:"lineage"`
		Serial        int64               `json:"serial"`
		Resources     []res               `json:"resources"`
		Unknowns      []plan.Unknown      `json:"unknown_outcomes"`
		UnknownClaims []plan.UnknownClaim `json:"unknown_claims"`
		Held          map[string]held     `json:"held"`
		Basis         string              `json:"basis"`
	}{Format: reconcile.SnapshotFormat, FormatVersion: reconcile.SnapshotVersion, Lineage: s.Lineage, Serial: s.Serial,
		Unknowns: s.Unknowns, UnknownClaims: s.UnknownClaims, Held: map[string]held{}, Basis: basis}
	for _, r := range s.Resources {
		doc.Resources = append(doc.Resources, res{r.Kind, r.Name, r.Status, r.Hash, r.Spec})
	}
	for a, h := range s.Held {
		doc.Held[a] = held{h.Preservation, h.Manifest, h.Unsupported}
	}
	want, err := plan.JSON(doc)
	if err != nil {
		t.Fatal(err)
	}
	if got := bytes.TrimRight(data, "\n"); !bytes.Equal(got, want) {
		t.Fatalf("hand-written:\n%s\nencoding/json:\n%s", got, want)
	}
}

// TestDecodeSnapshotRefuses: a snapshot changed in any way after it was
// written is not read.
func TestDecodeSnapshotRefuses(t *testing.T) {
	data, _, err := reconcile.EncodeSnapshot(sampleSnapshot())
	if err != nil {
		t.Fatal(err)
	}
	s := string(data)
	tests := []struct{ name, doc, want string }{
		{"a spec edited", strings.Replace(s, `"alice":"admin"`, `"alice":"member"`, 1), "its hash is not its spec's"},
		{"doctored whole, basis recomputed", func() string {
			d := sampleSnapshot()
			d.Resources[2].Spec = json.RawMessage(`{"members":{"mallory":"admin"}}`)
			d.Resources[2].Hash = reconcile.HashSpec(d.Resources[2].Spec)
			b, _, _ := reconcile.EncodeSnapshot(d)
			return string(b)
		}(), ""},
		{"the serial edited", strings.Replace(s, `"serial":4`, `"serial":5`, 1), "its basis is not the hash of its content"},
		{"an unknown claim dropped", strings.Replace(s, `"unknown_claims":[{`, `"unknown_claims":[],"x":[{`, 1), "unknown field"},
		{"whitespace", strings.Replace(s, `"serial":4`, `"serial": 4`, 1), "its basis is not the hash of its content"},
		{"another format", strings.Replace(s, reconcile.SnapshotFormat, "nlx-plan", 1), "format"},
		{"a newer version", strings.Replace(s, `"format_version":1`, `"format_version":2`, 1), "format_version 2"},
		{"a name edited", strings.Replace(s, `"name":"imported"`, `"name":"zzz"`, 1), "its basis is not"},
		{"trailing data", s + "{}", "data after the snapshot"},
		{"not JSON", "hello", "not an nlx state snapshot"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := reconcile.DecodeSnapshot([]byte(tt.doc))
			if tt.want == "" {
				// A snapshot doctored whole (hashes and basis recomputed)
				// reads: only the host, by refusing the plan, tells.
				if err != nil {
					t.Fatalf("a consistent snapshot was refused: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("DecodeSnapshot: %v, want %q", err, tt.want)
			}
		})
	}
}

func FuzzDecodeSnapshot(f *testing.F) {
	data, _, _ := reconcile.EncodeSnapshot(sampleSnapshot())
	f.Add(data)
	f.Add([]byte(`{"format":"nlx-state-snapshot","format_version":1}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, basis, err := reconcile.DecodeSnapshot(b)
		if err != nil {
			return
		}
		// What reads is exactly its own encoding, with its basis.
		again, b2, err := reconcile.EncodeSnapshot(s)
		if err != nil || b2 != basis || !bytes.Equal(bytes.TrimRight(again, "\n"), bytes.TrimRight(b, "\n")) {
			t.Fatalf("read a snapshot that is not its own encoding: %v", err)
		}
	})
}
