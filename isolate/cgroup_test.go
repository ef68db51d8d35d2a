package isolate

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/cgroups/v3/cgroup2"
)

// TestCgroupLifecycle drives each half of the layer on its own: v1
// (cgroup1) with the unified hierarchy hidden, and the unified hierarchy
// (cgroup2) with v1 hidden, whatever controllers it holds (on a hybrid
// host, where the launch tests only reach v1, usually none: every v2
// cgroup still has cgroup.procs, cgroup.freeze and cgroup.kill). A process
// is created inside the cgroup, another is moved in, both are listed,
// frozen, thawed and killed, and the cgroup is removed.
func TestCgroupLifecycle(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates cgroups under /nlx")
	}
	full, err := loadCgroupHost()
	if err != nil {
		t.Fatal(err)
	}
	t.Run("v1", func(t *testing.T) {
		h := &cgroupHost{mode: full.mode, v1: full.v1, memsw: full.memsw}
		if !h.has("memory") || !h.has("pids") || h.subsystem("freezer") == nil {
			t.Skip("no v1 memory, pids and freezer")
		}
		cg, err := h.create(DefaultCgroupParent+"/v1-"+newID(), []string{"memory", "pids"}, resources(Limits{MemoryBytes: 64 << 20, Pids: 16}), true, false)
		if err != nil {
			t.Fatal(err)
		}
		state := filepath.Join(cg.v1Dir("freezer"), "freezer.state")
		lifecycle(t, cg, func() string { return readTrim(t, state) }, "FROZEN", "THAWED")
	})
	t.Run("unified", func(t *testing.T) {
		if full.unified == "" {
			t.Skip("no unified hierarchy")
		}
		h := &cgroupHost{mode: full.mode, unified: full.unified, v2: full.v2}
		path := DefaultCgroupParent + "/v2-" + newID()
		// create needs a controller on v2; the rest of the layer does not.
		must(t, claim(filepath.Join(h.unified, path)))
		m, err := cgroup2.NewManager(h.unified, path, &cgroup2.Resources{})
		if err != nil {
			t.Fatal(err)
		}
		cg := &cgroup{host: h, path: path, v2: m}
		events := filepath.Join(cg.v2Dir(), "cgroup.events")
		frozen := func() string {
			for _, l := range strings.Split(readTrim(t, events), "\n") {
				if strings.HasPrefix(l, "frozen ") {
					return l
				}
			}
			return ""
		}
		lifecycle(t, cg, frozen, "frozen 1", "frozen 0")
	})
}

func lifecycle(t *testing.T, cg *cgroup, freezeState func() string, frozen, thawed string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	t.Cleanup(func() {
		killTree(cg)
		cg.remove(context.Background())
		assertCgroupGone(t, cg.path)
	})
	for _, d := range cg.host.dirs(cg.path) {
		if _, err := os.Stat(d); err == nil {
			if err := claim(d); err == nil || !strings.Contains(err.Error(), "launch id in use") {
				t.Errorf("claiming an existing cgroup: %v, want launch id in use", err)
			}
		}
	}

	sleepCmd := func() *exec.Cmd {
		cmd := exec.Command("sleep", "300")
		cmd.SysProcAttr = &syscall.SysProcAttr{}
		return cmd
	}
	inside := sleepCmd()
	must(t, startInCgroup(inside, cg))
	moved := sleepCmd()
	must(t, moved.Start())
	must(t, cg.enter(moved.Process.Pid))
	t.Cleanup(func() { inside.Process.Kill(); moved.Process.Kill(); inside.Wait(); moved.Wait() })

	pids, err := cg.members()
	slices.Sort(pids)
	want := []int{inside.Process.Pid, moved.Process.Pid}
	slices.Sort(want)
	if err != nil || !slices.Equal(pids, want) {
		t.Fatalf("members %v, %v; want %v", pids, err, want)
	}
	for _, pid := range want {
		if !cg.contains(pid) {
			t.Errorf("pid %d not seen in %s", pid, cg.path)
		}
	}
	if cg.contains(os.Getpid()) {
		t.Errorf("the test process seen in %s", cg.path)
	}

	thaw := cg.freeze(ctx)
	if got := freezeState(); got != frozen {
		t.Errorf("after freeze: %q, want %q", got, frozen)
	}
	thaw()
	if got := freezeState(); got != thawed {
		t.Errorf("after thaw: %q, want %q", got, thawed)
	}

	n, err := cg.killAll(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []*exec.Cmd{inside, moved} {
		err := cmd.Wait()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGKILL {
			t.Errorf("pid %d ended with %v, want SIGKILL", cmd.Process.Pid, err)
		}
	}
	if empty, err := cg.empty(); !empty || err != nil {
		t.Errorf("after killAll (%d signalled) empty = %v, %v", n, empty, err)
	}
	must(t, cg.remove(ctx))
	assertCgroupGone(t, cg.path)
}

// TestClaim: a launch's directory is created with its parent on first
// use, and a directory that exists already is never adopted.
func TestClaim(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "nlx", "launch")
	if err := claim(dir); err != nil {
		t.Fatalf("claim with the parent missing: %v", err)
	}
	if err := claim(dir); err == nil || !strings.Contains(err.Error(), "launch id in use") {
		t.Errorf("second claim: %v, want launch id in use", err)
	}
}
