package isolate

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestKernelPathsProtected: the read-only /proc paths of the spec cannot be
// written and the masked ones show nothing, under both backends and every
// policy with a /proc. bubblewrap 0.8.0's own --proc covers /proc/sys only
// when access(2) says it is writable, which, with every capability dropped,
// it does not say of the directory: 775 files under /proc/sys were writable
// (kernel.core_pattern among them, a root code-execution path on the host),
// and a sandbox changed the host's printk_ratelimit_burst.
func TestKernelPathsProtected(t *testing.T) {
	// The write probe: a setting whose change does no harm while a broken
	// build runs the test.
	const probe = "/proc/sys/kernel/printk_ratelimit_burst"
	before, err := os.ReadFile(probe)
	if err != nil {
		t.Skipf("no %s: %v", probe, err)
	}
	var script strings.Builder
	for _, p := range readonlyPaths {
		// find -writable asks access(2), which answers EROFS for a
		// read-only mount, whatever the mode bits say.
		script.WriteString(`[ -e ` + p + ` ] && find ` + p + ` -writable 2>/dev/null | sed 's/^/WRITABLE /' | head -5; `)
	}
	for _, p := range maskedPaths {
		script.WriteString(`if [ -d ` + p + ` ]; then ls -A ` + p + ` 2>/dev/null | sed 's|^|LISTED ` + p + ` |' | head -3; ` +
			`elif [ -e ` + p + ` ]; then [ -n "$(head -c 64 ` + p + ` 2>/dev/null | od -An -c | head -1)" ] && echo READ ` + p + `; fi; `)
	}
	script.WriteString(`echo 11 >` + probe + ` 2>/dev/null && echo WROTE ` + probe + `; `)
	// Writes back the value it reads: harmless to the host if the write
	// goes through (as it did), but it must not.
	script.WriteString(`cp=$(cat /proc/sys/kernel/core_pattern); echo "$cp" >/proc/sys/kernel/core_pattern 2>/dev/null && echo WROTE core_pattern; `)
	script.WriteString(`echo done`)
	for _, b := range backends {
		t.Run(string(b), func(t *testing.T) {
			needBackend(t, b)
			f := newFixture(t)
			for _, policy := range []Policy{ReadOnly, WorkspaceWrite, DangerFullAccess} {
				r := run(t, f.request(b, policy, "sh", "-c", script.String()))
				if !strings.Contains(r.out, "done") {
					t.Fatalf("%s: the script did not finish: exit %d\n%s%s", policy, r.code, r.out, r.errOut)
				}
				for _, line := range strings.Split(r.out, "\n") {
					if strings.HasPrefix(line, "WRITABLE ") || strings.HasPrefix(line, "LISTED ") ||
						strings.HasPrefix(line, "READ ") || strings.HasPrefix(line, "WROTE ") {
						t.Errorf("%s: %s", policy, line)
					}
				}
			}
			after, err := os.ReadFile(probe)
			if err != nil {
				t.Fatal(err)
			}
			if string(after) != string(before) {
				os.WriteFile(probe, before, 0o644)
				t.Errorf("the host's %s changed from %q to %q", probe, before, after)
			}
		})
	}
}

// TestProtectedSwapRace: while launches of workspace alpha start, a
// provider of the same workspace (played by this goroutine) keeps swapping
// its .git for a symlink to another owner's credential home. No launch may
// mount that home: bubblewrap used to follow whatever .git was at mount
// time (bob's token showed in 8 of 140 launches). A launch may be refused
// (the symlink leads out of the workspace) or fail (bubblewrap's check of
// the mounted inode); none may leak. 1,000 launches run under bubblewrap
// and 400 under runc (slower to start; with .git bound by path, runc
// leaked too: 9 of 1,000).
func TestProtectedSwapRace(t *testing.T) {
	for _, b := range backends {
		launches := int64(map[Backend]int{Bwrap: 1000, Runc: 400}[b])
		t.Run(string(b), func(t *testing.T) {
			needBackend(t, b)
			f := newFixture(t)
			git := filepath.Join(f.ws, ".git")
			real := filepath.Join(f.ws, ".git-real")
			stop := make(chan struct{})
			var swaps atomic.Int64
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					// The real .git most of the time, the symlink for a
					// moment: each launch meets one or the other or the swap.
					// The real .git about three quarters of the time, the
					// symlink the rest: a launch's check and its mount each
					// meet either.
					time.Sleep(850 * time.Microsecond)
					if os.Rename(git, real) == nil {
						os.Symlink(filepath.Dir(f.bobToken), git)
						swaps.Add(1)
						for at := time.Now(); time.Since(at) < 150*time.Microsecond; {
							runtime.Gosched()
						}
						os.Remove(git)
						os.Rename(real, git)
					}
				}
			}()
			var ran, refused, leaked atomic.Int64
			var lwg sync.WaitGroup
			for range 2 {
				lwg.Add(1)
				go func() {
					defer lwg.Done()
					// Until that many launches ran: a refusal (the check met
					// the symlink) is quick and says nothing of the mount.
					// Under load the swapper runs less often: go on (up to
					// three times as many launches) until it swapped
					// enough for the race to be met.
					for (ran.Load() < launches || swaps.Load() < launches/4) && ran.Load() < 3*launches && refused.Load() < 50*launches {
						ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
						var out bytes.Buffer
						rec := &fakeRecorder{}
						p, err := Launch(ctx, f.request(b, WorkspaceWrite, "sh", "-c", "cat /workspace/.git/token 2>/dev/null; ls /workspace/.git 2>/dev/null"),
							Options{Recorder: rec, Stdout: &out, Stderr: &out})
						if err != nil {
							if refused.Add(1) == 1 {
								t.Logf("refused: %v", err)
							}
							cancel()
							// Past the symlink before the next try.
							time.Sleep(200 * time.Microsecond)
							continue
						}
						p.Wait(ctx)
						Stop(ctx, p.Identity, time.Second, rec)
						cancel()
						ran.Add(1)
						if strings.Contains(out.String(), bobSecret) || strings.Contains(out.String(), "token") {
							leaked.Add(1)
							t.Errorf("launch %d mounted bob's credential home at /workspace/.git:\n%s", ran.Load(), out.String())
						}
					}
				}()
			}
			lwg.Wait()
			close(stop)
			wg.Wait()
			t.Logf("%s: %d launches ran, %d refused, %d swaps, %d leaked", b, ran.Load(), refused.Load(), swaps.Load(), leaked.Load())
			if ran.Load() < launches || swaps.Load() < launches/4 {
				t.Errorf("the race was not exercised: %d launches ran, %d swaps", ran.Load(), swaps.Load())
			}
		})
	}
}

// TestSeccompDenies: inside the sandbox, through a shell and a grandchild
// of it, every call of probes fails with EPERM under both backends. Root's
// kernel keyring was readable from a bubblewrap sandbox (and from runc's
// after linking the user keyring into the session's).
func TestSeccompDenies(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range backends {
		t.Run(string(b), func(t *testing.T) {
			needBackend(t, b)
			f := newFixture(t)
			copyFile(t, self, filepath.Join(f.ws, "probe"))
			for _, sh := range shells {
				req := f.request(b, WorkspaceWrite, sh.cmd("/workspace/probe")...)
				req.Env[probeEnv] = "1"
				r := run(t, req)
				if !strings.Contains(r.out, "probes done") {
					t.Fatalf("%s: the probe did not finish: exit %d\n%s%s", sh.name, r.code, r.out, r.errOut)
				}
				for _, p := range probes {
					if want := "probe " + p.name + " EPERM"; !strings.Contains(r.out, want+"\n") {
						t.Errorf("%s: %s: want EPERM, got:\n%s", sh.name, p.name, grepLine(r.out, "probe "+p.name+" "))
					}
				}
			}
		})
	}
}

func grepLine(out, prefix string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	return "(nothing)"
}

func copyFile(t testing.TB, src, dst string) {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, data, 0o755); err != nil {
		t.Fatal(err)
	}
}
