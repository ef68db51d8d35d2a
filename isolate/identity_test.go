package isolate

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nlx-dev/nlx/internal/procid"
	"golang.org/x/sys/unix"
)

// TestStopKillsDetachedDaemon: a daemon that double-forks into its own
// session, its parent gone, ignoring SIGTERM, is still killed by Stop,
// which confirms the cgroup empty before it writes the receipt.
func TestStopKillsDetachedDaemon(t *testing.T) {
	f := newFixture(t)
	daemon := `trap "" TERM; (setsid sh -c 'trap "" TERM; exec sleep 300' </dev/null >/dev/null 2>&1 &); exec sleep 300`
	// Every shell ignores SIGTERM, so that only the cgroup kill can end
	// the tree.
	shells := []struct {
		name string
		cmd  func(string) []string
	}{
		{"shell", func(s string) []string { return []string{"sh", "-c", s} }},
		{"grandchild", func(s string) []string {
			return []string{"sh", "-c", `trap "" TERM; sh -c 'trap "" TERM; sh -c "$1"; exit $?' inner "$1"; exit $?`, "outer", s}
		}},
	}
	for _, b := range backends {
		for _, sh := range shells {
			t.Run(string(b)+"/"+sh.name, func(t *testing.T) {
				needBackend(t, b)
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				rec := &fakeRecorder{}
				p, err := Launch(ctx, f.request(b, WorkspaceWrite, sh.cmd(daemon)...), Options{Recorder: rec, Stdout: io.Discard, Stderr: io.Discard})
				if err != nil {
					t.Fatal(err)
				}
				host, err := loadCgroupHost()
				if err != nil {
					t.Fatal(err)
				}
				cg, err := openCgroup(host, p.Identity.Cgroup)
				if err != nil {
					t.Fatal(err)
				}
				// Wait for two sleeps in two sessions: the shell's and the
				// daemon's.
				var sleeps map[int]procid.Identity
				for {
					sleeps = sleepers(t, cg)
					if len(sessions(sleeps)) >= 2 {
						break
					}
					if err := pause(ctx, 10*time.Millisecond); err != nil {
						t.Fatalf("no detached daemon appeared: %v (sleeps %v)", err, sleeps)
					}
				}
				r, err := Stop(ctx, p.Identity, 100*time.Millisecond, rec)
				if err != nil {
					t.Fatal(err)
				}
				if r.Outcome != OutcomeKilled || r.Killed < 2 || !r.CgroupRemoved {
					t.Errorf("receipt %+v, want the SIGTERM-proof tree killed and the cgroup removed", r)
				}
				for pid, id := range sleeps {
					if now, err := identify(pid); err == nil && now.Start == id.Start && alive(pid) {
						t.Errorf("sleep %d survived Stop", pid)
					}
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

// sleepers returns the identities of the sleep processes in cg, with
// their session id in User (a test-only use of the field).
func sleepers(t *testing.T, cg *cgroup) map[int]procid.Identity {
	t.Helper()
	pids, err := cg.members()
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]procid.Identity{}
	for _, pid := range pids {
		comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if err != nil || strings.TrimSpace(string(comm)) != "sleep" {
			continue
		}
		id, err := identify(pid)
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		id.User = fields[3] // field 6: session id
		out[pid] = id
	}
	return out
}

func sessions(ids map[int]procid.Identity) map[string]bool {
	s := map[string]bool{}
	for _, id := range ids {
		s[id.User] = true
	}
	return s
}

// TestStopNeverSignalsRecycledPid: a record whose start time differs from
// the process now holding the pid is treated as gone, and that process is
// never signalled. The control case (matching start time) shows that the
// same Stop does signal a process that is the recorded one.
func TestStopNeverSignalsRecycledPid(t *testing.T) {
	cases := []struct {
		name      string
		wrong     bool
		cgroup    string
		signalled bool
	}{
		{name: "wrong start, no cgroup", wrong: true},
		{name: "wrong start, cgroup gone", wrong: true, cgroup: DefaultCgroupParent + "/recycled-" + newID()},
		{name: "matching start (control)", signalled: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			sleep := exec.Command("sleep", "300")
			if err := sleep.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			go func() { exited <- sleep.Wait() }()
			defer sleep.Process.Kill()
			pid := sleep.Process.Pid
			real, err := identify(pid)
			if err != nil {
				t.Fatal(err)
			}
			rec := Identity{LaunchID: "recycled-" + newID(), Identity: real, PGID: pid, Backend: Bwrap, Cgroup: c.cgroup}
			if c.wrong {
				rec.Start = real.Start + "7"
			}
			recorder := &fakeRecorder{}
			r, err := Stop(ctx, rec, 50*time.Millisecond, recorder)
			if err != nil {
				t.Fatal(err)
			}
			if got := recorder.released(t, rec.LaunchID); got != *r {
				t.Errorf("recorded %+v, returned %+v", got, *r)
			}
			if !c.signalled {
				if r.Outcome != OutcomeExited || r.Terminated != 0 || r.Killed != 0 {
					t.Errorf("receipt %+v, want exited with nothing signalled", r)
				}
				now, err := identify(pid)
				if err != nil || now.Start != real.Start || !alive(pid) {
					t.Fatalf("the process holding pid %d was signalled: %v %v", pid, now, err)
				}
				select {
				case err := <-exited:
					t.Fatalf("sleep exited: %v", err)
				default:
				}
				sleep.Process.Kill()
				<-exited
				return
			}
			if r.Outcome != OutcomeTerminated || r.Terminated != 1 {
				t.Errorf("receipt %+v, want the recorded process terminated", r)
			}
			if err := <-exited; err == nil || !strings.Contains(err.Error(), "terminated") {
				t.Errorf("sleep ended with %v, want SIGTERM", err)
			}
		})
	}
}

// TestRecordFailureStartsNothing: if the identity cannot be recorded the
// provider never runs and no cgroup is left.
func TestRecordFailureStartsNothing(t *testing.T) {
	f := newFixture(t)
	for _, b := range backends {
		t.Run(string(b), func(t *testing.T) {
			needBackend(t, b)
			marker := "/workspace/ran-" + string(b)
			rec := &fakeRecorder{RecordFunc: func(context.Context, Identity) error { return errors.New("state is read-only") }}
			id := "record-fails-" + newID()
			_, err := Launch(context.Background(), f.request(b, WorkspaceWrite, "touch", marker), Options{Recorder: rec, LaunchID: id})
			if err == nil || !strings.Contains(err.Error(), "state is read-only") {
				t.Fatalf("launch: %v, want the record error", err)
			}
			if _, err := os.Stat(f.ws + strings.TrimPrefix(marker, WorkspacePath)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the command ran although its identity was never recorded (%v)", err)
			}
			assertCgroupGone(t, DefaultCgroupParent+"/"+id)
			if _, err := os.Stat(DefaultStateDir + "/bundles/" + id); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("bundle left behind: %v", err)
			}
		})
	}
}

// TestProviderWaitsForRecord: with either backend nothing of the provider
// runs while its identity is being recorded: the command's marker must not
// appear during a slow Record, and appears once Record returns. A slow
// Record that then fails leaves nothing: no marker, no cgroup, no bundle,
// no backend process.
func TestProviderWaitsForRecord(t *testing.T) {
	f := newFixture(t)
	for _, b := range backends {
		for _, fail := range []bool{false, true} {
			name := string(b)
			if fail {
				name += "/record-fails"
			}
			t.Run(name, func(t *testing.T) {
				needBackend(t, b)
				marker := fmt.Sprintf("ran-%s-%t", b, fail)
				host := filepath.Join(f.ws, marker)
				os.Remove(host)
				id := "gated-" + newID()
				rec := &fakeRecorder{RecordFunc: func(context.Context, Identity) error {
					// Ungated, runc and bwrap run the command within tens of
					// milliseconds; half a second is ample to see it happen.
					for range 50 {
						if _, err := os.Stat(host); err == nil {
							t.Errorf("the command ran before its identity was recorded")
							break
						}
						time.Sleep(10 * time.Millisecond)
					}
					if fail {
						return errors.New("disk full")
					}
					return nil
				}}
				p, err := Launch(context.Background(), f.request(b, WorkspaceWrite, "touch", WorkspacePath+"/"+marker), Options{Recorder: rec, LaunchID: id})
				if fail {
					if err == nil || !strings.Contains(err.Error(), "disk full") {
						t.Fatalf("launch: %v, want the record error", err)
					}
					if _, err := os.Stat(host); !errors.Is(err, os.ErrNotExist) {
						t.Errorf("the command ran although its identity was never recorded (%v)", err)
					}
					assertCgroupGone(t, DefaultCgroupParent+"/"+id)
					if _, err := os.Stat(DefaultStateDir + "/bundles/" + id); !errors.Is(err, os.ErrNotExist) {
						t.Errorf("bundle left behind: %v", err)
					}
					assertNoLaunchProcess(t, id)
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				st, err := p.Wait(context.Background())
				if err != nil || st.ExitCode() != 0 {
					t.Fatalf("wait: %v %v", st, err)
				}
				if _, err := os.Stat(host); err != nil {
					t.Errorf("the command did not run once recorded: %v", err)
				}
				if _, err := Stop(context.Background(), p.Identity, time.Second, rec); err != nil {
					t.Fatal(err)
				}
				assertNoLaunchProcess(t, id)
			})
		}
	}
}

// TestRuncDiesAtTheGate: runc is held stopped at its exec until the launch
// is recorded; nlx dying then (simulated by killing runc from Record, as
// PTRACE_O_EXITKILL and Pdeathsig would) leaves nothing run and nothing
// behind.
func TestRuncDiesAtTheGate(t *testing.T) {
	needBackend(t, Runc)
	f := newFixture(t)
	marker := filepath.Join(f.ws, "ran-after-runc-died")
	id := "gate-dies-" + newID()
	rec := &fakeRecorder{RecordFunc: func(_ context.Context, ident Identity) error {
		if st := procState(ident.PID); st != "t" {
			t.Errorf("runc is in state %q while its launch is recorded, want t (stopped by its tracer)", st)
		}
		if err := unix.Kill(ident.PID, unix.SIGKILL); err != nil {
			t.Fatalf("kill runc: %v", err)
		}
		return errors.New("nlx died")
	}}
	_, err := Launch(context.Background(), f.request(Runc, WorkspaceWrite, "touch", WorkspacePath+"/ran-after-runc-died"), Options{Recorder: rec, LaunchID: id})
	if err == nil || !strings.Contains(err.Error(), "nlx died") {
		t.Fatalf("launch: %v, want the record error", err)
	}
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the command ran (%v)", err)
	}
	assertNoLaunchProcess(t, id)
	assertCgroupGone(t, DefaultCgroupParent+"/"+id)
}

// procState is the state letter of /proc/PID/stat (field 3).
func procState(pid int) string {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+3 > len(s) {
		return ""
	}
	return s[i+2 : i+3]
}

// launchProcesses lists the processes whose command line names launch
// id's runc bundle (runc run and anything it left).
func launchProcesses(id string) []string {
	needle := []byte("/bundles/" + id + "\x00")
	var found []string
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		cmdline, err := os.ReadFile("/proc/" + d.Name() + "/cmdline")
		if err == nil && bytes.Contains(cmdline, needle) {
			found = append(found, d.Name()+": "+strings.ReplaceAll(string(cmdline), "\x00", " "))
		}
	}
	return found
}

// assertNoLaunchProcess fails if any process still names launch id's
// bundle, waiting briefly for one that is exiting.
func assertNoLaunchProcess(t *testing.T, id string) {
	t.Helper()
	for try := 0; ; try++ {
		left := launchProcesses(id)
		if len(left) == 0 {
			return
		}
		if try == 50 {
			t.Errorf("processes of launch %s left: %v", id, left)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestStopRefusesForeignRecords: a record of another host or pid namespace
// cannot be proven gone from here; Stop refuses without a receipt.
func TestStopRefusesForeignRecords(t *testing.T) {
	me, err := self()
	if err != nil {
		t.Fatal(err)
	}
	for name, mut := range map[string]func(*Identity){
		"other host":          func(id *Identity) { id.Host = "elsewhere" },
		"other pid namespace": func(id *Identity) { id.PidNS = "pid:[1]" },
		"bad launch id":       func(id *Identity) { id.LaunchID = "../etc" },
	} {
		t.Run(name, func(t *testing.T) {
			id := Identity{LaunchID: "foreign", Identity: me}
			mut(&id)
			rec := &fakeRecorder{}
			if _, err := Stop(context.Background(), id, 0, rec); err == nil {
				t.Fatal("Stop succeeded")
			}
			if len(rec.receipts) != 0 {
				t.Errorf("receipts %v written for a record Stop could not check", rec.receipts)
			}
		})
	}
	t.Run("rebooted", func(t *testing.T) {
		id := Identity{LaunchID: "before-reboot", Identity: me}
		id.Boot = "00000000-0000-0000-0000-000000000000"
		rec := &fakeRecorder{}
		r, err := Stop(context.Background(), id, 0, rec)
		if err != nil || r.Outcome != OutcomeRebooted {
			t.Fatalf("Stop: %+v, %v; want a rebooted receipt", r, err)
		}
		rec.released(t, id.LaunchID)
	})
}

// TestLaunchIDInUse: a second launch with the id of a running one fails
// without touching the first one's cgroup or process.
func TestLaunchIDInUse(t *testing.T) {
	f := newFixture(t)
	for _, b := range backends {
		t.Run(string(b), func(t *testing.T) {
			needBackend(t, b)
			ctx := context.Background()
			rec := &fakeRecorder{}
			id := "in-use-" + newID()
			first, err := Launch(ctx, f.request(b, ReadOnly, "sleep", "300"), Options{Recorder: rec, LaunchID: id})
			if err != nil {
				t.Fatal(err)
			}
			host, err := loadCgroupHost()
			if err != nil {
				t.Fatal(err)
			}
			cg, err := openCgroup(host, first.Identity.Cgroup)
			if err != nil {
				t.Fatal(err)
			}
			wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			for { // runc takes a moment to start the container
				if pids, _ := cg.members(); len(pids) > 0 {
					break
				}
				if err := pause(wctx, 5*time.Millisecond); err != nil {
					t.Fatal("the first launch never ran")
				}
			}
			if _, err := Launch(ctx, f.request(b, ReadOnly, "true"), Options{Recorder: rec, LaunchID: id}); err == nil {
				t.Fatal("a second launch with the same id succeeded")
			}
			if pids, err := cg.members(); err != nil || len(pids) == 0 {
				t.Errorf("the first launch's cgroup lost its processes: %v %v", pids, err)
			}
			if r, err := Stop(ctx, first.Identity, 100*time.Millisecond, rec); err != nil || r.Outcome == OutcomeExited {
				t.Errorf("stop of the first launch: %+v %v", r, err)
			}
			first.Wait(ctx)
		})
	}
}

// TestRuncLaunchOverDeadBundle: an nlx that died mid-launch leaves its
// bundle; a later launch of the same id (its cgroup long gone) must not
// trip over it or take any of it.
func TestRuncLaunchOverDeadBundle(t *testing.T) {
	needBackend(t, Runc)
	f := newFixture(t)
	id := "dead-bundle-" + newID()
	dead := filepath.Join(DefaultStateDir, "bundles", id)
	if err := os.MkdirAll(dead, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(filepath.Join(dead, "stale-fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dead, "config.json"), []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	rec := &fakeRecorder{}
	p, err := Launch(context.Background(), f.request(Runc, ReadOnly, "true"), Options{Recorder: rec, LaunchID: id})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := p.Wait(context.Background()); err != nil || st.ExitCode() != 0 {
		t.Fatalf("wait: %v %v", st, err)
	}
	if _, err := Stop(context.Background(), p.Identity, time.Second, rec); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dead); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("bundle left after Stop: %v", err)
	}
}

// TestCancelDuringRecord: a cancellation (nlx exec's Ctrl-C) arriving while
// the identity is written does not interrupt the write, which could commit
// anyway and leave a record of a launch that was then killed unreleased:
// the launch completes and its caller stops it.
func TestCancelDuringRecord(t *testing.T) {
	needBackend(t, Bwrap)
	f := newFixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rec := &fakeRecorder{RecordFunc: func(rctx context.Context, _ Identity) error {
		cancel()
		return rctx.Err()
	}}
	p, err := Launch(ctx, f.request(Bwrap, ReadOnly, "true"), Options{Recorder: rec})
	if err != nil {
		t.Fatalf("launch: %v", err)
	}
	if _, err := p.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := Stop(context.Background(), p.Identity, time.Second, rec); err != nil {
		t.Fatal(err)
	}
	rec.released(t, p.Identity.LaunchID)
}

// TestStopWhileStarting: a stop right after the launch returns, while
// the backend may still be joining the cgroup hierarchies one by one
// (runc creates the launch cgroup in every hierarchy, the named systemd
// one and the unified one last), removes the cgroup from all of them.
func TestStopWhileStarting(t *testing.T) {
	f := newFixture(t)
	for _, b := range backends {
		t.Run(string(b), func(t *testing.T) {
			needBackend(t, b)
			ctx := context.Background()
			for range 20 {
				rec := &fakeRecorder{}
				p, err := Launch(ctx, f.request(b, ReadOnly, "sleep", "300"), Options{Recorder: rec, LaunchID: "starting-" + newID()})
				if err != nil {
					t.Fatal(err)
				}
				host, err := loadCgroupHost()
				if err != nil {
					t.Fatal(err)
				}
				cg, err := openCgroup(host, p.Identity.Cgroup)
				if err != nil {
					t.Fatal(err)
				}
				// The window: the first process is in its pids cgroup,
				// runc may not have joined the other hierarchies yet.
				deadline := time.Now().Add(30 * time.Second)
				for pids, _ := cg.members(); len(pids) == 0; pids, _ = cg.members() {
					if time.Now().After(deadline) {
						t.Fatal("the launch never ran")
					}
				}
				r, err := Stop(ctx, p.Identity, 0, rec)
				if err != nil {
					t.Fatal(err)
				}
				p.Wait(ctx)
				if !r.CgroupRemoved {
					t.Errorf("receipt %+v: cgroup not removed", r)
				}
				assertCgroupGone(t, p.Identity.Cgroup)
			}
		})
	}
}
