package testtool

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestCIInstallsEveryTool: .ci/run installs the package of every tool the
// tests need, and nothing they do not.
func TestCIInstallsEveryTool(t *testing.T) {
	data, err := os.ReadFile("../../.ci/run")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*pkgs="([^"]*)"`).FindSubmatch(data)
	if m == nil {
		t.Fatal(`.ci/run has no pkgs="..." line`)
	}
	got := strings.Fields(string(m[1]))
	var want []string
	for _, p := range Packages {
		if !slices.Contains(want, p) {
			want = append(want, p)
		}
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf(".ci/run installs %v, the tests need %v", got, want)
	}
}
