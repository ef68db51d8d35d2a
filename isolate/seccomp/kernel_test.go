package seccomp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/nlx-dev/nlx/internal/testtool"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// helperEnv turns the test binary into a helper (see TestMain): the
// modes below.
const helperEnv = "NLX_SECCOMP_TEST_HELPER"

const (
	modeInstall   = "install"   // install the filter, probe, probe again in a grandchild
	modeSandboxed = "sandboxed" // filtered by bwrap or runc: probe, and in a grandchild
	modeProbe     = "probe"     // probe only (the grandchild)
	modeControl   = "control"   // probe without any filter
	modeX32       = "x32"       // install, then make an x32 syscall (amd64)
	modeI386      = "i386"      // install, then make an i386 syscall with int 0x80 (amd64)
	modeI386Ctl   = "i386-control"
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		os.Exit(helper(mode))
	}
	os.Exit(m.Run())
}

// report is what a helper prints on stdout.
type report struct {
	Results    map[string]int `json:"results"`
	Seccomp    string         `json:"seccomp"`    // /proc/self/status "Seccomp:"
	NoNewPrivs string         `json:"noNewPrivs"` // /proc/self/status "NoNewPrivs:"
	Grandchild *report        `json:"grandchild,omitempty"`
}

func helper(mode string) int {
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 2
	}
	switch mode {
	case modeInstall, modeX32, modeI386:
		// Before anything else the helper does; TSYNC puts the filter on
		// every thread the runtime has started.
		runtime.LockOSThread()
		p, err := Profile()
		if err != nil {
			return fail(err)
		}
		prog, err := Program(p)
		if err != nil {
			return fail(err)
		}
		if err := install(prog); err != nil {
			return fail(err)
		}
	}
	switch mode {
	case modeX32:
		_, _, e := unix.RawSyscall(x32Bit|unix.SYS_GETPID, 0, 0, 0)
		fmt.Fprintf(os.Stderr, "helper: x32 getpid returned (errno %d)\n", e)
		return 3
	case modeI386, modeI386Ctl:
		if err := int80Getpid(); err != nil {
			return fail(err)
		}
		if mode == modeI386 {
			fmt.Fprintln(os.Stderr, "helper: i386 getpid returned")
			return 3
		}
		return 0
	}
	r := probeAll()
	if mode == modeInstall || mode == modeSandboxed {
		exe, err := os.Executable()
		if err != nil {
			return fail(err)
		}
		// Through a shell, as a provider's commands run: the filter is
		// inherited across fork and exec.
		cmd := exec.Command("/bin/sh", "-c", `exec "$0" -test.run='^$'`, exe)
		cmd.Env = append(os.Environ(), helperEnv+"="+modeProbe)
		cmd.Stderr = os.Stderr
		out, err := cmd.Output()
		if err != nil {
			return fail(fmt.Errorf("grandchild: %w", err))
		}
		r.Grandchild = new(report)
		if err := json.Unmarshal(out, r.Grandchild); err != nil {
			return fail(fmt.Errorf("grandchild: %q: %w", out, err))
		}
	}
	if err := json.NewEncoder(os.Stdout).Encode(r); err != nil {
		return fail(err)
	}
	return 0
}

// install loads prog as the kernel's seccomp filter for every thread.
func install(prog []byte) error {
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	f := make([]unix.SockFilter, len(prog)/8)
	for i := range f {
		b := prog[8*i:]
		f[i] = unix.SockFilter{Code: binary.LittleEndian.Uint16(b), Jt: b[2], Jf: b[3], K: binary.LittleEndian.Uint32(b[4:])}
	}
	fp := unix.SockFprog{Len: uint16(len(f)), Filter: &f[0]}
	r, _, e := unix.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&fp)))
	runtime.KeepAlive(f)
	if e != 0 {
		return fmt.Errorf("seccomp: %w", e)
	}
	if r != 0 {
		return fmt.Errorf("seccomp: thread %d could not be synchronised", r)
	}
	return nil
}

func probeAll() *report {
	r := &report{Results: map[string]int{}}
	for _, p := range probeList() {
		ch := make(chan unix.Errno)
		go func() {
			// Each probe on a thread of its own that ends with it, so that
			// a call that succeeds (unshare, personality) changes nothing
			// for the next.
			runtime.LockOSThread()
			ch <- p.run()
		}()
		r.Results[p.name] = int(<-ch)
	}
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			k, v, _ := strings.Cut(sc.Text(), ":")
			switch k {
			case "Seccomp":
				r.Seccomp = strings.TrimSpace(v)
			case "NoNewPrivs":
				r.NoNewPrivs = strings.TrimSpace(v)
			}
		}
	}
	return r
}

// probe is one call and its result under the filter: EPERM (clone3:
// ENOSYS) for what is denied, 0 for what must still work. Every call is
// harmless without the filter (bad arguments, a missing path, a child of
// the helper's own): the control run shows its result there differs.
type probe struct {
	name string
	want unix.Errno
	// host: without the filter the result depends on the host (sysctls,
	// kernel config) and may be want too; the control only logs it.
	host bool
	run  func() unix.Errno
}

const absent = "/nonexistent-nlx-seccomp-probe"

func sys(trap uintptr, a ...uintptr) unix.Errno {
	var x [6]uintptr
	copy(x[:], a)
	_, _, e := unix.Syscall6(trap, x[0], x[1], x[2], x[3], x[4], x[5])
	return e
}

func errnoOf(err error) unix.Errno {
	var e unix.Errno
	switch {
	case err == nil:
		return 0
	case errors.As(err, &e):
		return e
	}
	return unix.EIO
}

func probeList() []probe {
	s := func(v string) *byte { p, _ := unix.BytePtrFromString(v); return p }
	ptr := func(p *byte) uintptr { return uintptr(unsafe.Pointer(p)) }
	neg := func(v int) uintptr { return uintptr(v) }
	ns := func(flag uintptr) func() unix.Errno {
		return func() unix.Errno { return sys(unix.SYS_UNSHARE, flag) }
	}
	// clone with flags the kernel rejects (EINVAL) before it creates
	// anything, so that no raw child of a Go process can ever appear.
	clone := func(flags uintptr) func() unix.Errno {
		return func() unix.Errno { return sys(unix.SYS_CLONE, flags) }
	}
	vm := func(trap uintptr) func() unix.Errno {
		return func() unix.Errno {
			var src, dst [8]byte
			local := []unix.Iovec{{Base: &dst[0]}}
			remote := []unix.Iovec{{Base: &src[0]}}
			local[0].SetLen(8)
			remote[0].SetLen(8)
			if trap == unix.SYS_PROCESS_VM_WRITEV {
				local, remote = remote, local
			}
			_, _, e := unix.Syscall6(trap, uintptr(unix.Getpid()), uintptr(unsafe.Pointer(&local[0])), 1,
				uintptr(unsafe.Pointer(&remote[0])), 1, 0)
			runtime.KeepAlive(src)
			runtime.KeepAlive(dst)
			return e
		}
	}
	socket := func(family int) func() unix.Errno {
		return func() unix.Errno {
			fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
			if err == nil {
				unix.Close(fd)
			}
			if errors.Is(err, unix.ESOCKTNOSUPPORT) || errors.Is(err, unix.EPROTONOSUPPORT) {
				fd, err = unix.Socket(family, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
				if err == nil {
					unix.Close(fd)
				}
			}
			return errnoOf(err)
		}
	}
	user, name, payload := s("user"), s("nlx-seccomp-probe"), s("x")
	none, tmpfs, empty, abs := s("none"), s("tmpfs"), s(""), s(absent)
	return []probe{
		{name: "keyctl", want: unix.EPERM, run: func() unix.Errno {
			return sys(unix.SYS_KEYCTL, unix.KEYCTL_GET_KEYRING_ID, neg(unix.KEY_SPEC_SESSION_KEYRING), 0)
		}},
		{name: "add_key", want: unix.EPERM, run: func() unix.Errno {
			return sys(unix.SYS_ADD_KEY, ptr(user), ptr(name), ptr(payload), 1, neg(unix.KEY_SPEC_PROCESS_KEYRING))
		}},
		{name: "request_key", want: unix.EPERM, run: func() unix.Errno {
			return sys(unix.SYS_REQUEST_KEY, ptr(user), ptr(s("nlx-seccomp-absent")), 0, 0)
		}},
		{name: "ptrace_attach", want: unix.EPERM, run: func() unix.Errno {
			// The helper's own child: the kernel lets a root parent trace
			// it, so only the filter says no.
			child := exec.Command("/bin/sleep", "60")
			if err := child.Start(); err != nil {
				return unix.EIO
			}
			defer func() { child.Process.Kill(); child.Wait() }()
			return sys(unix.SYS_PTRACE, unix.PTRACE_ATTACH, uintptr(child.Process.Pid), 0, 0)
		}},
		{name: "process_vm_readv", want: unix.EPERM, run: vm(unix.SYS_PROCESS_VM_READV)},
		{name: "process_vm_writev", want: unix.EPERM, run: vm(unix.SYS_PROCESS_VM_WRITEV)},
		{name: "kcmp", want: unix.EPERM, run: func() unix.Errno {
			return sys(unix.SYS_KCMP, uintptr(unix.Getpid()), uintptr(unix.Getpid()), 1 /* KCMP_VM */, 0, 0)
		}},
		{name: "pidfd_getfd", want: unix.EPERM, run: func() unix.Errno { return sys(unix.SYS_PIDFD_GETFD, neg(-1), 0, 0) }},
		{name: "mount", want: unix.EPERM, run: func() unix.Errno {
			return sys(unix.SYS_MOUNT, ptr(none), ptr(abs), ptr(tmpfs), 0, ptr(empty))
		}},
		{name: "umount2", want: unix.EPERM, run: func() unix.Errno { return sys(unix.SYS_UMOUNT2, ptr(abs), 0) }},
		{name: "pivot_root", want: unix.EPERM, run: func() unix.Errno { return sys(unix.SYS_PIVOT_ROOT, ptr(abs), ptr(abs)) }},
		{name: "chroot", want: unix.EPERM, run: func() unix.Errno { return sys(unix.SYS_CHROOT, ptr(abs)) }},
		{name: "fsopen", want: unix.EPERM, run: func() unix.Errno { return sys(unix.SYS_FSOPEN, ptr(s("nlx-absent-fs")), 0) }},
		{name: "open_tree", want: unix.EPERM, run: func() unix.Errno { return sys(unix.SYS_OPEN_TREE, neg(unix.AT_FDCWD), ptr(abs), 0) }},
		{name: "mount_setattr", want: unix.EPERM, run: func() unix.Errno { return sys(unix.SYS_MOUNT_SETATTR, neg(-1), ptr(empty), 0, 0, 0) }},
		{name: "open_by_handle_at", want: unix.EPERM, run: func() unix.Errno { return sys(unix.SYS_OPEN_BY_HANDLE_AT, neg(-1), 0, 0) }},
		{name: "swapon", want: unix.EPERM, run: func() unix.Errno { return sys(unix.SYS_SWAPON, ptr(abs), 0) }},
		{name: "unshare_newuser", want: unix.EPERM, run: ns(unix.CLONE_NEWUSER)},
		{name: "unshare_newns", want: unix.EPERM, run: ns(unix.CLONE_NEWNS)},
		{name: "unshare_newnet", want: unix.EPERM, run: ns(unix.CLONE_NEWNET)},
		{name: "unshare_newpid", want: unix.EPERM, run: ns(unix.CLONE_NEWPID)},
		{name: "setns", want: unix.EPERM, run: func() unix.Errno { return sys(unix.SYS_SETNS, neg(-1), 0) }},
		{name: "clone_newuser", want: unix.EPERM, run: clone(unix.CLONE_NEWUSER | unix.CLONE_FS)},
		{name: "clone_newns", want: unix.EPERM, run: clone(unix.CLONE_NEWNS | unix.CLONE_FS)},
		{name: "clone_newpid", want: unix.EPERM, run: clone(unix.CLONE_NEWPID | unix.CLONE_THREAD)},
		{name: "clone_newnet", want: unix.EPERM, run: clone(unix.CLONE_NEWNET | unix.CLONE_THREAD)},
		{name: "clone3", want: unix.ENOSYS, run: func() unix.Errno { return sys(unix.SYS_CLONE3, 0, 0) }},
		{name: "bpf", want: unix.EPERM, host: true, run: func() unix.Errno { return sys(unix.SYS_BPF, neg(-1), 0, 0) }},
		{name: "perf_event_open", want: unix.EPERM, host: true, run: func() unix.Errno {
			return sys(unix.SYS_PERF_EVENT_OPEN, 0, 0, neg(-1), neg(-1), 0)
		}},
		{name: "userfaultfd", want: unix.EPERM, host: true, run: func() unix.Errno {
			fd, _, e := unix.Syscall(unix.SYS_USERFAULTFD, unix.O_CLOEXEC, 0, 0)
			if e == 0 {
				unix.Close(int(fd))
			}
			return e
		}},
		{name: "io_uring_setup", want: unix.EPERM, host: true, run: func() unix.Errno { return sys(unix.SYS_IO_URING_SETUP, 0, 0) }},
		{name: "kexec_load", want: unix.EPERM, host: true, run: func() unix.Errno { return sys(unix.SYS_KEXEC_LOAD, 0, 0, 0, 0xdead0000) }},
		{name: "kexec_file_load", want: unix.EPERM, host: true, run: func() unix.Errno {
			return sys(unix.SYS_KEXEC_FILE_LOAD, neg(-1), neg(-1), 0, 0, 0xdead0000)
		}},
		{name: "init_module", want: unix.EPERM, host: true, run: func() unix.Errno { return sys(unix.SYS_INIT_MODULE, 0, 0, ptr(empty)) }},
		{name: "finit_module", want: unix.EPERM, host: true, run: func() unix.Errno { return sys(unix.SYS_FINIT_MODULE, neg(-1), ptr(empty), 0) }},
		{name: "delete_module", want: unix.EPERM, host: true, run: func() unix.Errno {
			return sys(unix.SYS_DELETE_MODULE, ptr(s("nlx_seccomp_absent")), unix.O_NONBLOCK)
		}},
		{name: "syslog", want: unix.EPERM, run: func() unix.Errno { return sys(unix.SYS_SYSLOG, 10 /* SIZE_BUFFER */, 0, 0) }},
		{name: "clock_settime", want: unix.EPERM, run: func() unix.Errno {
			ts := unix.Timespec{}
			e := sys(unix.SYS_CLOCK_SETTIME, unix.CLOCK_MONOTONIC, uintptr(unsafe.Pointer(&ts)))
			runtime.KeepAlive(&ts)
			return e
		}},
		{name: "settimeofday_null", want: unix.EPERM, run: func() unix.Errno { return sys(unix.SYS_SETTIMEOFDAY, 0, 0) }},
		{name: "personality_no_aslr", want: unix.EPERM, run: func() unix.Errno { return sys(unix.SYS_PERSONALITY, 0x0040000) }},
		{name: "socket_alg", want: unix.EPERM, run: socket(unix.AF_ALG)},
		{name: "socket_vsock", want: unix.EPERM, run: socket(unix.AF_VSOCK)},

		// What providers and their shells do all day.
		{name: "getpid", run: func() unix.Errno { return sys(unix.SYS_GETPID) }},
		{name: "openat_read", run: func() unix.Errno {
			fd, err := unix.Open("/proc/self/stat", unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				return errnoOf(err)
			}
			defer unix.Close(fd)
			_, err = unix.Read(fd, make([]byte, 64))
			return errnoOf(err)
		}},
		{name: "pipe_write", run: func() unix.Errno {
			var p [2]int
			if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
				return errnoOf(err)
			}
			defer unix.Close(p[0])
			defer unix.Close(p[1])
			if _, err := unix.Write(p[1], []byte("x")); err != nil {
				return errnoOf(err)
			}
			_, err := unix.Read(p[0], make([]byte, 1))
			return errnoOf(err)
		}},
		{name: "stat", run: func() unix.Errno { var st unix.Stat_t; return errnoOf(unix.Stat("/", &st)) }},
		{name: "fork_exec_true", run: func() unix.Errno { return errnoOf(exec.Command("/bin/true").Run()) }},
		{name: "threads", run: func() unix.Errno {
			// Four goroutines locked to threads at once need threads the
			// runtime has to clone now.
			const n = 4
			tids := make(chan int, n)
			release := make(chan struct{})
			for range n {
				go func() {
					runtime.LockOSThread()
					tids <- unix.Gettid()
					<-release
				}()
			}
			seen := map[int]bool{}
			for range n {
				seen[<-tids] = true
			}
			close(release)
			if len(seen) != n {
				return unix.EAGAIN
			}
			return 0
		}},
		{name: "socket_unix", run: socket(unix.AF_UNIX)},
		{name: "socket_inet", run: socket(unix.AF_INET)},
		{name: "personality_query", run: func() unix.Errno { return sys(unix.SYS_PERSONALITY, 0xffffffff) }},
		{name: "uname", run: func() unix.Errno { var u unix.Utsname; return errnoOf(unix.Uname(&u)) }},
	}
}

// runHelper runs the test binary (or args, when given) as a helper in
// mode and decodes its report.
func runHelper(t *testing.T, mode string, cmd *exec.Cmd) *report {
	t.Helper()
	if cmd == nil {
		exe, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		cmd = exec.Command(exe, "-test.run=^$")
	}
	cmd.Env = append(os.Environ(), helperEnv+"="+mode)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s helper: %v\n%s", mode, err, stderr.String())
	}
	var r report
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("%s helper: %q: %v\n%s", mode, out, err, stderr.String())
	}
	return &r
}

// checkFiltered holds every probe in r (and its grandchild) to its want.
func checkFiltered(t *testing.T, where string, r *report) {
	t.Helper()
	for _, p := range probeList() {
		got, ok := r.Results[p.name]
		if !ok {
			t.Errorf("%s: %s not reported", where, p.name)
			continue
		}
		if unix.Errno(got) != p.want {
			t.Errorf("%s: %s: got %v (%d), want %v (%d)", where, p.name, unix.Errno(got), got, p.want, p.want)
		}
	}
	if r.Seccomp != "2" || r.NoNewPrivs != "1" {
		t.Errorf("%s: Seccomp %q, NoNewPrivs %q; want filter mode 2 and 1", where, r.Seccomp, r.NoNewPrivs)
	}
	if r.Grandchild != nil {
		checkFiltered(t, where+" grandchild", r.Grandchild)
	}
}

func needSeccomp(t *testing.T) {
	t.Helper()
	if err := Available(); err != nil {
		if testtool.InCI() {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	if _, err := archFor(runtime.GOARCH); err != nil {
		t.Skip(err)
	}
}

// TestKernelFilter installs the program in a re-executed test binary and
// makes each probe: denied calls fail with EPERM (clone3 ENOSYS), the
// rest work, in the helper and in a grandchild started through /bin/sh.
// The control run, without a filter, shows that each denied call would
// have got another answer, so the EPERM is the filter's.
func TestKernelFilter(t *testing.T) {
	needSeccomp(t)
	control := runHelper(t, modeControl, nil)
	for _, p := range probeList() {
		got := unix.Errno(control.Results[p.name])
		switch {
		case p.want == 0 && got != 0:
			t.Errorf("control: %s fails without a filter: %v", p.name, got)
		case p.want != 0 && got == p.want && p.host:
			t.Logf("control: %s gets %v on this host even without the filter", p.name, got)
		case p.want != 0 && got == p.want:
			t.Errorf("control: %s gets %v without the filter too; the probe proves nothing", p.name, got)
		}
	}
	checkFiltered(t, "filtered", runHelper(t, modeInstall, nil))
}

// TestKernelForeignABI: on amd64 an x32 syscall (bit 30) and an i386 one
// (int 0x80) must kill the filtered process, not reach the kernel.
func TestKernelForeignABI(t *testing.T) {
	needSeccomp(t)
	if runtime.GOARCH != "amd64" {
		t.Skip("x32 and i386 are amd64's")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	run := func(mode string) error {
		cmd := exec.Command(exe, "-test.run=^$")
		cmd.Env = append(os.Environ(), helperEnv+"="+mode)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		if stderr.Len() > 0 {
			t.Logf("%s: %s", mode, stderr.String())
		}
		return err
	}
	modes := []string{modeX32}
	if err := run(modeI386Ctl); err != nil {
		// Not the filter's failure: a kernel without IA32 emulation.
		t.Logf("int 0x80 fails without a filter (%v): no IA32 emulation here, i386 not tried", err)
	} else {
		modes = append(modes, modeI386)
	}
	for _, mode := range modes {
		err := run(mode)
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Errorf("%s: %v, want death by SIGSYS", mode, err)
			continue
		}
		ws := ee.Sys().(syscall.WaitStatus)
		if !ws.Signaled() || ws.Signal() != syscall.SIGSYS {
			t.Errorf("%s: %v, want death by SIGSYS", mode, err)
		}
	}
}

// lookBwrap finds bubblewrap, skipping without it except under CI, which
// installs it.
func lookBwrap(t *testing.T) string {
	t.Helper()
	return testtool.Need(t, "bwrap")
}

// TestBwrap runs the probes in a real bubblewrap sandbox that loads
// Program's bytes from --seccomp FD. The same sandbox without --seccomp
// is the control: there keyctl works and mount fails otherwise, so the
// EPERM is the filter's, not bubblewrap's dropped capabilities'.
func TestBwrap(t *testing.T) {
	needSeccomp(t)
	bwrap := lookBwrap(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p, err := Profile()
	if err != nil {
		t.Fatal(err)
	}
	prog, err := Program(p)
	if err != nil {
		t.Fatal(err)
	}
	sandbox := func(seccomp bool) *exec.Cmd {
		args := []string{"--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", "--unshare-pid",
			"--new-session", "--die-with-parent", "--cap-drop", "ALL"}
		cmd := exec.Command(bwrap)
		if seccomp {
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			// The program is smaller than a pipe's buffer.
			if _, err := w.Write(prog); err != nil {
				t.Fatal(err)
			}
			w.Close()
			t.Cleanup(func() { r.Close() })
			cmd.ExtraFiles = []*os.File{r}
			args = append(args, "--seccomp", "3")
		}
		cmd.Args = append(append(cmd.Args, args...), "--", exe, "-test.run=^$")
		return cmd
	}
	control := runHelper(t, modeProbe, sandbox(false))
	for _, name := range []string{"keyctl", "mount"} {
		if got := unix.Errno(control.Results[name]); got == unix.EPERM {
			t.Errorf("bwrap without --seccomp: %s gets EPERM too; the test proves nothing", name)
		}
	}
	checkFiltered(t, "bwrap", runHelper(t, modeSandboxed, sandbox(true)))
}

// TestRunc runs the probes in a real runc container whose spec carries
// Profile() as linux.seccomp, compiled by runc's libseccomp.
func TestRunc(t *testing.T) {
	needSeccomp(t)
	runc := lookRunc(t)
	if os.Geteuid() != 0 {
		t.Skip("runc needs root here")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p, err := Profile()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	bundle := filepath.Join(dir, "bundle")
	if err := os.MkdirAll(filepath.Join(bundle, "rootfs"), 0o755); err != nil {
		t.Fatal(err)
	}
	const probePath = "/nlx-seccomp-probe"
	bind := func(src, dst string) specs.Mount {
		return specs.Mount{Destination: dst, Type: "bind", Source: src, Options: []string{"rbind", "ro", "nosuid", "nodev"}}
	}
	s := &specs.Spec{
		Version: specs.Version,
		Root:    &specs.Root{Path: "rootfs", Readonly: true},
		Process: &specs.Process{
			Args:            []string{probePath, "-test.run=^$"},
			Env:             []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", helperEnv + "=" + modeSandboxed},
			Cwd:             "/",
			Capabilities:    &specs.LinuxCapabilities{},
			NoNewPrivileges: true,
		},
		Mounts: []specs.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "noexec", "nodev"}},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
			bind(exe, probePath),
		},
		Linux: &specs.Linux{
			Namespaces: []specs.LinuxNamespace{
				{Type: specs.PIDNamespace}, {Type: specs.IPCNamespace}, {Type: specs.UTSNamespace},
				{Type: specs.MountNamespace}, {Type: specs.NetworkNamespace},
			},
			Resources: &specs.LinuxResources{Devices: []specs.LinuxDeviceCgroup{{Allow: false, Access: "rwm"}}},
			Seccomp:   p,
		},
	}
	for _, d := range []string{"/usr", "/bin", "/lib", "/lib64", "/sbin", "/etc"} {
		if fi, err := os.Lstat(d); err == nil && fi.IsDir() {
			s.Mounts = append(s.Mounts, bind(d, d))
		} else if err == nil && fi.Mode()&os.ModeSymlink != 0 {
			// A merged /usr: /bin -> usr/bin inside too.
			target, err := os.Readlink(d)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(target, filepath.Join(bundle, "rootfs", d)); err != nil {
				t.Fatal(err)
			}
		}
	}
	config, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), config, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	id := fmt.Sprintf("nlx-seccomp-test-%d", os.Getpid())
	cmd := exec.CommandContext(ctx, runc, "--root", filepath.Join(dir, "state"), "run", "--bundle", bundle, id)
	checkFiltered(t, "runc", runHelper(t, modeSandboxed, cmd))
}
