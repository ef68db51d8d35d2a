package images

import (
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

func TestParsePlatform(t *testing.T) {
	arm64 := v1.Platform{OS: "linux", Architecture: "arm64", Variant: "v8"}
	amd64 := v1.Platform{OS: "linux", Architecture: "amd64"}
	tests := []struct {
		in   string
		want v1.Platform
		ok   bool
	}{
		{"linux/arm64", arm64, true},
		{"linux/arm64/v8", arm64, true},
		{"linux/amd64", amd64, true},
		{"linux/amd64/v8", amd64, true},
		{"linux/arm64/v7", v1.Platform{}, false},
		{"linux/arm/v7", v1.Platform{}, false},
		{"darwin/arm64", v1.Platform{}, false},
		{"linux/arm64:10.0", v1.Platform{}, false},
		{"linux/arm64:a:b", v1.Platform{}, false},
		{" linux/arm64", v1.Platform{}, false},
		{"linux/arm64/", v1.Platform{}, false},
		{"linux/arm64/v8/x", v1.Platform{}, false},
		{"linux", v1.Platform{}, false},
		{"", v1.Platform{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParsePlatform(tt.in)
			if (err == nil) != tt.ok {
				t.Fatalf("ParsePlatform(%q): %v, want ok %v", tt.in, err, tt.ok)
			}
			if err != nil {
				if want := `platform "` + tt.in + `": want linux/arm64 or linux/amd64`; err.Error() != want {
					t.Errorf("error %q, want %q", err, want)
				}
				return
			}
			if !got.Equals(tt.want) {
				t.Errorf("ParsePlatform(%q) = %+v, want %+v", tt.in, got, tt.want)
			}
		})
	}
}
