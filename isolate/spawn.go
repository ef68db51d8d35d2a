package isolate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/containerd/cgroups/v3"
	"github.com/containerd/cgroups/v3/cgroup1"
	"golang.org/x/sys/unix"
)

// The backend must be in the launch cgroup before it executes anything, so
// that no child it forks can start outside. Two ways get it there:
//
// direct (the default): the process is created inside the cgroup. On v2,
// clone3 with CLONE_INTO_CGROUP does it (SysProcAttr.CgroupFD). On v1,
// where membership is per thread, the forking thread is moved into the
// launch cgroup, forks, and is moved back: the child inherits the thread's
// cgroups at fork. No second program runs.
//
// reexec (the fallback, for kernels without CLONE_INTO_CGROUP): the
// current binary is started, waits until the parent has moved it into the
// cgroup, then executes the backend (see Reexec). It costs a Go runtime
// start of the whole nlx binary (several milliseconds, more than a raw
// bubblewrap run), which is why it is not the default.

// forceReexec makes Launch use the reexec way; tests set it to keep that
// path covered on hosts where direct works.
var forceReexec = false

// reexecHooked records that main called Reexec, without which a re-executed
// child would run nlx's main instead of the backend.
var reexecHooked atomic.Bool

// startInCgroup starts cmd with its process in cg in every hierarchy cg
// uses, from its first instruction.
func startInCgroup(cmd *exec.Cmd, cg *cgroup) error {
	if cg.v2 != nil {
		// cgroup2 can only move a process that exists; clone3 needs no
		// more than the directory.
		dir := cg.v2Dir()
		fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("cgroup %s: %w", dir, err)
		}
		defer unix.Close(fd)
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, fd
	}
	if cg.v1 == nil {
		return cmd.Start()
	}
	done := make(chan error, 1)
	go func() {
		// Locked, so that no other goroutine runs on this thread while it
		// is in the sandbox's cgroups, and the fork happens from it.
		runtime.LockOSThread()
		err := startOnThread(cmd, cg)
		if errors.Is(err, errThreadStranded) {
			// Return without unlocking: the runtime ends the thread.
			done <- err
			return
		}
		runtime.UnlockOSThread()
		done <- err
	}()
	return <-done
}

var errThreadStranded = errors.New("thread could not leave the launch cgroup")

// startOnThread moves the calling thread into cg's v1 subsystems
// (cgroup1's AddTask: v1 membership is per thread), starts cmd, which
// inherits them, and moves the thread back where it was.
func startOnThread(cmd *exec.Cmd, cg *cgroup) error {
	task := cgroup1.Process{Pid: unix.Gettid()}
	home, err := threadHome(cg)
	if err != nil {
		return err
	}
	back := func() error {
		if err := home.AddTask(task); err != nil {
			return fmt.Errorf("%w: %w", errThreadStranded, err)
		}
		return nil
	}
	if err := cg.v1.AddTask(task); err != nil {
		// Some subsystems may have taken it: back to all of them.
		return errors.Join(fmt.Errorf("cgroup: move thread into %s: %w", cg.path, err), back())
	}
	err = cmd.Start()
	return errors.Join(err, back())
}

// threadHome is the calling thread's own cgroup in each of cg's v1
// subsystems.
func threadHome(cg *cgroup) (cgroup1.Cgroup, error) {
	paths, _, err := cgroups.ParseCgroupFileUnified("/proc/thread-self/cgroup")
	if err != nil {
		return nil, fmt.Errorf("cgroup: %w", err)
	}
	subs := cg.v1.Subsystems()
	home, err := cgroup1.Load(func(n cgroup1.Name) (string, error) {
		if p, ok := paths[string(n)]; ok {
			return p, nil
		}
		return "", fmt.Errorf("cgroup: this thread's place in %s is unknown", n)
	}, cgroup1.WithHierarchy(hierarchy(subs)))
	if err != nil {
		return nil, fmt.Errorf("cgroup: this thread's own cgroups: %w", err)
	}
	if len(home.Subsystems()) != len(subs) {
		return nil, fmt.Errorf("cgroup: this thread's own cgroups are not in every subsystem of %s", cg.path)
	}
	return home, nil
}

// cloneIntoCgroupUnsupported reports whether a direct start failed because
// the kernel lacks clone3 or CLONE_INTO_CGROUP (before Linux 5.7).
func cloneIntoCgroupUnsupported(err error) bool {
	for _, e := range []unix.Errno{unix.ENOSYS, unix.E2BIG, unix.EINVAL, unix.EOPNOTSUPP} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// started is a started backend process, held until release: bwrap is in
// the launch cgroup and has not executed the provider; runc (not in the
// cgroup: it puts the container there itself) has not executed anything.
type started struct {
	cmd      *exec.Cmd
	releaseW *os.File // the gate: bwrap's --block-fd, or the re-executed child's
	statusR  *os.File // reexec: EOF once the backend was executed, else why not
	// held: the tracer goroutine holding runc stopped at its exec (see
	// startHeld); true lets it run, false kills it. Its answer comes on
	// heldErr.
	held    chan bool
	heldErr chan error
}

func (s *started) release() error {
	if s.held != nil {
		s.held <- true
		s.held = nil
		if err := <-s.heldErr; err != nil {
			return fmt.Errorf("release: %w", err)
		}
		return nil
	}
	if s.releaseW == nil {
		return nil
	}
	_, err := s.releaseW.Write([]byte{1})
	s.releaseW.Close()
	if err != nil {
		return fmt.Errorf("release: %w", err)
	}
	if s.statusR != nil {
		msg, _ := io.ReadAll(s.statusR)
		if len(msg) > 0 {
			return errors.New(string(msg))
		}
	}
	return nil
}

func (s *started) close() {
	if s.held != nil {
		s.held <- false
		s.held = nil
		<-s.heldErr
	}
	for _, f := range []*os.File{s.releaseW, s.statusR} {
		if f != nil {
			f.Close()
		}
	}
}

// startBackend starts bin with args, held until release: bwrap inside the
// launch cgroup, the direct way unless the kernel cannot or a test wants
// the other; runc stopped at its exec, or re-executed where ptrace is
// denied.
func startBackend(cg *cgroup, backend Backend, bin string, args []string, pass []*os.File, cred *syscall.Credential, opts Options) (*started, error) {
	place := backend == Bwrap
	if !forceReexec {
		st, err := startDirect(cg, place, backend, bin, args, pass, cred, opts)
		switch {
		case err == nil:
			return st, nil
		case backend == Runc && errors.Is(err, unix.EPERM):
			// ptrace denied (kernel.yama.ptrace_scope=3, a seccomp
			// policy, or nlx itself being traced): the reexec gate.
		case !place || !cloneIntoCgroupUnsupported(err) || cg.v2 == nil:
			return nil, err
		}
	}
	return startReexec(cg, place, bin, args, pass, cred, opts)
}

// startHeld starts cmd stopped before its first instruction: the child
// asks to be traced (PTRACE_TRACEME) and its exec then stops it with
// SIGTRAP before the new program runs. Only the thread that forked may
// trace it, so a goroutine locked to that thread holds it until release
// detaches it (it runs) or close kills it. Should nlx die meanwhile, the
// kernel kills it (PTRACE_O_EXITKILL, and Pdeathsig).
//
// This is runc's gate: `runc run` creates the container and starts the
// provider in one go, and a createRuntime hook holding it instead cost a
// shell's exec (1 to 2 ms) on every launch; this costs a wait and a
// detach.
func startHeld(cmd *exec.Cmd, st *started) error {
	started := make(chan error, 1)
	st.held, st.heldErr = make(chan bool), make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		cmd.SysProcAttr.Ptrace = true
		if err := cmd.Start(); err != nil {
			runtime.UnlockOSThread()
			started <- err
			return
		}
		pid := cmd.Process.Pid
		err := waitExecStop(pid)
		if err == nil {
			err = unix.PtraceSetOptions(pid, unix.PTRACE_O_EXITKILL)
		}
		started <- err
		if err != nil {
			// The caller kills it; the thread goes with this goroutine
			// (and Pdeathsig with it).
			return
		}
		if !<-st.held {
			// Told to abort: nothing of it ran. The thread goes with
			// this goroutine, so that nothing else runs on a thread that
			// traced.
			cmd.Process.Kill()
			st.heldErr <- nil
			return
		}
		if err := unix.PtraceDetach(pid); err != nil {
			st.heldErr <- fmt.Errorf("detach %s: %w", cmd.Path, err)
			return // the thread goes: Pdeathsig kills the child
		}
		runtime.UnlockOSThread()
		st.heldErr <- nil
	}()
	if err := <-started; err != nil {
		st.held = nil
		if cmd.Process == nil {
			return err
		}
		return fmt.Errorf("hold %s at its exec: %w", cmd.Path, err)
	}
	return nil
}

// waitExecStop waits for pid's SIGTRAP stop at its exec.
func waitExecStop(pid int) error {
	for {
		var ws unix.WaitStatus
		_, err := unix.Wait4(pid, &ws, unix.WALL, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		if !ws.Stopped() || ws.StopSignal() != unix.SIGTRAP {
			return fmt.Errorf("did not stop at its exec (wait status %#x)", uint32(ws))
		}
		return nil
	}
}

func backendCmd(path string, args []string, opts Options) *exec.Cmd {
	return &exec.Cmd{
		Path:   path,
		Args:   args,
		Env:    []string{}, // bwrap sets the sandbox's; runc reads it from the bundle
		Stdin:  opts.Stdin,
		Stdout: opts.Stdout,
		Stderr: opts.Stderr,
		SysProcAttr: &syscall.SysProcAttr{
			// A session of its own, so that no terminal nlx runs on is
			// the backend's controlling terminal: in nlx's session but
			// another process group, runc reading a terminal on stdin was
			// stopped by SIGTTIN and hung forever. (A session is also a
			// process group of its own, as Stop expects.)
			Setsid: true,
			// If nlx dies the backend dies; bwrap's --die-with-parent
			// then takes the sandbox with it.
			Pdeathsig: syscall.SIGKILL,
		},
		// After the backend exits, a grandchild still holding an output
		// pipe must not keep Wait blocked.
		WaitDelay: 2 * time.Second,
	}
}

func startDirect(cg *cgroup, place bool, backend Backend, bin string, args []string, pass []*os.File, cred *syscall.Credential, opts Options) (*started, error) {
	cmd := backendCmd(bin, append([]string{bin}, args...), opts)
	cmd.SysProcAttr.Credential = cred
	st := &started{cmd: cmd}
	var gate *os.File
	if backend == Bwrap {
		// bubblewrap reads one byte from fd 3 after building the sandbox
		// and before executing the provider, then closes it. fd 4 is
		// closed (the reexec start's status pipe); what the launch passes
		// starts at passFirst in both modes.
		r, w, err := os.Pipe()
		if err != nil {
			return nil, err
		}
		gate, st.releaseW = r, w
		cmd.Args = append([]string{bin, "--block-fd", "3"}, args...)
		cmd.ExtraFiles = append([]*os.File{r, nil}, pass...)
	} else if len(pass) > 0 {
		return nil, fmt.Errorf("%s takes no descriptors", backend)
	}
	// Go opens everything close-on-exec, but descriptors nlx inherited or
	// a library opened otherwise would reach bubblewrap, and through it
	// the provider. nlx passes none on purpose.
	if err := cloexecFrom(3); err != nil {
		st.close()
		return nil, fmt.Errorf("mark descriptors close-on-exec: %w", err)
	}
	var err error
	if place {
		err = startInCgroup(cmd, cg)
	} else {
		err = startHeld(cmd, st) // runc
	}
	if gate != nil {
		gate.Close()
	}
	if err != nil {
		if cmd.Process != nil {
			// Started, then failed (its thread stranded): kill it while
			// the gate is still shut, since bubblewrap takes EOF on it as
			// a go.
			cmd.Process.Kill()
			cmd.Wait()
			killTree(cg)
		}
		st.close()
		return nil, err
	}
	return st, nil
}

// killTree kills whatever is in cg, bounded in time: for failure paths,
// which must not hang on an unkillable process.
func killTree(cg *cgroup) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cg.killAll(ctx)
}

func startReexec(cg *cgroup, place bool, bin string, args []string, pass []*os.File, cred *syscall.Credential, opts Options) (*started, error) {
	if !reexecHooked.Load() {
		return nil, errors.New("this kernel cannot create a process inside a cgroup (no CLONE_INTO_CGROUP) " +
			"and main did not call isolate.Reexec, which the fallback needs")
	}
	releaseR, releaseW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	statusR, statusW, err := os.Pipe()
	if err != nil {
		releaseR.Close()
		releaseW.Close()
		return nil, err
	}
	st := &started{releaseW: releaseW, statusR: statusR}
	cmd := backendCmd("/proc/self/exe", append([]string{reexecArg0, strconv.Itoa(len(pass)), bin}, args...), opts)
	cmd.Env = []string{reexecEnv + "=1"}
	cmd.ExtraFiles = append([]*os.File{releaseR, statusW}, pass...)
	// The child executes the backend as who it runs as.
	cmd.SysProcAttr.Credential = cred
	st.cmd = cmd
	err = cmd.Start()
	releaseR.Close()
	statusW.Close()
	if err != nil {
		st.close()
		return nil, err
	}
	if !place {
		return st, nil
	}
	if err := cg.enter(cmd.Process.Pid); err != nil {
		// Closing the gate unreleased makes the child exit unexecuted.
		st.close()
		cmd.Wait()
		return nil, err
	}
	return st, nil
}
