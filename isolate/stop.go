package isolate

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/nlx-dev/nlx/internal/procid"
	"golang.org/x/sys/unix"
)

// Outcome says how a launch's process tree ended.
type Outcome string

const (
	// OutcomeExited: nothing was left to signal when Stop looked.
	OutcomeExited Outcome = "exited"
	// OutcomeTerminated: the tree was gone within the grace period after
	// SIGTERM.
	OutcomeTerminated Outcome = "terminated"
	// OutcomeKilled: what was left after the grace period was SIGKILLed.
	OutcomeKilled Outcome = "killed"
	// OutcomeRebooted: the host rebooted since the launch; the tree and
	// its cgroup went with it.
	OutcomeRebooted Outcome = "rebooted"
)

// Receipt is the proof that a launch's process tree is gone.
type Receipt struct {
	LaunchID   string  `json:"launch_id"`
	Outcome    Outcome `json:"outcome"`
	Terminated int     `json:"terminated"` // processes sent SIGTERM
	Killed     int     `json:"killed"`     // processes sent SIGKILL
	// CgroupRemoved: the launch cgroup was confirmed empty and removed.
	CgroupRemoved bool `json:"cgroup_removed"`
	// Started is the identity's: the process the receipt releases, by
	// its pid's start time (field 22 of /proc/PID/stat) and when it began.
	PID       int       `json:"pid"`
	PIDStart  string    `json:"pid_start"`
	StartedAt time.Time `json:"started_at"`
	Stopped   time.Time `json:"stopped"`
}

// Stop ends the launch rec names and hands the receipt to recorder, which
// releases the identity. It sends SIGTERM to the tree, waits up to grace,
// then SIGKILLs whatever is left in the launch cgroup until it is empty.
//
// The recorded pid is signalled only while its start time matches the
// record: a recycled pid is never signalled. The other processes signalled
// are those in the launch cgroup, each checked to be there after it was
// pinned with a pidfd. The tree counts as gone only once the cgroup is
// empty (or, for a record without a cgroup, once the recorded process is
// gone); only then is the cgroup removed and the receipt written. An
// error means no receipt: the identity stays recorded.
func Stop(ctx context.Context, rec Identity, grace time.Duration, recorder Recorder) (*Receipt, error) {
	if recorder == nil {
		return nil, errors.New("stop: no recorder")
	}
	if !launchIDPattern.MatchString(rec.LaunchID) {
		return nil, fmt.Errorf("stop: launch id %q is not valid", rec.LaunchID)
	}
	me, err := self()
	if err != nil {
		return nil, fmt.Errorf("stop %s: %w", rec.LaunchID, err)
	}
	if rec.Host != me.Host {
		return nil, fmt.Errorf("stop %s: launched on host %s, this is %s", rec.LaunchID, rec.Host, me.Host)
	}
	r := &Receipt{LaunchID: rec.LaunchID, PID: rec.PID, PIDStart: rec.Start, StartedAt: rec.Started}
	if rec.Boot != me.Boot {
		r.Outcome = OutcomeRebooted
	} else {
		if rec.PidNS != me.PidNS {
			return nil, fmt.Errorf("stop %s: launched in pid namespace %s, this is %s", rec.LaunchID, rec.PidNS, me.PidNS)
		}
		if err := stopTree(ctx, rec, grace, r); err != nil {
			return nil, fmt.Errorf("stop %s: %w", rec.LaunchID, err)
		}
	}
	if err := removeRuncState(rec); err != nil {
		return nil, fmt.Errorf("stop %s: %w", rec.LaunchID, err)
	}
	r.Stopped = time.Now().UTC()
	if err := recorder.Receipt(ctx, rec.LaunchID, *r); err != nil {
		return nil, fmt.Errorf("stop %s: record receipt: %w", rec.LaunchID, err)
	}
	return r, nil
}

func stopTree(ctx context.Context, rec Identity, grace time.Duration, r *Receipt) error {
	var cg *cgroup
	if rec.Cgroup != "" {
		host, err := cgroupHostCached()
		if err != nil {
			return err
		}
		if cg, err = openCgroup(host, rec.Cgroup); err != nil {
			return err
		}
	}
	leader, err := openLeader(rec)
	if err != nil {
		return err
	}
	defer leader.close()
	gone := func() (bool, error) {
		if cg != nil {
			if empty, err := cg.empty(); err != nil || !empty {
				return false, err
			}
		}
		return leader.exited(), nil
	}

	done, err := gone()
	if err == nil && !done && leader.exited() {
		// The backend has exited, so the sandbox's first process has: its
		// pid namespace is being torn down (bubblewrap reports the exit
		// before its pid 1 is fully gone). Let that finish rather than
		// signal dying processes.
		done, err = waitGone(ctx, settleGrace, gone)
	}
	switch {
	case err != nil:
		return err
	case done:
		r.Outcome = OutcomeExited
	default:
		// SIGTERM reaches the provider's processes directly. The backend
		// process itself is spared: bwrap dying first would take the
		// sandbox down with SIGKILL before the provider could finish.
		if cg != nil {
			n, err := cg.signal(unix.SIGTERM, rec.PID)
			if err != nil {
				return err
			}
			r.Terminated += n
		}
		if r.Terminated == 0 && leader.signal(unix.SIGTERM) {
			r.Terminated++
		}
		if done, err = waitGone(ctx, grace, gone); err != nil {
			return err
		}
		r.Outcome = OutcomeTerminated
		if r.Terminated == 0 {
			// It was on its way out: the last processes were exiting.
			r.Outcome = OutcomeExited
		}
		if !done {
			r.Outcome = OutcomeKilled
			if cg != nil {
				// The sandbox first; the backend process then exits by
				// itself once it has reaped it.
				n, err := cg.kill(ctx, rec.PID)
				r.Killed += n
				if err != nil {
					return err
				}
				if done, err = waitGone(ctx, backendExitGrace, gone); err != nil {
					return err
				}
			}
			if !done {
				if leader.signal(unix.SIGKILL) {
					r.Killed++
				}
				if cg != nil {
					n, err := cg.killAll(ctx)
					r.Killed += n
					if err != nil {
						return err
					}
				}
				if _, err = waitGone(ctx, -1, gone); err != nil {
					return err
				}
			}
		}
	}
	if cg != nil {
		// Opened again: the backend may have created the cgroup in more
		// hierarchies after the first open (runc joins them one by one,
		// and a stop can come while it is still starting). Now that it
		// has exited, every directory it made is there to be seen.
		if cg, err = openCgroup(cg.host, rec.Cgroup); err != nil {
			return err
		}
		if err := cg.remove(ctx); err != nil {
			return err
		}
		r.CgroupRemoved = true
	}
	return nil
}

// backendExitGrace is how long bwrap or runc get to exit once their
// sandbox is dead; settleGrace how long a sandbox whose backend has exited
// gets to finish exiting before it is signalled (runc killed with nlx
// leaves its container running).
const (
	backendExitGrace = 2 * time.Second
	settleGrace      = 50 * time.Millisecond
)

// waitGone polls gone until it holds, for up to d (forever while ctx lives
// when d < 0).
func waitGone(ctx context.Context, d time.Duration, gone func() (bool, error)) (bool, error) {
	var deadline <-chan time.Time
	if d >= 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		deadline = t.C
	}
	// Most trees are gone within a millisecond of the last exit: poll
	// finely first, then back off.
	step := 50 * time.Microsecond
	for {
		if done, err := gone(); err != nil || done {
			return done, err
		}
		select {
		case <-ctx.Done():
			return false, fmt.Errorf("process tree still running: %w", ctx.Err())
		case <-deadline:
			return false, nil
		case <-time.After(step):
		}
		step = min(step*3/2, 10*time.Millisecond)
	}
}

// leader is the recorded process, pinned by a pidfd once its start time
// matched the record; fd < 0 when it is gone or the pid now names another
// process.
type leader struct{ fd int }

func openLeader(rec Identity) (*leader, error) {
	if rec.PID <= 0 {
		return &leader{fd: -1}, nil
	}
	fd, err := unix.PidfdOpen(rec.PID, 0)
	if errors.Is(err, unix.ESRCH) {
		return &leader{fd: -1}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("pidfd_open %d: %w", rec.PID, err)
	}
	// With the pidfd held, a live process cannot give its pid away: the
	// start time read now is that process's.
	start, err := procid.StartTime(rec.PID)
	if err != nil || start != rec.Start {
		unix.Close(fd)
		return &leader{fd: -1}, nil
	}
	return &leader{fd: fd}, nil
}

// exited reports whether the process has exited (a zombie runs nothing).
func (l *leader) exited() bool {
	if l.fd < 0 {
		return true
	}
	fds := []unix.PollFd{{Fd: int32(l.fd), Events: unix.POLLIN}}
	n, err := unix.Poll(fds, 0)
	return err == nil && n > 0
}

func (l *leader) signal(sig unix.Signal) bool {
	return l.fd >= 0 && !l.exited() && unix.PidfdSendSignal(l.fd, sig, nil, 0) == nil
}

func (l *leader) close() {
	if l.fd >= 0 {
		unix.Close(l.fd)
		l.fd = -1
	}
}

// signalIf sends sig to pid if ok(pid) holds once the process is pinned by
// a pidfd, so that the check and the signal are about the same process.
func signalIf(pid int, sig unix.Signal, ok func(int) bool) bool {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	return ok(pid) && unix.PidfdSendSignal(fd, sig, nil, 0) == nil
}

// removeRuncState removes the bundle and what runc keeps of a container
// that did not exit through runc (killed with it, or after a reboot).
func removeRuncState(rec Identity) error {
	if rec.Backend != Runc {
		return nil
	}
	for _, p := range []string{rec.Bundle, rec.RuncRoot} {
		if p == "" {
			continue
		}
		if !filepath.IsAbs(p) || filepath.Clean(p) != p {
			return fmt.Errorf("runc state path %q is not clean and absolute", p)
		}
	}
	if rec.Bundle != "" {
		if filepath.Base(rec.Bundle) != rec.LaunchID {
			return fmt.Errorf("bundle %s is not named for launch %s", rec.Bundle, rec.LaunchID)
		}
		if err := os.RemoveAll(rec.Bundle); err != nil {
			return fmt.Errorf("remove bundle: %w", err)
		}
	}
	if rec.RuncRoot != "" {
		if err := os.RemoveAll(filepath.Join(rec.RuncRoot, rec.LaunchID)); err != nil {
			return fmt.Errorf("remove runc state: %w", err)
		}
	}
	return nil
}

// Gone reports whether a recorded launch's process tree is proven gone:
// the host rebooted since, or the recorded process is gone (its pid absent,
// reused or a zombie) and its launch cgroup holds nothing. Such a launch
// was left recorded as running by an nlx that died (killed, or its
// terminal gone) before it could stop it; Stop writes its receipt. A
// launch of another host or pid namespace is never proven gone.
func Gone(rec Identity) (bool, error) {
	// procid.Gone proves the recorded process gone on this host (or the
	// host rebooted, taking the cgroup along): then only what the tree
	// left in the cgroup can keep it alive.
	if gone, err := procid.Gone(rec.Identity); err != nil || !gone || rec.Cgroup == "" {
		return gone, err
	}
	host, err := cgroupHostCached()
	if err != nil {
		return false, err
	}
	cg, err := openCgroup(host, rec.Cgroup)
	if err != nil {
		return false, err
	}
	return cg.empty()
}
