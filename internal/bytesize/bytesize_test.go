package bytesize

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		in    string
		want  int64
		ok    bool
		large bool // refused as too large, not as malformed
	}{
		{"0", 0, true, false},
		{"100", 100, true, false},
		{"4Ki", 4096, true, false},
		{"512Mi", 512 << 20, true, false},
		{"2Gi", 2 << 30, true, false},
		{"8589934591Gi", 8589934591 << 30, true, false},
		{"9223372036854775807", 1<<63 - 1, true, false},
		{"", 0, false, false},
		{"Mi", 0, false, false},
		{"-", 0, false, false},
		{"-1", 0, false, false},
		{"+1", 0, false, false},
		{"1.5Gi", 0, false, false},
		{"2GB", 0, false, false},
		{"2 Gi", 0, false, false},
		{"9999999999Gi", 0, false, true},
		{"8589934592Gi", 0, false, true},
		{"17179869185Gi", 0, false, true}, // 1 GiB, were it wrapped around 2^64
		{"9223372036854775808", 0, false, true},
		{"99999999999999999999999Ki", 0, false, true},
	}
	for _, tt := range tests {
		got, err := Parse(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("Parse(%q) = %d, %v; want %d, ok %v", tt.in, got, err, tt.want, tt.ok)
		}
		if err != nil && strings.Contains(err.Error(), "too large") != tt.large {
			t.Errorf("Parse(%q): %v; want too large %v", tt.in, err, tt.large)
		}
	}
}

func TestFormat(t *testing.T) {
	tests := []struct {
		in   int64
		want string
	}{
		{2 << 30, "2 GiB"},
		{128 << 20, "128 MiB"},
		{1536 << 10, "1536 KiB"},
		{100, "100 bytes"},
		{0, "0 bytes"},
	}
	for _, tt := range tests {
		if got := Format(tt.in); got != tt.want {
			t.Errorf("Format(%d) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestHuman(t *testing.T) {
	for _, tt := range []struct {
		n    int64
		want string
	}{{0, "0 B"}, {1023, "1023 B"}, {1024, "1.0 KiB"}, {12_900_000, "12.3 MiB"}, {3 << 30, "3.0 GiB"}} {
		if got := Human(tt.n); got != tt.want {
			t.Errorf("Human(%d) = %q, want %q", tt.n, got, tt.want)
		}
	}
}
