package seccomp

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"unsafe"

	"github.com/nlx-dev/nlx/internal/reason"
	"golang.org/x/sys/unix"
)

// unavailable is the error of a filter the host (or the runc binary)
// cannot enforce, so nothing may be launched: seccomp_unavailable, with
// the fix alone in Fix, for nlx doctor.
func unavailable(fix, format string, args ...any) *reason.Error {
	msg := fmt.Sprintf(format, args...)
	if fix != "" {
		msg += "; fix: " + fix
	}
	return &reason.Error{Code: reason.SeccompUnavailable, Msg: msg, Fix: fix}
}

// actionsAvail lists the filter actions the kernel supports (Linux 4.14
// and later).
const actionsAvail = "/proc/sys/kernel/seccomp/actions_avail"

// required are the actions the program returns: errno for the rules,
// kill_process for foreign ABIs. (allow is always there.)
var required = []struct {
	name string
	ret  uint32
}{
	{"errno", unix.SECCOMP_RET_ERRNO},
	{"kill_process", unix.SECCOMP_RET_KILL_PROCESS},
}

const kernelFix = "boot a kernel built with CONFIG_SECCOMP=y and CONFIG_SECCOMP_FILTER=y " +
	"(Linux 4.14 or later; Debian's, Ubuntu's and Raspberry Pi OS's kernels are)"

// probes are the host's answers Available reads, replaceable in tests.
type probes struct {
	// mode is prctl(PR_GET_SECCOMP): 0 none, 1 strict, 2 filter.
	mode func() (int, error)
	// filter tries to install a filter from an invalid address: EFAULT
	// means the kernel has filter mode, EINVAL that it has not.
	filter func() error
	// actions reads actionsAvail.
	actions func() (string, error)
	// action asks seccomp(SECCOMP_GET_ACTION_AVAIL) about one action.
	action func(ret uint32) error
}

var host = probes{
	mode: func() (int, error) {
		r, _, e := unix.RawSyscall(unix.SYS_PRCTL, unix.PR_GET_SECCOMP, 0, 0)
		if e != 0 {
			return 0, e
		}
		return int(r), nil
	},
	filter: func() error {
		_, _, e := unix.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, 0)
		if e == unix.ENOSYS {
			// Before Linux 3.17: the same through prctl.
			_, _, e = unix.RawSyscall(unix.SYS_PRCTL, unix.PR_SET_SECCOMP, unix.SECCOMP_MODE_FILTER, 0)
		}
		if e == 0 {
			return nil
		}
		return e
	},
	actions: func() (string, error) {
		b, err := os.ReadFile(actionsAvail)
		return string(b), err
	},
	action: func(ret uint32) error {
		r := ret
		_, _, e := unix.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_GET_ACTION_AVAIL, 0, uintptr(unsafe.Pointer(&r)))
		if e != 0 {
			return e
		}
		return nil
	},
}

// Available reports whether this host can install the filter Program
// builds: the kernel has seccomp filter mode and the errno and
// kill_process actions. Otherwise it returns an *reason.Error with Code
// reason.SeccompUnavailable. It installs nothing.
func Available() error { return host.available() }

func (p probes) available() error {
	mode, err := p.mode()
	switch {
	case errors.Is(err, unix.EINVAL):
		return unavailable(kernelFix, "the kernel has no seccomp (CONFIG_SECCOMP): prctl(PR_GET_SECCOMP) is unknown")
	case err != nil:
		return unavailable("", "prctl(PR_GET_SECCOMP): %v", err)
	case mode == unix.SECCOMP_MODE_STRICT:
		return unavailable("", "nlx runs in strict seccomp mode")
	}
	// The invalid address must be refused as such (EFAULT); anything else
	// means filters cannot be installed.
	switch err := p.filter(); {
	case errors.Is(err, unix.EFAULT):
	case errors.Is(err, unix.EINVAL):
		return unavailable(kernelFix, "the kernel has no seccomp filter mode (CONFIG_SECCOMP_FILTER)")
	case errors.Is(err, unix.EPERM), errors.Is(err, unix.EACCES):
		return unavailable("allow seccomp(2) and prctl(PR_SET_SECCOMP) to nlx in the container or sandbox it runs in",
			"installing a seccomp filter is denied to nlx (%v), likely by a filter it runs under", err)
	case err == nil:
		return unavailable("", "the kernel accepted a filter from a null address")
	default:
		return unavailable("", "probing seccomp filter mode: %v", err)
	}
	avail, readErr := p.actions()
	if readErr == nil {
		have := strings.Fields(avail)
		for _, r := range required {
			if !slices.Contains(have, r.name) {
				return unavailable(kernelFix, "the kernel lacks the seccomp action %s (%s lists %q)", r.name, actionsAvail, strings.TrimSpace(avail))
			}
		}
		return nil
	}
	// No /proc, or a kernel older than 4.14: ask the kernel itself.
	for _, r := range required {
		switch err := p.action(r.ret); {
		case err == nil:
		case errors.Is(err, unix.EINVAL):
			return unavailable(kernelFix, "the kernel cannot say which seccomp actions it has (older than Linux 4.14?: %v) and %s is unreadable: %v", err, actionsAvail, readErr)
		default:
			return unavailable(kernelFix, "the kernel lacks the seccomp action %s: %v", r.name, err)
		}
	}
	return nil
}
