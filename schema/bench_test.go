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
