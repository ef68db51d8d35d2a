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

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// bwrapCovered are the read-only /proc paths bubblewrap's own --proc
// already re-binds read-only.
var bwrapCovered = []string{"/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus"}

// bwrapArgs translates s into bubblewrap arguments (without the binary).
// What bubblewrap cannot express is an error, never silently dropped:
// namespaces joined by path, capabilities kept, another user.
func bwrapArgs(s *specs.Spec) ([]string, error) {
	if s.Process == nil || s.Linux == nil || s.Root == nil {
		return nil, fmt.Errorf("bwrap: spec without process, root or linux section")
	}
	p := s.Process
	args := []string{"--new-session", "--die-with-parent"}

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

	if int(p.User.UID) != os.Geteuid() || int(p.User.GID) != os.Getegid() {
		return nil, fmt.Errorf("bwrap: runs the process as the calling user (%d:%d), not %d:%d",
			os.Geteuid(), os.Getegid(), p.User.UID, p.User.GID)
	}
	if c := p.Capabilities; c != nil {
		if len(c.Bounding)+len(c.Effective)+len(c.Inheritable)+len(c.Permitted)+len(c.Ambient) > 0 {
			return nil, fmt.Errorf("bwrap: keeping capabilities is not supported")
		}
		// Unprivileged bubblewrap keeps none anyway; as root it would keep
		// them all, bounding set included.
		if os.Geteuid() == 0 {
			args = append(args, "--cap-drop", "ALL")
		}
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
		args = append(args, "--bind", s.Root.Path, "/")
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
			// bubblewrap binds are always recursive, nosuid and nodev.
			op := "--bind"
			if ro {
				op = "--ro-bind"
			}
			args = append(args, op, m.Source, m.Destination)
		default:
			return nil, fmt.Errorf("bwrap: unsupported mount type %q at %s", m.Type, m.Destination)
		}
	}

	// Masked and read-only /proc paths: a file is covered by /dev/null, a
	// directory by an empty read-only tmpfs. The host's /proc tells which
	// exist: it is the same kernel.
	readonly := slices.DeleteFunc(slices.Clone(s.Linux.ReadonlyPaths), func(p string) bool { return slices.Contains(bwrapCovered, p) })
	for _, path := range append(slices.Clone(s.Linux.MaskedPaths), readonly...) {
		fi, err := os.Stat(path)
		switch {
		case err != nil:
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
