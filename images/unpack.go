package images

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/nlx-dev/nlx/internal/reason"
)

// Reason codes of layers Unpack refuses. Each names what a hostile (or
// broken) layer tried.
const ()

const (
	whiteoutPrefix = ".wh."
	opaqueWhiteout = ".wh..wh..opq"
)

// Unpack writes img's root file system into dir (created if needed): the
// layers in order, whiteouts and opaque whiteouts honoured. Every entry is
// confined to dir: absolute names, "..", links leaving dir, writes through
// links, hardlinks to outside and device nodes are refused with a code, and
// nothing past the refused entry is written.
//
// Every file system operation goes through dir opened as an os.Root: the
// kernel resolves each name against the open directory, one component at a
// time, and no symbolic link (or a parent swapped for one after the checks
// below) can lead a write, a removal or a change of owner or mode out of
// it. The checks only name what a layer tried; the confinement does not
// rest on them.
func Unpack(ctx context.Context, img v1.Image, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("unpack: %w", err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("unpack: %w", err)
	}
	defer root.Close()
	layers, err := img.Layers()
	if err != nil {
		return fmt.Errorf("unpack: %w", err)
	}
	u := &unpacker{root: root}
	for i, l := range layers {
		if err := ctx.Err(); err != nil {
			return err
		}
		rc, err := l.Uncompressed()
		if err != nil {
			return fmt.Errorf("unpack layer %d: %w", i, err)
		}
		err = u.layer(tar.NewReader(rc))
		rc.Close()
		if err != nil {
			return fmt.Errorf("unpack layer %d: %w", i, err)
		}
	}
	return nil
}

type unpacker struct {
	root *os.Root
	// written holds what this layer unpacked, which an opaque whiteout of
	// the same layer keeps.
	written map[string]bool
}

// afterCheck, when set (by tests), runs between an entry's checks and the
// operations that write it: where a racing process would swap a directory
// for a symbolic link.
var afterCheck func(rel string)

func (u *unpacker) checked(rel string) {
	if afterCheck != nil {
		afterCheck(rel)
	}
}

func (u *unpacker) layer(tr *tar.Reader) error {
	u.written = map[string]bool{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := u.entry(h, tr); err != nil {
			return err
		}
	}
}

// clean validates an entry name and returns it relative to the root.
func clean(name string) (string, error) {
	if strings.HasPrefix(name, "/") {
		return "", reason.New(reason.AbsolutePath, "entry %q is absolute", name)
	}
	for _, part := range strings.Split(name, "/") {
		if part == ".." {
			return "", reason.New(reason.PathTraversal, "entry %q climbs with ..", name)
		}
	}
	c := path.Clean(name)
	if c != "." && !filepath.IsLocal(filepath.FromSlash(c)) {
		return "", reason.New(reason.PathTraversal, "entry %q leaves the root", name)
	}
	return c, nil
}

// check refuses rel when an existing parent of it inside the root is a
// symbolic link or a file: writing through one could land anywhere. It
// names what the layer tried; the root's confinement is what holds.
func (u *unpacker) check(rel string) error {
	parts := strings.Split(rel, "/")
	for i := range parts[:len(parts)-1] {
		p := strings.Join(parts[:i+1], "/")
		info, err := u.root.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) {
			break
		}
		if err != nil {
			return u.confined(rel, err)
		}
		if info.Mode()&fs.ModeSymlink != 0 {
			return reason.New(reason.LinkInPath, "entry %q goes through the link %s", rel, p)
		}
		if !info.IsDir() {
			return reason.New(reason.LinkInPath, "entry %q goes through the file %s", rel, p)
		}
	}
	return nil
}

// confined turns the root's refusal to leave itself (a parent that became
// a link out of it after check) into reason.LinkInPath; other errors are
// wrapped with the entry's name.
func (u *unpacker) confined(rel string, err error) error {
	if err == nil {
		return nil
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		if _, errno := pe.Err.(syscall.Errno); !errno {
			return reason.New(reason.LinkInPath, "entry %q goes through a link out of the root: %v", rel, err)
		}
	}
	return fmt.Errorf("unpack %s: %w", rel, err)
}

// setModeBits are the bits of a tar mode a rootfs keeps.
const setModeBits = fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky

func (u *unpacker) entry(h *tar.Header, r io.Reader) error {
	rel, err := clean(h.Name)
	if err != nil {
		return err
	}
	if rel == "." {
		return nil
	}
	base := path.Base(rel)
	if base == opaqueWhiteout {
		return u.opaque(path.Dir(rel))
	}
	if strings.HasPrefix(base, whiteoutPrefix) {
		target := path.Join(path.Dir(rel), strings.TrimPrefix(base, whiteoutPrefix))
		if t, err := clean(target); err != nil || t == "." || strings.HasPrefix(strings.TrimPrefix(base, whiteoutPrefix), whiteoutPrefix) {
			return reason.New(reason.BadWhiteout, "whiteout %q names nothing a layer may remove", h.Name)
		}
		if err := u.check(target); err != nil {
			return err
		}
		u.checked(target)
		if err := u.root.RemoveAll(target); err != nil {
			return u.confined(h.Name, err)
		}
		return nil
	}
	if err := u.check(rel); err != nil {
		return err
	}
	// A hardlink's target is checked before anything is written: what it
	// names must be a regular file this root already holds.
	var target string
	if h.Typeflag == tar.TypeLink {
		if target, err = clean(h.Linkname); err != nil || target == "." {
			return reason.New(reason.EscapingHardlink, "hardlink %q -> %q: names nothing inside the root", rel, h.Linkname)
		}
		if err := u.check(target); err != nil {
			return err
		}
		info, err := u.root.Lstat(target)
		if err != nil || !info.Mode().IsRegular() {
			return reason.New(reason.EscapingHardlink, "hardlink %q -> %q names no regular file unpacked in the root", rel, h.Linkname)
		}
	}
	if h.Typeflag == tar.TypeSymlink && !path.IsAbs(h.Linkname) {
		// An absolute link is resolved against the rootfs by the runtime
		// that uses it (images have many: /etc/localtime -> /usr/share/...);
		// a relative one is resolved where it lies, so one that climbs out
		// of the root would lead a host reader outside. Unpack itself
		// never writes through a link (see check and confined).
		if c := path.Clean(path.Join(path.Dir(rel), h.Linkname)); c == ".." || strings.HasPrefix(c, "../") {
			return reason.New(reason.EscapingLink, "link %q -> %q leaves the root", rel, h.Linkname)
		}
	}
	switch h.Typeflag {
	case tar.TypeDir, tar.TypeReg, tar.TypeSymlink, tar.TypeLink:
	case tar.TypeChar, tar.TypeBlock:
		return reason.New(reason.DeviceNode, "entry %q is a device node", rel)
	default:
		return reason.New(reason.SpecialFile, "entry %q has type %q, which a rootfs does not need", rel, string(h.Typeflag))
	}
	u.checked(rel)
	if d := path.Dir(rel); d != "." {
		if err := u.root.MkdirAll(d, 0o755); err != nil {
			return u.confined(rel, err)
		}
	}
	// An entry replaces what lower layers had at its name, except that a
	// directory stays a directory.
	if info, err := u.root.Lstat(rel); err == nil && !(info.IsDir() && h.Typeflag == tar.TypeDir) {
		if err := u.root.RemoveAll(rel); err != nil {
			return u.confined(rel, err)
		}
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return u.confined(rel, err)
	}
	u.written[rel] = true
	mode := fs.FileMode(h.Mode).Perm()
	switch h.Typeflag {
	case tar.TypeDir:
		if err := u.root.Mkdir(rel, mode); err != nil && !errors.Is(err, fs.ErrExist) {
			return u.confined(rel, err)
		}
		// By name, through the root (a directory the caller may not read
		// cannot be opened to be changed): a link swapped in at rel leads
		// nowhere outside it.
		if os.Geteuid() == 0 {
			// Owner first: chown clears set-id bits that chmod then sets.
			if err := u.root.Lchown(rel, h.Uid, h.Gid); err != nil {
				return u.confined(rel, err)
			}
		}
		return u.confined(rel, u.root.Chmod(rel, h.FileInfo().Mode()&setModeBits))
	case tar.TypeReg:
		// O_EXCL: the name is created here, never a link followed.
		f, err := u.root.OpenFile(rel, os.O_CREATE|os.O_EXCL|os.O_WRONLY, mode)
		if err != nil {
			return u.confined(rel, err)
		}
		_, err = io.Copy(f, r)
		if err == nil {
			err = u.setOwnerMode(f, h)
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		return u.confined(rel, err)
	case tar.TypeSymlink:
		if err := u.root.Symlink(h.Linkname, rel); err != nil {
			return u.confined(rel, err)
		}
		if os.Geteuid() == 0 {
			return u.confined(rel, u.root.Lchown(rel, h.Uid, h.Gid))
		}
		return nil
	default: // tar.TypeLink, checked above
		return u.confined(rel, u.root.Link(target, rel))
	}
}

// setOwnerMode gives an open file its owner when unpacking as root (a
// rootfs for a container; an unprivileged unpack keeps the caller as
// owner), then its mode: on the handle, never by name again.
func (u *unpacker) setOwnerMode(f *os.File, h *tar.Header) error {
	if os.Geteuid() == 0 {
		// Owner first: chown clears set-id bits that chmod then sets.
		if err := f.Chown(h.Uid, h.Gid); err != nil {
			return err
		}
	}
	return f.Chmod(h.FileInfo().Mode() & setModeBits)
}

// opaque empties dir of what lower layers put there; what this layer
// already wrote stays.
func (u *unpacker) opaque(dir string) error {
	if err := u.check(path.Join(dir, "x")); err != nil {
		return err
	}
	u.checked(dir)
	d, err := u.root.Open(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return u.confined(dir, err)
	}
	entries, err := d.ReadDir(-1)
	d.Close()
	if err != nil {
		return u.confined(dir, err)
	}
	for _, e := range entries {
		rel := path.Join(dir, e.Name())
		if u.written[rel] {
			continue
		}
		if err := u.root.RemoveAll(rel); err != nil {
			return u.confined(rel, err)
		}
	}
	return nil
}
