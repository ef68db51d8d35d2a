package reconcile

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/nlx-dev/nlx/internal/testgen"
	"github.com/nlx-dev/nlx/schema"
)

func fleetResources(b *testing.B, workspaces int) []Resource {
	b.Helper()
	dir := filepath.Join(b.TempDir(), "fleet")
	if err := (testgen.Fleet{Workspaces: workspaces, JobsPerSpace: 5}).Write(dir); err != nil {
		b.Fatal(err)
	}
	cfg, err := schema.Load(context.Background(), dir)
	if err != nil {
		b.Fatal(err)
	}
	desired, err := Desired(cfg)
	if err != nil {
		b.Fatal(err)
	}
	return desired
}

// BenchmarkDiff diffs a fleet against an empty state (every field of every
// resource) and against itself (hash comparison only).
func BenchmarkDiff(b *testing.B) {
	desired := fleetResources(b, 500)
	b.Run("create-all", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := Diff(desired, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("no-change", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := Diff(desired, desired); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkLeaves is the JSON scanner against its peer, decoding.
func BenchmarkLeaves(b *testing.B) {
	desired := fleetResources(b, 100)
	b.Run("scan", func(b *testing.B) {
		for b.Loop() {
			for _, r := range desired {
				if _, err := leaves(r.Spec); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("decode", func(b *testing.B) {
		for b.Loop() {
			for _, r := range desired {
				if _, err := decodedLeaves(r.Spec); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}
