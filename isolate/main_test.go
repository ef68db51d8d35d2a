package isolate

import (
	"fmt"
	"os"
	"testing"
	"unsafe"

	"github.com/nlx-dev/nlx/egress"
	"github.com/nlx-dev/nlx/toolproxy"

	"github.com/nlx-dev/nlx/internal/testtool"
	"golang.org/x/sys/unix"
)

func TestMain(m *testing.M) {
	// The test binary is also the egress helper (the proxy, the bridge,
	// the runc loopback hook), as nlx is.
	egress.Main()
	// And the tool bridge.
	toolproxy.Main()
	if os.Getenv(probeEnv) == "1" {
		probeSyscalls()
		os.Exit(0)
	}
	if Reexec() {
		return
	}
	os.Exit(testtool.RunSwept(m))
}

// probeEnv makes the test binary, run inside a sandbox, try the calls the
// seccomp filter denies and print each one's errno.
const probeEnv = "NLX_TEST_SYSCALL_PROBE"

// probes are the calls every launch's filter must deny with EPERM: the
// kernel keyring, tracing or reading another process, mounts and new
// namespaces, BPF, perf, kexec and modules.
var probes = []struct {
	name string
	call func() error
}{
	{"keyctl", func() error {
		_, err := unix.KeyctlInt(unix.KEYCTL_GET_KEYRING_ID, unix.KEY_SPEC_SESSION_KEYRING, 0, 0, 0)
		return err
	}},
	{"add_key", func() error {
		_, err := unix.AddKey("user", "nlx-probe", []byte("x"), unix.KEY_SPEC_PROCESS_KEYRING)
		return err
	}},
	{"request_key", func() error {
		_, err := unix.RequestKey("user", "nlx-probe", "", unix.KEY_SPEC_PROCESS_KEYRING)
		return err
	}},
	{"ptrace", func() error { return unix.PtraceAttach(os.Getppid()) }},
	{"process_vm_readv", func() error {
		var b [8]byte
		local := []unix.Iovec{{Base: &b[0], Len: 8}}
		remote := []unix.RemoteIovec{{Base: uintptr(unsafe.Pointer(&b[0])), Len: 8}}
		_, err := unix.ProcessVMReadv(os.Getppid(), local, remote, 0)
		return err
	}},
	{"mount", func() error { return unix.Mount("none", "/tmp", "tmpfs", 0, "") }},
	{"umount2", func() error { return unix.Unmount("/proc", unix.MNT_DETACH) }},
	{"unshare-user", func() error { return unix.Unshare(unix.CLONE_NEWUSER) }},
	{"unshare-mount", func() error { return unix.Unshare(unix.CLONE_NEWNS) }},
	{"setns", func() error {
		fd, err := unix.Open("/proc/self/ns/net", unix.O_RDONLY, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		return unix.Setns(fd, unix.CLONE_NEWNET)
	}},
	{"bpf", func() error {
		_, _, e := unix.Syscall(unix.SYS_BPF, 0, 0, 0)
		return errnoOf(e)
	}},
	{"perf_event_open", func() error {
		attr := unix.PerfEventAttr{Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_CPU_CLOCK}
		attr.Size = uint32(unsafe.Sizeof(attr))
		fd, err := unix.PerfEventOpen(&attr, 0, -1, -1, 0)
		if err == nil {
			unix.Close(fd)
		}
		return err
	}},
	{"kexec_load", func() error {
		_, _, e := unix.Syscall6(unix.SYS_KEXEC_LOAD, 0, 0, 0, 0, 0, 0)
		return errnoOf(e)
	}},
	{"init_module", func() error {
		_, _, e := unix.Syscall(unix.SYS_INIT_MODULE, 0, 0, 0)
		return errnoOf(e)
	}},
	{"delete_module", func() error { return unix.DeleteModule("nlx_probe", 0) }},
	{"pivot_root", func() error { return unix.PivotRoot("/tmp", "/tmp") }},
	{"userfaultfd", func() error {
		fd, _, e := unix.Syscall(unix.SYS_USERFAULTFD, 0, 0, 0)
		if e == 0 {
			unix.Close(int(fd))
		}
		return errnoOf(e)
	}},
}

func errnoOf(e unix.Errno) error {
	if e == 0 {
		return nil
	}
	return e
}

func probeSyscalls() {
	for _, p := range probes {
		err := p.call()
		switch e, ok := err.(unix.Errno); {
		case err == nil:
			fmt.Printf("probe %s ALLOWED\n", p.name)
		case ok:
			fmt.Printf("probe %s %s\n", p.name, unix.ErrnoName(e))
		default:
			fmt.Printf("probe %s %v\n", p.name, err)
		}
	}
	fmt.Println("probes done")
}
