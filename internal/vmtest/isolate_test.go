package vmtest_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nlx-dev/nlx/internal/vmtest"
)

// isolateGuest is an amd64 guest holding isolate's test binary, the
// host's bubblewrap and runc with their libraries.
func isolateGuest(t *testing.T) *vmtest.Guest {
	g := vmtest.NewGuest(t, vmtest.AMD64)
	if err := g.Initramfs.HostFile("isolate.test", vmtest.Build(t, vmtest.AMD64, "./isolate", true)); err != nil {
		t.Fatal(err)
	}
	g.AddHostProgram(t, "bwrap")
	g.AddHostProgram(t, "runc")
	g.Env["CI"] = "true" // in the guest every tool is there: a skip would be a failure
	return g
}

// TestIsolateOnCgroupV2 runs isolate's limit tests in a guest with cgroup
// v2 alone, as on the Raspberry Pi: both backends, the memory balloon
// killed in its cgroup, the fork bomb stopped at pids.max, the process in
// its cgroup before it runs, the cgroup emptied and removed at stop.
func TestIsolateOnCgroupV2(t *testing.T) {
	g := isolateGuest(t)
	r := g.Run(t, 3*time.Minute, "/isolate.test", "-test.v", "-test.count=1",
		"-test.run", "^(TestMemoryBalloon|TestForkBomb|TestLimitsApplied|TestCgroupBeforeExec|TestCgroupLifecycle|TestRequireControllers|TestDoctor)$")
	t.Logf("guest ran in %s", r.Took)
	if r.Code != 0 || skipped(r.Console, "TestCgroupLifecycle/v1") {
		t.Fatalf("isolate tests in the v2 guest: exit %d\n%s", r.Code, r.Console)
	}
	requirePassed(t, r.Console, "TestMemoryBalloon/bwrap/shell", "TestMemoryBalloon/runc/grandchild", "TestForkBomb/bwrap/shell",
		"TestForkBomb/runc/shell", "TestLimitsApplied/bwrap", "TestLimitsApplied/runc", "TestCgroupBeforeExec/direct/bwrap",
		"TestCgroupBeforeExec/direct/runc", "TestCgroupLifecycle/unified", "TestRequireControllers", "TestDoctor")
}

// skipped reports a skipped test in a guest's verbose output, but for the
// allowed ones (a v1 case on a v2-only guest).
func skipped(console string, allowed ...string) bool {
	for _, line := range strings.Split(console, "\n") {
		name, ok := strings.CutPrefix(strings.TrimSpace(line), "--- SKIP: ")
		if !ok {
			continue
		}
		name, _, _ = strings.Cut(name, " ")
		if !slices.Contains(allowed, name) {
			return true
		}
	}
	return false
}

// requirePassed fails t unless the guest's verbose output says each test
// passed: a pattern that matched nothing would pass silently otherwise.
func requirePassed(t *testing.T, console string, names ...string) {
	t.Helper()
	for _, n := range names {
		if !strings.Contains(console, "--- PASS: "+n+" ") {
			t.Errorf("%s did not pass in the guest", n)
		}
	}
}
