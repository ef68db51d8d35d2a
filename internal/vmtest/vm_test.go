package vmtest_test

import (
	"strings"
	"testing"
	"time"

	"github.com/nlx-dev/nlx/internal/vmtest"
)

// TestBoot: a guest of each architecture boots the pinned kernel, runs a
// command on cgroup v2 alone with the controllers enabled, and reports its
// exit code.
func TestBoot(t *testing.T) {
	for _, arch := range []vmtest.Arch{vmtest.AMD64, vmtest.ARM64} {
		t.Run(string(arch), func(t *testing.T) {
			g := vmtest.NewGuest(t, arch)
			r := g.Run(t, time.Minute, "/bin/sh", "-c", "uname -m; cat /sys/fs/cgroup/cgroup.subtree_control; ls /sys/fs/cgroup/memory.stat >/dev/null && echo v2-root; exit 3")
			if r.Code != 3 {
				t.Fatalf("exit %d, want 3:\n%s", r.Code, r.Console)
			}
			want := map[vmtest.Arch]string{vmtest.AMD64: "x86_64", vmtest.ARM64: "aarch64"}[arch]
			for _, s := range []string{want, "cpu memory pids"} {
				if !strings.Contains(r.Console, s) {
					t.Errorf("console lacks %q:\n%s", s, r.Console)
				}
			}
			t.Logf("%s guest: %s", arch, r.Took)
		})
	}
}
