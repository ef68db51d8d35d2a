package isolate

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/nlx-dev/nlx/egress"
	"github.com/nlx-dev/nlx/internal/reason"
	"github.com/nlx-dev/nlx/isolate/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// A launch's bind sources are opened once, as O_PATH handles, checked on
// the open file (its type, where it really is), and bound by that handle:
// bubblewrap with --bind-fd (which checks the mounted inode is the
// handle's), runc through /proc/NLX-PID/fd/N, a magic link to exactly the
// open file. A path that changes after the check (a .git swapped for a
// symlink to another owner's credential home by a provider of the same
// workspace) changes nothing: the handle still names what was checked.

// errEscapes is a path that resolves outside the directory it is opened
// below.
var errEscapes = errors.New("leaves the directory it must stay in")

// openDir opens the directory at an absolute path an operator chose (a
// root, the skill store, an image root), following symlinks.
func openDir(path string) (*os.File, error) {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), nil
}

// openFile opens what the absolute path p leads to (following symlinks)
// as an O_PATH handle, to be checked and bound by that handle.
func openFile(p string) (*os.File, error) {
	fd, err := unix.Open(p, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: p, Err: err}
	}
	return os.NewFile(uintptr(fd), p), nil
}

// openBeneath opens rel below dir as an O_PATH handle. The kernel resolves
// it (openat2 RESOLVE_BENEATH): symlinks are followed only while they stay
// below dir, or refused altogether with noSymlinks; "..", absolute links
// and magic links never lead out. Kernels before 5.6 lack openat2; there
// the walk is done component by component, each opened relative to the
// last (the same confinement, in user space).
func openBeneath(dir *os.File, rel string, noSymlinks bool) (*os.File, error) {
	if !filepath.IsLocal(rel) {
		return nil, &fs.PathError{Op: "open", Path: rel, Err: errEscapes}
	}
	how := &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS}
	if noSymlinks {
		how.Resolve |= unix.RESOLVE_NO_SYMLINKS
	}
	for {
		fd, err := unix.Openat2(int(dir.Fd()), rel, how)
		switch {
		case err == nil:
			return os.NewFile(uintptr(fd), filepath.Join(dir.Name(), rel)), nil
		case err == unix.EINTR || err == unix.EAGAIN:
			continue // a rename elsewhere raced the lookup
		case err == unix.ENOSYS:
			return walkBeneath(dir, rel, noSymlinks)
		case err == unix.EXDEV:
			err = errEscapes
		}
		return nil, &fs.PathError{Op: "open", Path: filepath.Join(dir.Name(), rel), Err: err}
	}
}

// walkBeneath is openBeneath without openat2: each component is opened
// with O_NOFOLLOW relative to the one before; a symlink is read and, unless
// noSymlinks, resolved the same way from where it is, never above dir.
func walkBeneath(dir *os.File, rel string, noSymlinks bool) (*os.File, error) {
	name := filepath.Join(dir.Name(), rel)
	fail := func(err error) (*os.File, error) { return nil, &fs.PathError{Op: "open", Path: name, Err: err} }
	stack := []int{} // fds of the directories walked, dir's excluded
	defer func() {
		for _, fd := range stack {
			unix.Close(fd)
		}
	}()
	cur := func() int {
		if len(stack) == 0 {
			return int(dir.Fd())
		}
		return stack[len(stack)-1]
	}
	parts := strings.Split(filepath.Clean(rel), "/")
	for links := 0; len(parts) > 0; {
		c := parts[0]
		parts = parts[1:]
		switch c {
		case ".", "":
			continue
		case "..":
			if len(stack) == 0 {
				return fail(errEscapes)
			}
			unix.Close(stack[len(stack)-1])
			stack = stack[:len(stack)-1]
			continue
		}
		fd, err := unix.Openat(cur(), c, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return fail(err)
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			return fail(err)
		}
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			target := make([]byte, unix.PathMax)
			n, err := unix.Readlinkat(fd, "", target)
			unix.Close(fd)
			links++
			switch {
			case err != nil:
				return fail(err)
			case noSymlinks || links > 40:
				return fail(unix.ELOOP)
			case filepath.IsAbs(string(target[:n])):
				return fail(errEscapes)
			}
			parts = append(strings.Split(string(target[:n]), "/"), parts...)
			continue
		}
		if len(parts) == 0 {
			return os.NewFile(uintptr(fd), name), nil
		}
		stack = append(stack, fd)
	}
	// rel named dir itself.
	fd, err := unix.Openat(cur(), ".", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fail(err)
	}
	return os.NewFile(uintptr(fd), name), nil
}

// realPath is where an open handle really is, as the kernel names it.
func realPath(f *os.File) (string, error) {
	p, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(int(f.Fd())))
	if err != nil {
		return "", fmt.Errorf("locate %s: %w", f.Name(), err)
	}
	if strings.HasSuffix(p, " (deleted)") || !filepath.IsAbs(p) {
		return "", fmt.Errorf("locate %s: it is %q", f.Name(), p)
	}
	return p, nil
}

// locate is where an open handle really is and its file type: 'd' a
// directory, 'f' a regular file, '?' anything else.
func locate(f *os.File) (string, byte, error) {
	p, err := realPath(f)
	if err != nil {
		return "", 0, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return "", 0, fmt.Errorf("stat %s: %w", f.Name(), err)
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		return p, 'd', nil
	case unix.S_IFREG:
		return p, 'f', nil
	}
	return p, '?', nil
}

// handles are a launch's bind sources, open, by mount destination.
type handles map[string]*os.File

func (h handles) close() {
	for _, f := range h {
		f.Close()
	}
}

// passFirst is the first descriptor a backend inherits beyond the start
// protocol's two (3 and 4: bwrap's gate, or the re-executed child's release
// and status pipes), the same in both start modes.
const passFirst = 5

// bwrapPass returns what bubblewrap inherits from fd passFirst on: a pipe
// holding the seccomp program, then the bind handles in destination order;
// and the numbers bwrapArgs names them by.
func bwrapPass(s *specs.Spec, h handles) ([]*os.File, bwrapFDs, error) {
	fds := bwrapFDs{seccomp: -1, binds: map[string]int{}}
	if s.Linux == nil || s.Linux.Seccomp == nil {
		return nil, fds, errors.New("bwrap: the spec has no seccomp filter: every launch has one")
	}
	prog, err := seccomp.Program(s.Linux.Seccomp)
	if err != nil {
		return nil, fds, refuse(reason.SeccompUnavailable, "compile the seccomp filter: %v", err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fds, err
	}
	// The program (a few KiB) fits in the pipe's buffer: written whole and
	// closed, bubblewrap reads it to EOF.
	_, werr := w.Write(prog)
	if cerr := w.Close(); werr != nil || cerr != nil {
		r.Close()
		return nil, fds, fmt.Errorf("seccomp program: %w", errors.Join(werr, cerr))
	}
	pass := []*os.File{r}
	fds.seccomp = passFirst
	for _, dest := range slices.Sorted(maps.Keys(h)) {
		fds.binds[dest] = passFirst + len(pass)
		pass = append(pass, h[dest])
	}
	return pass, fds, nil
}

// reason.BindSourceUnsafe refuses a bind source whose path someone other than
// root (or the user nlx runs as) could redirect between the check and the
// backend's mount.

// checkAncestors proves that nobody but root or nlx's own user can swap
// what path names: every directory above it is owned by one of them and
// writable by nobody else (a sticky directory, like /tmp, lets others
// create entries there but not rename or remove the ones it holds). runc
// binds such paths; a provider, running as another user, cannot move any
// of them. Entries inside a writable workspace (.git, .nlx) are never bound
// by path.
func checkAncestors(path string) error {
	euid := uint32(os.Geteuid())
	for dir := filepath.Dir(path); ; dir = filepath.Dir(dir) {
		var st unix.Stat_t
		if err := unix.Lstat(dir, &st); err != nil {
			return refuse(reason.BindSourceUnsafe, "%s: %v", path, err)
		}
		switch {
		case st.Mode&unix.S_IFMT != unix.S_IFDIR:
			return refuse(reason.BindSourceUnsafe, "%s: %s is not a directory", path, dir)
		case st.Uid != 0 && st.Uid != euid:
			return refuse(reason.BindSourceUnsafe, "%s: %s belongs to uid %d, who could swap what it holds; make it root's", path, dir, st.Uid)
		case st.Mode&0o022 != 0 && st.Mode&unix.S_ISVTX == 0:
			return refuse(reason.BindSourceUnsafe, "%s: %s is writable by group or others (mode %o), who could swap what it holds", path, dir, st.Mode&0o7777)
		}
		if dir == "/" {
			return nil
		}
	}
}

// reason.ProviderCannotReach refuses a bubblewrap launch whose bind sources
// the provider's user cannot reach: bubblewrap, started as that user,
// resolves each source path itself, with that user's permissions.

// checkReach proves that u can search every directory above each bind
// source of s, as bubblewrap running as u needs to.
func checkReach(s *specs.Spec, u specs.User) error {
	var sources []string
	if filepath.IsAbs(s.Root.Path) {
		sources = append(sources, s.Root.Path)
	}
	for _, m := range s.Mounts {
		if m.Type == "bind" {
			sources = append(sources, m.Source)
		}
	}
	checked := map[string]bool{}
	for _, src := range sources {
		for dir := filepath.Dir(src); !checked[dir]; dir = filepath.Dir(dir) {
			checked[dir] = true
			var st unix.Stat_t
			if err := unix.Stat(dir, &st); err != nil {
				return refuse(reason.ProviderCannotReach, "%s: %v", src, err)
			}
			perm := st.Mode & 0o7
			switch {
			case st.Uid == u.UID:
				perm = st.Mode >> 6 & 0o7
			case st.Gid == u.GID:
				perm = st.Mode >> 3 & 0o7
			}
			if perm&1 == 0 {
				return refuse(reason.ProviderCannotReach, "the provider user %d cannot reach %s: %s (mode %o, owner %d:%d) denies it search; "+
					"make it searchable (chmod o+x %s), keep nlx's directories under one that is (such as /var/lib/nlx), or use --backend runc",
					u.UID, src, dir, st.Mode&0o7777, st.Uid, st.Gid, dir)
			}
			if dir == "/" {
				break
			}
		}
	}
	return nil
}

// rootFSMountPoints are the directories a launch mounts on in an image
// root. runc (root) makes missing ones itself; bubblewrap, running as the
// provider's user, cannot write the image: PrepareRootFS makes them.
var rootFSMountPoints = []string{"proc", "dev", "tmp", "home", "root", strings.TrimPrefix(WorkspacePath, "/"), strings.TrimPrefix(SkillsPath, "/"),
	strings.TrimPrefix(path.Dir(egress.SocketPath), "/")}

// rootFSFileMountPoints are the files a launch with inference egress or a
// tool proxy mounts on: empty files PrepareRootFS makes.
var rootFSFileMountPoints = []string{strings.TrimPrefix(egress.SocketPath, "/"), strings.TrimPrefix(egress.HelperPath, "/"),
	strings.TrimPrefix(ToolsSocketPath, "/")}

// PrepareRootFS makes the mount points a launch needs in an unpacked image
// root (empty directories, root's, mode 0755), so that either backend can
// run in it. nlx does it when it unpacks a workspace's image.
func PrepareRootFS(dir string) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	for _, p := range rootFSMountPoints {
		if err := root.MkdirAll(p, 0o755); err != nil {
			return fmt.Errorf("image root %s: %w", dir, err)
		}
	}
	for _, p := range rootFSFileMountPoints {
		f, err := root.OpenFile(p, os.O_CREATE|os.O_RDONLY, 0o644)
		if err != nil {
			return fmt.Errorf("image root %s: %w", dir, err)
		}
		f.Close()
	}
	return nil
}

// rootFSPrepared reports the first mount point missing from an image root.
func rootFSPrepared(s *specs.Spec) error {
	if !filepath.IsAbs(s.Root.Path) {
		return nil
	}
	for _, p := range rootFSMountPoints {
		if fi, err := os.Stat(filepath.Join(s.Root.Path, p)); err != nil || !fi.IsDir() {
			return refuse(reason.ProviderCannotReach, "image root %s has no /%s for bubblewrap, running as the provider's user, to mount on "+
				"(nlx prepares the images it unpacks; isolate.PrepareRootFS does it); or use --backend runc", s.Root.Path, p)
		}
	}
	return nil
}
