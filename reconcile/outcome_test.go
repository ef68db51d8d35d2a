package reconcile

import "testing"

func TestParseOutcome(t *testing.T) {
	tests := []struct {
		in   string
		want Outcome
		err  string
	}{
		{"applied", OutcomeApplied, ""},
		{"not_applied", OutcomeNotApplied, ""},
		{"not-applied", OutcomeNotApplied, ""},
		{"Applied", "", `invalid_usage: --outcome "Applied": want applied or not-applied`},
		{"", "", `invalid_usage: --outcome "": want applied or not-applied`},
	}
	for _, tt := range tests {
		got, err := ParseOutcome(tt.in)
		switch {
		case tt.err != "" && (err == nil || err.Error() != tt.err):
			t.Errorf("ParseOutcome(%q): %v, want %s", tt.in, err, tt.err)
		case tt.err == "" && (err != nil || got != tt.want):
			t.Errorf("ParseOutcome(%q) = %q, %v, want %q", tt.in, got, err, tt.want)
		}
	}
}
