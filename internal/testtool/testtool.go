// Package testtool finds the programs tests use as second implementations
// and real peers (skopeo, umoci, a registry, qemu, the sandboxes). A test
// that needs one skips, saying why, where it is missing; under CI=true,
// where .ci/run installs every one of them, a missing tool fails the test:
// CI never passes by skipping.
package testtool

import (
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// Packages maps each tool to the Debian package that has it; .ci/run
// installs exactly these (TestCIInstallsEveryTool).
var Packages = map[string]string{
	"skopeo":              "skopeo",
	"umoci":               "umoci",
	"docker-registry":     "docker-registry",
	"qemu-aarch64-static": "qemu-user-static",
	"bwrap":               "bubblewrap",
	"runc":                "runc",
	"scmp_sys_resolver":   "seccomp",
	"ssh-keygen":          "openssh-client",
	"ssh-agent":           "openssh-client",
	"useradd":             "passwd",
	"qemu-system-x86_64":  "qemu-system-x86",
	"qemu-system-aarch64": "qemu-system-arm",
}

// InCI reports whether the tests run under CI (CI=true), where every tool
// is installed.
func InCI() bool { return os.Getenv("CI") == "true" }

// Need returns the path of tool, or skips t (fails it under CI) when it is
// not installed.
func Need(t testing.TB, tool string) string {
	t.Helper()
	path, err := exec.LookPath(tool)
	if err == nil {
		return path
	}
	pkg := Packages[tool]
	if pkg == "" {
		t.Fatalf("testtool: %s is not a tool .ci/run installs; add it to Packages and .ci/run", tool)
	}
	if InCI() {
		t.Fatalf("%s is not installed under CI=true (Debian package %s; .ci/run installs it): %v", tool, pkg, err)
	}
	t.Skipf("%s is not installed (Debian package %s; .ci/run installs it)", tool, pkg)
	return ""
}

// cgroupGlob matches nlx's cgroups, /nlx/ID in every hierarchy, on v1 and
// hybrid hosts (one hierarchy per controller); /sys/fs/cgroup/nlx/* on v2.
const cgroupGlob = "/sys/fs/cgroup/*/nlx/*"

// nlxCgroups lists the cgroup directories under /nlx, in every hierarchy.
func nlxCgroups() map[string]bool {
	out := map[string]bool{}
	for _, g := range []string{cgroupGlob, "/sys/fs/cgroup/nlx/*"} {
		paths, _ := filepath.Glob(g)
		for _, p := range paths {
			if fi, err := os.Stat(p); err == nil && fi.IsDir() {
				out[p] = true
			}
		}
	}
	return out
}

// Sweep notes the cgroups under /nlx before a package's tests run; the
// function it returns lists, and removes, every empty one the tests left
// behind (a cgroup with processes is a concurrent run's, not a leak). A
// package's TestMain fails when there is one: tests clean up every cgroup
// they create.
func Sweep() func() []string {
	before := nlxCgroups()
	return func() []string {
		var left []string
		for p := range nlxCgroups() {
			if before[p] {
				continue
			}
			if !empty(p) {
				continue
			}
			left = append(left, p)
			removeTree(p)
		}
		slices.Sort(left)
		return left
	}
}

// RunSwept runs m and fails it when its tests leave a cgroup behind.
func RunSwept(m *testing.M) int {
	sweep := Sweep()
	code := m.Run()
	if left := sweep(); len(left) > 0 {
		fmt.Fprintf(os.Stderr, "FAIL: the tests left %d cgroup(s) behind (removed now):\n  %s\n", len(left), strings.Join(left, "\n  "))
		if code == 0 {
			code = 1
		}
	}
	return code
}

// empty reports whether the cgroup at dir, and every cgroup below it, has
// no process.
func empty(dir string) bool {
	ok := true
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		if procs, err := os.ReadFile(filepath.Join(path, "cgroup.procs")); err != nil || len(strings.TrimSpace(string(procs))) > 0 {
			ok = false
			return filepath.SkipAll
		}
		return nil
	})
	return ok
}

// removeTree removes the cgroup at dir and those below it, deepest first
// (a cgroup directory goes with rmdir only).
func removeTree(dir string) {
	var dirs []string
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, path)
		}
		return nil
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		os.Remove(dirs[i])
	}
}

// Exchange keeps exchanging the paths a and b (renameat2 RENAME_EXCHANGE,
// atomic) in a goroutine until the returned stop is called: the race that
// a check-then-use of either path loses. stop waits for the goroutine.
func Exchange(t testing.TB, a, b string) (stop func()) {
	t.Helper()
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			if err := unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE); err != nil {
				t.Errorf("exchange %s and %s: %v", a, b, err)
				return
			}
		}
	}()
	return func() {
		close(done)
		wg.Wait()
	}
}

// Providers maps each real provider program the tests drive to the npm
// package that has it; `make providers` installs exactly these, pinned by
// provider/npm's lockfile, and .ci/run runs it.
var Providers = map[string]string{
	"codex":  "@openai/codex",
	"claude": "@anthropic-ai/claude-code",
}

// NeedProvider returns the absolute path of a provider program: the one
// `make providers` installed in the module's .providers/, else one on
// PATH. It skips t where neither is (fails it under CI=true).
func NeedProvider(t testing.TB, name string) string {
	t.Helper()
	pkg := Providers[name]
	if pkg == "" {
		t.Fatalf("testtool: %s is not a provider `make providers` installs; add it to Providers and provider/npm", name)
	}
	if root, err := moduleRoot(); err == nil {
		p := filepath.Join(root, ".providers", "node_modules", ".bin", name)
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		if abs, err := filepath.Abs(p); err == nil {
			return abs
		}
	}
	if InCI() {
		t.Fatalf("%s (npm %s) is not installed under CI=true: .ci/run runs `make providers`", name, pkg)
	}
	t.Skipf("%s (npm %s) is not installed: run `make providers`", name, pkg)
	return ""
}

// moduleRoot is the directory of the go.mod above the working directory.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod above the working directory")
		}
		dir = parent
	}
}
