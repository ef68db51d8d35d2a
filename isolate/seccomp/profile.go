package seccomp

import (
	"fmt"
	"runtime"
	"slices"
	"sync"

	moby "github.com/moby/profiles/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// deviations are where nlx's profile denies what Docker's default allows.
// Each name is taken out of every rule, so it falls to the default action
// (EPERM).
var deviations = []struct {
	names []string
	why   string
}{
	{
		// Docker allows these on kernels >= 4.8, where ptrace can no longer
		// be used to skip seccomp, because a container is one trust domain.
		// A sandbox is not: the provider process (Codex app-server, Claude
		// Code) holds the connection's tokens in memory and runs under the
		// same uid as the shells the model drives, so tracing or reading
		// another process of the sandbox would hand those tokens to the
		// model's shell, or let it inject code into the provider.
		names: []string{"ptrace", "process_vm_readv", "process_vm_writev"},
		why:   "tracing or reading another process of the sandbox",
	},
}

// mustDeny are calls no rule of nlx's profile may allow, whatever a
// dependency bump brings: Profile fails rather than return a profile that
// allows one. Docker's default already denies all but the deviations above
// to a process without capabilities; this list makes that a checked fact.
var mustDeny = []string{
	"keyctl", "add_key", "request_key",
	"ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd", "process_madvise",
	"mount", "umount", "umount2", "pivot_root", "chroot", "mount_setattr", "move_mount",
	"open_tree", "fsopen", "fsconfig", "fsmount", "fspick", "open_by_handle_at",
	"unshare", "setns",
	"bpf", "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register",
	"kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
	"reboot", "swapon", "swapoff", "acct", "syslog", "quotactl", "quotactl_fd", "lookup_dcookie",
	"iopl", "ioperm", "settimeofday", "clock_settime", "stime", "sethostname", "setdomainname",
	"vhangup", "nfsservctl", "uselib", "vm86", "vm86old", "_sysctl",
}

// nsFlags are the namespace-creating clone flags. CLONE_NEWTIME (0x80)
// shares its bit with CSIGNAL in clone(2) and is only reachable through
// clone3, which is denied.
const nsFlags = unix.CLONE_NEWNS | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC | unix.CLONE_NEWUSER |
	unix.CLONE_NEWPID | unix.CLONE_NEWNET | unix.CLONE_NEWCGROUP

// personalities are the values personality(2) may set. Docker's: the
// query (0xffffffff), PER_LINUX, PER_LINUX32 and UNAME26, none of which
// turns off address randomisation (ADDR_NO_RANDOMIZE) or makes data
// executable (READ_IMPLIES_EXEC); nlx keeps them.
var personalities = []uint64{0x0, 0x8, 0x20000, 0x20008, 0xffffffff}

// kernelVersion is a kernel's "major.minor", as Docker's minKernel
// compares it.
type kernelVersion struct{ major, minor uint64 }

func (k kernelVersion) atLeast(v *moby.KernelVersion) bool {
	return k.major > v.Kernel || k.major == v.Kernel && k.minor >= v.Major
}

func hostKernel() (kernelVersion, error) {
	var uts unix.Utsname
	if err := unix.Uname(&uts); err != nil {
		return kernelVersion{}, fmt.Errorf("seccomp: uname: %w", err)
	}
	return parseRelease(unix.ByteSliceToString(uts.Release[:]))
}

func parseRelease(release string) (kernelVersion, error) {
	var k kernelVersion
	if _, err := fmt.Sscanf(release, "%d.%d", &k.major, &k.minor); err != nil {
		return k, fmt.Errorf("seccomp: kernel release %q: %w", release, err)
	}
	return k, nil
}

var nativeProfile = sync.OnceValues(func() (*specs.LinuxSeccomp, error) {
	a, err := archFor(runtime.GOARCH)
	if err != nil {
		return nil, err
	}
	k, err := hostKernel()
	if err != nil {
		return nil, err
	}
	return profileFor(a, k)
})

// Profile is the seccomp filter every launch gets, for the running
// architecture: Docker's default profile (github.com/moby/profiles/seccomp)
// for a process without capabilities, minus the deviations above, for the
// native ABI only; its default action is EPERM. It goes into a spec's
// linux.seccomp as it is (runc compiles it with libseccomp); Program
// compiles it for bubblewrap. It is resolved once per process; each call
// returns a copy.
func Profile() (*specs.LinuxSeccomp, error) {
	p, err := nativeProfile()
	if err != nil {
		return nil, err
	}
	return cloneProfile(p), nil
}

// profileFor is nlx's profile for a on kernel k.
func profileFor(a *arch, k kernelVersion) (*specs.LinuxSeccomp, error) {
	p, err := dockerProfile(a, k)
	if err != nil {
		return nil, err
	}
	// Native only, a deviation: Docker adds i386 and x32 on amd64 and
	// 32-bit arm on arm64. Their syscalls have numbers of their own that a
	// filter of native numbers cannot guard (classic bypass routes), and
	// the providers are native 64-bit programs; the program kills them.
	p.Architectures = []specs.Arch{a.scmp}
	drop := map[string]bool{}
	for _, d := range deviations {
		for _, n := range d.names {
			drop[n] = true
		}
	}
	kept := p.Syscalls[:0]
	for _, s := range p.Syscalls {
		s.Names = slices.DeleteFunc(s.Names, func(n string) bool { return drop[n] })
		if len(s.Names) > 0 {
			kept = append(kept, s)
		}
	}
	p.Syscalls = kept
	if err := checkProfile(p); err != nil {
		return nil, err
	}
	return p, nil
}

// dockerProfile resolves Docker's default profile exactly as Docker does
// (moby's GetDefaultProfile) for a process with an empty capability
// bounding set, but for any architecture: GetDefaultProfile only knows
// runtime.GOARCH and the host kernel, and the tests build both
// architectures' filters on one host.
func dockerProfile(a *arch, k kernelVersion) (*specs.LinuxSeccomp, error) {
	d := moby.DefaultProfile()
	if len(d.Architectures) != 0 || len(d.LinuxSeccomp.Syscalls) != 0 || d.ListenerPath != "" {
		return nil, fmt.Errorf("seccomp: Docker's default profile has a shape nlx does not resolve")
	}
	p := &specs.LinuxSeccomp{
		DefaultAction:   d.DefaultAction,
		DefaultErrnoRet: cloneUint(d.DefaultErrnoRet),
		Flags:           slices.Clone(d.Flags),
	}
	for _, am := range d.ArchMap {
		if am.Arch == a.scmp {
			p.Architectures = append([]specs.Arch{am.Arch}, am.SubArches...)
			break
		}
	}
	for _, s := range d.Syscalls {
		names := slices.Clone(s.Names)
		if s.Name != "" {
			if len(names) != 0 {
				return nil, fmt.Errorf("seccomp: Docker rule with both name and names")
			}
			names = []string{s.Name}
		}
		if !applies(s, a, k) {
			continue
		}
		ls := s.LinuxSyscall
		ls.Names = names
		ls.Args = slices.Clone(ls.Args)
		ls.ErrnoRet = cloneUint(ls.ErrnoRet)
		p.Syscalls = append(p.Syscalls, ls)
	}
	return p, nil
}

// applies is moby's include/exclude test with no capabilities: a rule
// that needs a capability is left out, one excluded by a capability is
// kept.
func applies(s *moby.Syscall, a *arch, k kernelVersion) bool {
	if ex := s.Excludes; ex != nil {
		if slices.Contains(ex.Arches, a.docker) {
			return false
		}
		if ex.MinKernel != nil && k.atLeast(ex.MinKernel) {
			return false
		}
	}
	if in := s.Includes; in != nil {
		if len(in.Arches) > 0 && !slices.Contains(in.Arches, a.docker) {
			return false
		}
		if len(in.Caps) > 0 {
			return false
		}
		if in.MinKernel != nil && !k.atLeast(in.MinKernel) {
			return false
		}
	}
	return true
}

// checkProfile fails on a profile that allows any of mustDeny, allows
// clone without masking out every namespace flag, allows personality
// beyond the known values, or does not answer clone3 with ENOSYS (libc
// falls back to clone only on ENOSYS).
func checkProfile(p *specs.LinuxSeccomp) error {
	if p.DefaultAction != specs.ActErrno || p.DefaultErrnoRet == nil || *p.DefaultErrnoRet != uint(unix.EPERM) {
		return fmt.Errorf("seccomp: profile's default is not errno EPERM")
	}
	deny := map[string]bool{}
	for _, n := range mustDeny {
		deny[n] = true
	}
	clone3 := false
	for _, s := range p.Syscalls {
		allows := s.Action != specs.ActErrno && s.Action != specs.ActKill &&
			s.Action != specs.ActKillThread && s.Action != specs.ActKillProcess && s.Action != specs.ActTrap
		for _, n := range s.Names {
			switch {
			case n == "clone3":
				if s.Action != specs.ActErrno || s.ErrnoRet == nil || *s.ErrnoRet != uint(unix.ENOSYS) || len(s.Args) != 0 {
					return fmt.Errorf("seccomp: profile does not answer clone3 with ENOSYS")
				}
				clone3 = true
			case !allows:
			case deny[n]:
				return fmt.Errorf("seccomp: profile allows %s", n)
			case n == "clone":
				if !masksNamespaces(s.Args) {
					return fmt.Errorf("seccomp: profile allows clone without masking the namespace flags")
				}
			case n == "personality":
				if len(s.Args) != 1 || s.Args[0].Index != 0 || s.Args[0].Op != specs.OpEqualTo ||
					!slices.Contains(personalities, s.Args[0].Value) {
					return fmt.Errorf("seccomp: profile allows personality beyond %#x", personalities)
				}
			}
		}
	}
	if !clone3 {
		return fmt.Errorf("seccomp: profile has no clone3 rule")
	}
	return nil
}

func masksNamespaces(args []specs.LinuxSeccompArg) bool {
	for _, a := range args {
		// The flags are clone's first argument on amd64 and arm64 (s390
		// swaps the first two; nlx does not build for it).
		if a.Index == 0 && a.Op == specs.OpMaskedEqual && a.Value&nsFlags == nsFlags && a.ValueTwo == 0 {
			return true
		}
	}
	return false
}

func cloneUint(p *uint) *uint {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

func cloneProfile(p *specs.LinuxSeccomp) *specs.LinuxSeccomp {
	c := *p
	c.DefaultErrnoRet = cloneUint(p.DefaultErrnoRet)
	c.Architectures = slices.Clone(p.Architectures)
	c.Flags = slices.Clone(p.Flags)
	c.Syscalls = make([]specs.LinuxSyscall, len(p.Syscalls))
	for i, s := range p.Syscalls {
		s.Names = slices.Clone(s.Names)
		s.Args = slices.Clone(s.Args)
		s.ErrnoRet = cloneUint(s.ErrnoRet)
		c.Syscalls[i] = s
	}
	return &c
}
