package reconcile_test

import (
	"testing"

	"github.com/nlx-dev/nlx/internal/reason"
	"github.com/nlx-dev/nlx/reconcile"
	"github.com/nlx-dev/nlx/schema"
)

// TestCheckExpected: each count and hash the preservation expects that
// the export does not have refuses the import, with its own code.
func TestCheckExpected(t *testing.T) {
	im := &reconcile.Import{ExportDir: "/x", Counts: map[string]int64{"jobs": 70, "sessions": 800},
		Hashes: map[string]string{"jobs": "sha256:aa"}}
	tests := []struct {
		name     string
		expected schema.Expected
		want     []reason.Code
	}{
		{"as expected", schema.Expected{Counts: map[string]int64{"jobs": 70}, Hashes: map[string]string{"jobs": "sha256:aa"}}, nil},
		{"nothing expected", schema.Expected{}, nil},
		{"a count differs", schema.Expected{Counts: map[string]int64{"jobs": 71, "sessions": 800}}, []reason.Code{reason.PreservationCountMismatch}},
		{"a kind the export has none of", schema.Expected{Counts: map[string]int64{"skills": 3}}, []reason.Code{reason.PreservationCountMismatch}},
		{"a hash differs", schema.Expected{Hashes: map[string]string{"jobs": "sha256:bb"}}, []reason.Code{reason.PreservationHashMismatch}},
		{"both", schema.Expected{Counts: map[string]int64{"sessions": 1}, Hashes: map[string]string{"jobs": "sha256:bb"}},
			[]reason.Code{reason.PreservationCountMismatch, reason.PreservationHashMismatch}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := reconcile.CheckExpected(&schema.Preservation{Expected: tt.expected}, im)
			if len(got) != len(tt.want) {
				t.Fatalf("refusals %+v, want codes %v", got, tt.want)
			}
			for i := range got {
				if got[i].Code != tt.want[i] {
					t.Errorf("refusal %d: %s, want %s", i, got[i].Code, tt.want[i])
				}
			}
		})
	}
}
