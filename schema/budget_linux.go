package schema

import (
	"os"
	"runtime"
	"syscall"
)

// executable is the running binary, even if its file was replaced or
// removed since it started (an upgrade in place).
func executable() (string, error) {
	if _, err := os.Stat("/proc/self/exe"); err == nil {
		return "/proc/self/exe", nil
	}
	return os.Executable()
}

// childAttr kills the child when the thread that started it exits: when nlx
// dies, even of SIGKILL, the evaluation does not outlive it.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

func lockThread()   { runtime.LockOSThread() }
func unlockThread() { runtime.UnlockOSThread() }
