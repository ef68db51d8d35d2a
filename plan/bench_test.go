package plan

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/nlx-dev/nlx/schema"
)

// benchPlan is a first plan of a fleet: n creates with field diffs.
func benchPlan(n int) *Plan {
	p := &Plan{FormatVersion: FormatVersion, NlxVersion: "bench", State: StateRef{Lineage: "l", Serial: 1}}
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("job-%05d", i)
		after := json.RawMessage(fmt.Sprintf(`{"workspace":"ws-%d","connection":"c-%d","schedule":{"cron":"%d 7 * * *","timezone":"Europe/Berlin"},"prompt":"Summarise part %d.","enabled":true}`, i, i, i%60, i))
		p.Changes = append(p.Changes, Change{
			Address: "job." + name, Kind: schema.KindJob, Name: name, Action: Create, Risks: []Risk{},
			Before: json.RawMessage("null"), After: after,
			Diff: []FieldDiff{
				{Path: "connection", After: json.RawMessage(fmt.Sprintf(`"c-%d"`, i))},
				{Path: "enabled", After: json.RawMessage(`true`)},
				{Path: "prompt", After: json.RawMessage(fmt.Sprintf(`"Summarise part %d."`, i))},
				{Path: "schedule.cron", After: json.RawMessage(fmt.Sprintf(`"%d 7 * * *"`, i%60))},
				{Path: "schedule.timezone", After: json.RawMessage(`"Europe/Berlin"`)},
				{Path: "workspace", After: json.RawMessage(fmt.Sprintf(`"ws-%d"`, i))},
			},
		})
	}
	p.Summary = Summarize(p.Changes)
	return p
}

// BenchmarkEncode is the canonical encoder against its peer, encoding/json,
// which produces the same bytes (TestCanonicalMatchesEncodingJSON).
func BenchmarkEncode(b *testing.B) {
	p := benchPlan(10000)
	b.Run("canonical", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := canonical(p); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := JSON(p); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkRead is reading a plan file (strict decoding, hash check,
// canonical-form check) against its peer, a plain json.Unmarshal of the
// same bytes that checks nothing.
func BenchmarkRead(b *testing.B) {
	p := benchPlan(10000)
	data, err := Encode(p)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.Run("read", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := Read(bytes.NewReader(data)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var q Plan
			if err := json.Unmarshal(data, &q); err != nil {
				b.Fatal(err)
			}
		}
	})
}
