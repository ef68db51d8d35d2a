package testtool

import (
	"encoding/json"
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

// TestCIInstallsEveryProvider: .ci/run runs `make providers`, and the
// lockfile pins every provider the tests drive, by version and hash.
func TestCIInstallsEveryProvider(t *testing.T) {
	ci, err := os.ReadFile("../../.ci/run")
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^make providers$`).Match(ci) {
		t.Error(".ci/run does not run `make providers`")
	}
	lock, err := os.ReadFile("../../provider/npm/package-lock.json")
	if err != nil {
		t.Fatal(err)
	}
	var l struct {
		Packages map[string]struct {
			Version   string `json:"version"`
			Integrity string `json:"integrity"`
		} `json:"packages"`
	}
	if err := json.Unmarshal(lock, &l); err != nil {
		t.Fatal(err)
	}
	for name, pkg := range Providers {
		p, ok := l.Packages["node_modules/"+pkg]
		if !ok || p.Version == "" || !strings.HasPrefix(p.Integrity, "sha512-") {
			t.Errorf("provider/npm/package-lock.json does not pin %s (%s) by version and sha512 integrity: %+v", name, pkg, p)
		}
	}
}
