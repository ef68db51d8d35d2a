package isolate

import (
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// The reexec start (the fallback, see spawn.go) is a protocol between
// Launch (parent) and the re-executed child:
//
//	argv:  reexecArg0 KEEP BACKEND-PATH BACKEND-ARGS...
//	env:   reexecEnv=1 and nothing else
//	fd 3:  release pipe; the parent writes one byte once the child's pid is
//	       in the launch cgroup and its identity is recorded, or closes it
//	       to abort (the child then exits without executing anything)
//	fd 4:  status pipe, close-on-exec in the child; the parent reads EOF
//	       when the backend was executed, or the reason it could not be
//	fds passFirst .. passFirst+KEEP-1: passed on to the backend (the
//	       seccomp program and bind handles bubblewrap names)
//
// The child is the current binary, so nothing but Go's runtime (and package
// initialisation) runs before the backend: fork and exec cannot be split
// in Go otherwise.
const (
	reexecEnv  = "_NLX_ISOLATE_CHILD"
	reexecArg0 = "nlx-isolate"
	releaseFD  = 3
	statusFD   = 4
)

// Reexec must be the first thing main (and TestMain) does. When the process
// is a launch's re-executed child it waits until its parent has put it in
// the launch cgroup and recorded it, then executes the backend in its
// place, and never returns. Otherwise it returns false at once, and
// Launch may use the reexec start when the kernel cannot create a process
// inside a cgroup.
func Reexec() bool {
	if os.Getenv(reexecEnv) != "1" {
		reexecHooked.Store(true)
		return false
	}
	child(os.Args)
	return true // not reached: child exits or executes
}

func child(argv []string) {
	fail := func(format string, args ...any) {
		unix.Write(statusFD, []byte(fmt.Sprintf(format, args...)))
		os.Exit(127)
	}
	if len(argv) < 3 {
		fail("isolate child: %d arguments", len(argv))
	}
	keep, err := strconv.Atoi(argv[1])
	if err != nil || keep < 0 {
		fail("isolate child: bad descriptor count %q", argv[1])
	}
	argv = argv[1:]
	var b [1]byte
	for {
		n, err := unix.Read(releaseFD, b[:])
		if err == unix.EINTR {
			continue
		}
		if n != 1 {
			// The parent aborted or died: run nothing.
			os.Exit(126)
		}
		break
	}
	unix.Close(releaseFD)
	if _, err := unix.FcntlInt(statusFD, unix.F_SETFD, unix.FD_CLOEXEC); err != nil {
		fail("close inherited files: %v", err)
	}
	if err := cloexecFrom(passFirst + keep); err != nil {
		fail("close inherited files: %v", err)
	}
	err = unix.Exec(argv[1], argv[1:], []string{})
	fail("exec %s: %v", argv[1], err)
}

// cloexecFrom marks every fd >= first close-on-exec, so that the backend
// (and through it the provider) inherits only 0, 1 and 2 whatever the
// caller of nlx left open.
func cloexecFrom(first int) error {
	if err := unix.CloseRange(uint(first), ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err == nil {
		return nil
	}
	// Before Linux 5.11.
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return err
	}
	for _, e := range entries {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || fd < first {
			continue
		}
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC); err != nil && err != unix.EBADF {
			return err
		}
	}
	return nil
}
