package isolate

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestMemoryBalloon: a process allocating past the memory limit is
// OOM-killed inside the launch cgroup while its parent shell carries on.
func TestMemoryBalloon(t *testing.T) {
	f := newFixture(t)
	const limit = 64 << 20
	for _, b := range backends {
		for _, sh := range shells {
			t.Run(string(b)+"/"+sh.name, func(t *testing.T) {
				needBackend(t, b)
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				// The shell stays (in sleep) after the balloon, so that the
				// cgroups, runc's container cgroup included, can be read.
				req := f.request(b, WorkspaceWrite, sh.cmd(`head -c 314572800 /dev/zero | tail >/dev/null; echo "balloon=$?"; echo alive; exec sleep 300`)...)
				req.Limits = Limits{MemoryBytes: limit, Pids: 64, CPU: 1}
				rec := &fakeRecorder{}
				out := &syncBuffer{}
				p, err := Launch(ctx, req, Options{Recorder: rec, Stdout: out, Stderr: out})
				if err != nil {
					t.Fatal(err)
				}
				for !strings.Contains(out.String(), "alive") {
					if err := pause(ctx, 10*time.Millisecond); err != nil {
						t.Fatalf("the shell did not survive the balloon: %v: %q", err, out.String())
					}
				}
				if !strings.Contains(out.String(), "balloon=137") {
					t.Errorf("output %q; want the balloon SIGKILLed (137) and the shell alive", out.String())
				}
				// The limit that was hit is the launch cgroup's own.
				if got := cgroupFile(t, p.Identity.Cgroup, "memory", "memory.limit_in_bytes", "memory.max"); got != strconv.Itoa(limit) {
					t.Errorf("memory limit %s, want %d", got, limit)
				}
				if got, want, ok := swapLimit(t, p.Identity.Cgroup); ok && got != want {
					t.Errorf("swap limit %s, want %s (no swap)", got, want)
				}
				if n := oomKills(t, p.Identity.Cgroup); n == 0 {
					t.Error("no OOM kill in the launch cgroup")
				}
				peak := cgroupFile(t, p.Identity.Cgroup, "memory", "memory.max_usage_in_bytes", "memory.peak")
				if n, _ := strconv.ParseInt(peak, 10, 64); n > limit {
					t.Errorf("peak memory %d above the limit %d", n, limit)
				}
				if _, err := Stop(ctx, p.Identity, 100*time.Millisecond, rec); err != nil {
					t.Fatal(err)
				}
				rec.released(t, p.Identity.LaunchID)
				assertCgroupGone(t, p.Identity.Cgroup)
				if _, err := p.Wait(ctx); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}

// swapLimit reads the launch cgroup's swap limit and the value meaning no
// swap (memory+swap equal to memory on v1, swap.max 0 on v2); ok is false
// where the kernel does not account swap.
func swapLimit(t testing.TB, path string) (got, want string, ok bool) {
	t.Helper()
	host, err := loadCgroupHost()
	if err != nil {
		t.Fatal(err)
	}
	dir, v2 := host.dir("memory", path)
	// v2 has its own file (memory.swap.max, 0: no swap); v1 limits memory
	// and swap together to the memory limit. (Reading the v1 file first
	// failed on v2: the VM tests found it.)
	name, want := "memory.swap.max", "0"
	if !v2 {
		name, want = "memory.memsw.limit_in_bytes", readTrim(t, filepath.Join(dir, "memory.limit_in_bytes"))
	}
	data, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		return "", "", false
	}
	return strings.TrimSpace(string(data)), want, true
}

// oomKills counts the OOM kills in the launch cgroup's subtree (for runc
// the container's own cgroup is below it, with the same limit).
func oomKills(t testing.TB, path string) int {
	t.Helper()
	host, err := loadCgroupHost()
	if err != nil {
		t.Fatal(err)
	}
	dir, v2 := host.dir("memory", path)
	if v2 {
		// Hierarchical already.
		return eventCount(t, filepath.Join(dir, "memory.events"), "oom_kill")
	}
	n := 0
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			n += eventCount(t, filepath.Join(p, "memory.oom_control"), "oom_kill")
		}
		return nil
	})
	return n
}

func eventCount(t testing.TB, file, key string) int {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if k, v, ok := strings.Cut(line, " "); ok && k == key {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	return 0
}

// TestForkBomb: a fork bomb stops at the pids limit, and Stop empties and
// removes the cgroup.
func TestForkBomb(t *testing.T) {
	f := newFixture(t)
	const limit = 32
	for _, b := range backends {
		for _, sh := range shells {
			t.Run(string(b)+"/"+sh.name, func(t *testing.T) {
				needBackend(t, b)
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				// The bomb's first call forks while nothing else runs; the
				// shell then becomes sleep (exec: no fork needed) so the
				// tree lives until Stop.
				req := f.request(b, WorkspaceWrite, sh.cmd(`trap "" TERM; bomb() { bomb | bomb & }; bomb; exec sleep 300`)...)
				req.Limits = Limits{MemoryBytes: 256 << 20, Pids: limit, CPU: 0.5}
				rec := &fakeRecorder{}
				p, err := Launch(ctx, req, Options{Recorder: rec, Stdout: io.Discard, Stderr: io.Discard})
				if err != nil {
					t.Fatal(err)
				}
				host, err := loadCgroupHost()
				if err != nil {
					t.Fatal(err)
				}
				dir, _ := host.dir("pids", p.Identity.Cgroup)
				// Wait (bounded by ctx) until the kernel refused a fork.
				for pidsLimitHits(t, dir) == 0 {
					if err := pause(ctx, 10*time.Millisecond); err != nil {
						t.Fatalf("the bomb never reached the pids limit: %v", err)
					}
				}
				if got := readTrim(t, filepath.Join(dir, "pids.max")); got != strconv.Itoa(limit) {
					t.Errorf("pids.max %s, want %d", got, limit)
				}
				if cur, _ := strconv.Atoi(readTrim(t, filepath.Join(dir, "pids.current"))); cur > limit {
					t.Errorf("pids.current %d above the limit %d", cur, limit)
				}
				if peak, err := os.ReadFile(filepath.Join(dir, "pids.peak")); err == nil {
					if n, _ := strconv.Atoi(strings.TrimSpace(string(peak))); n > limit {
						t.Errorf("pids.peak %d above the limit %d", n, limit)
					}
				}
				r, err := Stop(ctx, p.Identity, 100*time.Millisecond, rec)
				if err != nil {
					t.Fatal(err)
				}
				// The shells around the bomb do not ignore SIGTERM: the
				// grandchild variant ends with them, taking the pid
				// namespace down before the grace period is over. A shell
				// that cannot fork may give up and exit first, and the pid
				// namespace with it: then nothing was left to stop.
				if (r.Outcome != OutcomeKilled && r.Outcome != OutcomeTerminated && r.Outcome != OutcomeExited) || !r.CgroupRemoved {
					t.Errorf("receipt %+v, want the bomb ended and the cgroup removed", r)
				}
				if got := rec.released(t, p.Identity.LaunchID); got != *r {
					t.Errorf("recorded receipt %+v, Stop returned %+v", got, *r)
				}
				assertCgroupGone(t, p.Identity.Cgroup)
				if _, err := p.Wait(ctx); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}

// pidsLimitHits sums the "max" events of the subtree at dir.
func pidsLimitHits(t testing.TB, dir string) int {
	t.Helper()
	n := 0
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			if _, err := os.Stat(filepath.Join(p, "pids.events")); err == nil {
				n += eventCount(t, filepath.Join(p, "pids.events"), "max")
			}
		}
		return nil
	})
	return n
}

func readTrim(t testing.TB, p string) string {
	t.Helper()
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(data))
}

// syncBuffer is a bytes.Buffer safe to read while a launch writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestLimitsApplied: a launch's cgroup holds its limits as the kernel
// reads them back: memory, pids, and cpu (cpu.max on v2, the CFS quota and
// period on v1); stop empties and removes it.
func TestLimitsApplied(t *testing.T) {
	f := newFixture(t)
	for _, b := range backends {
		t.Run(string(b), func(t *testing.T) {
			needBackend(t, b)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			req := f.request(b, WorkspaceWrite, "sh", "-c", "echo up; exec sleep 300")
			req.Limits = Limits{MemoryBytes: 96 << 20, Pids: 48, CPU: 0.5}
			rec := &fakeRecorder{}
			out := &syncBuffer{}
			p, err := Launch(ctx, req, Options{Recorder: rec, Stdout: out, Stderr: out})
			if err != nil {
				t.Fatal(err)
			}
			for !strings.Contains(out.String(), "up") {
				if err := pause(ctx, 10*time.Millisecond); err != nil {
					t.Fatalf("the launch did not start: %v: %q", err, out.String())
				}
			}
			cg := p.Identity.Cgroup
			if got := cgroupFile(t, cg, "memory", "memory.limit_in_bytes", "memory.max"); got != strconv.Itoa(96<<20) {
				t.Errorf("memory limit %s, want %d", got, 96<<20)
			}
			if got := cgroupFile(t, cg, "pids", "pids.max", "pids.max"); got != "48" {
				t.Errorf("pids.max %s, want 48", got)
			}
			host, err := loadCgroupHost()
			if err != nil {
				t.Fatal(err)
			}
			cpu := ""
			if _, v2 := host.dir("cpu", cg); v2 {
				cpu = cgroupFile(t, cg, "cpu", "", "cpu.max")
			} else {
				cpu = cgroupFile(t, cg, "cpu", "cpu.cfs_quota_us", "") + " " + cgroupFile(t, cg, "cpu", "cpu.cfs_period_us", "")
			}
			if cpu != "50000 100000" {
				t.Errorf("cpu quota and period %q, want half a cpu (50000 100000)", cpu)
			}
			if _, err := Stop(ctx, p.Identity, 100*time.Millisecond, rec); err != nil {
				t.Fatal(err)
			}
			rec.released(t, p.Identity.LaunchID)
			assertCgroupGone(t, cg)
			p.Wait(ctx)
		})
	}
}
