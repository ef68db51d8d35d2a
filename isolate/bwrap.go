package isolate

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// bwrapFDs are the descriptors bubblewrap inherits for a launch: the
// seccomp program, and the open handles of bind sources by destination
// (see open.go). Numbers are as bubblewrap sees them.
type bwrapFDs struct {
	seccomp int            // -1: none
	binds   map[string]int // destination -> fd
}

// bwrapArgs translates s into bubblewrap arguments (without the binary).
// What bubblewrap cannot express is an error, never silently dropped:
// namespaces joined by path, capabilities kept, another user, a seccomp
// filter without its descriptor.
func bwrapArgs(s *specs.Spec, fds bwrapFDs) ([]string, error) {
	if s.Process == nil || s.Linux == nil || s.Root == nil {
		return nil, fmt.Errorf("bwrap: spec without process, root or linux section")
	}
	p := s.Process
	args := []string{"--new-session", "--die-with-parent"}
	if s.Linux.Seccomp != nil {
		if fds.seccomp < 0 {
			return nil, fmt.Errorf("bwrap: the spec has a seccomp filter and no descriptor carries its program")
		}
		// Loaded last, just before the provider is executed: bubblewrap's
		// own setup (mounts, namespaces) is not filtered.
		args = append(args, "--seccomp", strconv.Itoa(fds.seccomp))
	}

	hasMount, hasUTS := false, false
	for _, ns := range s.Linux.Namespaces {
		if ns.Path != "" {
			return nil, fmt.Errorf("bwrap: cannot join the %s namespace at %s", ns.Type, ns.Path)
		}
		switch ns.Type {
		case specs.MountNamespace:
			hasMount = true
		case specs.PIDNamespace:
			args = append(args, "--unshare-pid")
		case specs.IPCNamespace:
			args = append(args, "--unshare-ipc")
		case specs.UTSNamespace:
			hasUTS = true
			args = append(args, "--unshare-uts")
		case specs.NetworkNamespace:
			args = append(args, "--unshare-net")
		case specs.UserNamespace:
			args = append(args, "--unshare-user")
		case specs.CgroupNamespace:
			args = append(args, "--unshare-cgroup")
		default:
			return nil, fmt.Errorf("bwrap: unsupported namespace %s", ns.Type)
		}
	}
	if !hasMount {
		return nil, fmt.Errorf("bwrap: a spec without a mount namespace has no boundary bubblewrap can build")
	}
	if hasUTS && s.Hostname != "" {
		args = append(args, "--hostname", s.Hostname)
	}

	asOther, err := bwrapAsOther(p.User)
	if err != nil {
		return nil, err
	}
	if asOther || os.Geteuid() != 0 {
		// bubblewrap runs as the provider's user (started so, see
		// bwrapCredential), unprivileged: it builds the sandbox in a user
		// namespace of its own, mapping only that user, and no process
		// inside may make another one.
		args = append(args, "--unshare-user", "--disable-userns")
	}
	if c := p.Capabilities; c != nil {
		if len(c.Bounding)+len(c.Effective)+len(c.Inheritable)+len(c.Permitted)+len(c.Ambient) > 0 {
			return nil, fmt.Errorf("bwrap: keeping capabilities is not supported")
		}
		// Unprivileged bubblewrap keeps none anyway; as root it would keep
		// them all, bounding set included.
		args = append(args, "--cap-drop", "ALL")
	}

	args = append(args, "--clearenv")
	for _, kv := range p.Env {
		k, v, _ := strings.Cut(kv, "=")
		args = append(args, "--setenv", k, v)
	}

	if filepath.IsAbs(s.Root.Path) {
		// An image root. Bound writable like runc's rootfs, so that the
		// mount points below can be created, and made read-only at the
		// end. (A relative root names an empty bundle directory, which is
		// what bubblewrap's own tmpfs root already is.)
		if fd, ok := fds.binds["/"]; ok {
			args = append(args, "--bind-fd", strconv.Itoa(fd), "/")
		} else {
			args = append(args, "--bind", s.Root.Path, "/")
		}
	}

	devDone := false
	for _, m := range s.Mounts {
		ro := slices.Contains(m.Options, "ro")
		switch {
		case m.Type == "proc":
			args = append(args, "--proc", m.Destination)
		case m.Type == "tmpfs" && m.Destination == "/dev":
			// bubblewrap's --dev is a tmpfs with the standard nodes and
			// a private devpts.
			args = append(args, "--dev", "/dev")
			devDone = true
		case m.Type == "devpts":
			if !devDone || m.Destination != "/dev/pts" {
				return nil, fmt.Errorf("bwrap: devpts at %s without --dev", m.Destination)
			}
		case m.Type == "mqueue":
			args = append(args, "--mqueue", m.Destination)
		case m.Type == "tmpfs":
			for _, o := range m.Options {
				if mode, ok := strings.CutPrefix(o, "mode="); ok {
					args = append(args, "--perms", mode)
				}
				if size, ok := strings.CutPrefix(o, "size="); ok {
					n, err := parseSize(size)
					if err != nil {
						return nil, fmt.Errorf("bwrap: tmpfs %s: %w", m.Destination, err)
					}
					args = append(args, "--size", strconv.FormatInt(n, 10))
				}
			}
			args = append(args, "--tmpfs", m.Destination)
			if ro {
				args = append(args, "--remount-ro", m.Destination)
			}
		case m.Type == "bind" || (m.Type == "none" && (slices.Contains(m.Options, "bind") || slices.Contains(m.Options, "rbind"))):
			// bubblewrap binds are always recursive, nosuid and nodev. A
			// source nlx holds open is bound by its handle: bubblewrap then
			// also checks that what it mounted is that inode.
			op, src := "--bind", m.Source
			if fd, ok := fds.binds[m.Destination]; ok {
				op, src = "--bind-fd", strconv.Itoa(fd)
			}
			if ro {
				op = strings.Replace(op, "--bind", "--ro-bind", 1)
			}
			args = append(args, op, src, m.Destination)
		default:
			return nil, fmt.Errorf("bwrap: unsupported mount type %q at %s", m.Type, m.Destination)
		}
	}

	// Masked and read-only kernel paths (under /proc, and /sys where the
	// spec mounts it). bubblewrap's own --proc re-binds /proc/sys and a few
	// others read-only only where access(2) calls them writable, which,
	// with every capability dropped, it does not of the directory, while
	// the files in it stay writable by uid 0: nlx binds each read-only
	// itself. The host's /proc tells which exist and is the source of the
	// read-only binds: it is the same kernel, and a sysctl answers for the
	// network namespace of whoever opens it. Masked: a file is covered by
	// /dev/null, a directory by an empty read-only tmpfs.
	mounted := func(p string) bool {
		for _, m := range s.Mounts {
			if (m.Destination == "/proc" || m.Destination == "/sys") && strings.HasPrefix(p, m.Destination+"/") {
				return true
			}
		}
		return false
	}
	for _, path := range s.Linux.ReadonlyPaths {
		if strings.HasPrefix(path, WorkspacePath+"/") {
			// Inside the workspace: only by the handle nlx checked.
			fd, ok := fds.binds[path]
			if !ok {
				return nil, fmt.Errorf("bwrap: read-only path %s has no handle to bind", path)
			}
			args = append(args, "--ro-bind-fd", strconv.Itoa(fd), path)
			continue
		}
		if _, err := os.Stat(path); err != nil || !mounted(path) {
			continue
		}
		args = append(args, "--ro-bind", path, path)
	}
	for _, path := range s.Linux.MaskedPaths {
		fi, err := os.Stat(path)
		switch {
		case err != nil || !mounted(path):
			continue
		case fi.IsDir():
			args = append(args, "--perms", "0555", "--tmpfs", path, "--remount-ro", path)
		default:
			args = append(args, "--ro-bind", "/dev/null", path)
		}
	}

	if s.Root.Readonly {
		args = append(args, "--remount-ro", "/")
	}
	if p.Cwd != "" {
		args = append(args, "--chdir", p.Cwd)
	}
	args = append(args, "--")
	return append(args, p.Args...), nil
}

// bwrapAsOther reports whether bubblewrap must be started as u, another
// user than nlx's: only root can do that.
func bwrapAsOther(u specs.User) (bool, error) {
	euid, egid := uint32(os.Geteuid()), uint32(os.Getegid())
	switch {
	case u.UID == euid && u.GID == egid:
		return false, nil
	case euid == 0:
		return true, nil
	}
	return false, fmt.Errorf("bwrap: runs the process as the calling user (%d:%d), not %d:%d", euid, egid, u.UID, u.GID)
}

// bwrapCredential is how bubblewrap is started for s: as the provider's
// user when that is not nlx's.
func bwrapCredential(s *specs.Spec) *syscall.Credential {
	u := s.Process.User
	if other, _ := bwrapAsOther(u); !other {
		return nil
	}
	return &syscall.Credential{Uid: u.UID, Gid: u.GID, Groups: []uint32{}}
}

// bwrapProbeArgs is a trivial sandbox with the namespaces a launch uses.
func bwrapProbeArgs() []string {
	args := []string{"--new-session", "--die-with-parent", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-net"}
	if os.Geteuid() == 0 {
		args = append(args, "--cap-drop", "ALL")
	}
	return append(args, "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev",
		"--clearenv", "--setenv", "PATH", sandboxPATH, "--", "true")
}

// probe runs a trivial sandbox and returns its combined output on failure.
func probe(ctx context.Context, path string, args ...string) error {
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Env = []string{"PATH=" + sandboxPATH}
	out, err := cmd.CombinedOutput()
	if err != nil {
		msg := strings.TrimSpace(string(out))
		if len(msg) > 300 {
			msg = msg[:300] + "..."
		}
		return fmt.Errorf("%s: %w: %s", filepath.Base(path), err, msg)
	}
	return nil
}
