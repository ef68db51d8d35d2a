package schema

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/nlx-dev/nlx/internal/testgen"
)

// BenchmarkLoad loads a generated fleet on the fast path and, as its peer,
// through full CUE unification with #Config (make bench prints the ratio).
func BenchmarkLoad(b *testing.B) {
	dir := filepath.Join(b.TempDir(), "fleet")
	fleet := testgen.Fleet{Workspaces: 500, JobsPerSpace: 5}
	if err := fleet.Write(dir); err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name string
		opts Options
	}{{"fast", Options{}}, {"cue", Options{ForceCUE: true}}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := LoadWith(context.Background(), dir, bc.opts); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(fleet.Resources()), "resources")
		})
	}
}

// BenchmarkChild measures what LoadBudgeted adds to Load: on a small config
// the process start and the round trip of its result ("budgeted" against
// "in-process", make bench prints the difference), and the encoding and
// decoding of a fleet's result.
func BenchmarkChild(b *testing.B) {
	for _, bc := range []struct {
		name string
		load func() error
	}{
		{"in-process", func() error { _, err := Load(context.Background(), "testdata/base"); return err }},
		{"budgeted", func() error {
			_, err := LoadBudgeted(context.Background(), "testdata/base", DefaultBudget())
			return err
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				if err := bc.load(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	dir := filepath.Join(b.TempDir(), "fleet")
	if err := (testgen.Fleet{Workspaces: 2000, JobsPerSpace: 5}).Write(dir); err != nil {
		b.Fatal(err)
	}
	cfg, err := Load(context.Background(), dir)
	if err != nil {
		b.Fatal(err)
	}
	data := encodeResult(cfg, nil)
	b.Run("encode-14k", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			encodeResult(cfg, nil)
		}
	})
	b.Run("decode-14k", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			if _, ok := decodeResult(data); !ok {
				b.Fatal("no result")
			}
		}
	})
}
