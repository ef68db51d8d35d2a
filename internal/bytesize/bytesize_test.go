package bytesize

import "testing"

func TestParse(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"0", 0, true},
		{"100", 100, true},
		{"4Ki", 4096, true},
		{"512Mi", 512 << 20, true},
		{"2Gi", 2 << 30, true},
		{"", 0, false},
		{"Mi", 0, false},
		{"-1", 0, false},
		{"+1", 0, false},
		{"1.5Gi", 0, false},
		{"2GB", 0, false},
		{"2 Gi", 0, false},
		{"9999999999Gi", 0, false},
	}
	for _, tt := range tests {
		got, err := Parse(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("Parse(%q) = %d, %v; want %d, ok %v", tt.in, got, err, tt.want, tt.ok)
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
