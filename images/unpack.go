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
func Unpack(ctx context.Context, img v1.Image, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("unpack: %w", err)
	}
	root, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	if root, err = filepath.EvalSymlinks(root); err != nil {
		return err
	}
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
	root string
	// written holds what this layer unpacked, which an opaque whiteout of
	// the same layer keeps.
	written map[string]bool
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
	c := path.Clean(name)
	if c == ".." || strings.HasPrefix(c, "../") {
		return "", reason.New(reason.PathTraversal, "entry %q leaves the root", name)
	}
	for _, part := range strings.Split(name, "/") {
		if part == ".." {
			return "", reason.New(reason.PathTraversal, "entry %q climbs with ..", name)
		}
	}
	return c, nil
}

// host returns the host path of rel after proving that no existing parent
// of it inside the root is a symbolic link: writing through one could land
// anywhere.
func (u *unpacker) host(rel string) (string, error) {
	p := u.root
	parts := strings.Split(rel, "/")
	for i, part := range parts[:len(parts)-1] {
		p = filepath.Join(p, part)
		info, err := os.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) {
			break
		}
		if err != nil {
			return "", err
		}
		if info.Mode()&fs.ModeSymlink != 0 {
			return "", reason.New(reason.LinkInPath, "entry %q goes through the link %s", rel, strings.Join(parts[:i+1], "/"))
		}
		if !info.IsDir() {
			return "", reason.New(reason.LinkInPath, "entry %q goes through the file %s", rel, strings.Join(parts[:i+1], "/"))
		}
	}
	return filepath.Join(u.root, filepath.FromSlash(rel)), nil
}

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
		p, err := u.host(target)
		if err != nil {
			return err
		}
		if err := os.RemoveAll(p); err != nil {
			return fmt.Errorf("whiteout %s: %w", h.Name, err)
		}
		return nil
	}
	p, err := u.host(rel)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	mode := fs.FileMode(h.Mode).Perm()
	// An entry replaces what lower layers had at its name, except that a
	// directory stays a directory.
	if info, err := os.Lstat(p); err == nil && !(info.IsDir() && h.Typeflag == tar.TypeDir) {
		if err := os.RemoveAll(p); err != nil {
			return err
		}
	}
	u.written[rel] = true
	switch h.Typeflag {
	case tar.TypeDir:
		if err := os.Mkdir(p, mode); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		// Owner first: chown clears set-id bits that chmod then sets.
		if err := u.own(p, h); err != nil {
			return err
		}
		return os.Chmod(p, h.FileInfo().Mode()&(fs.ModePerm|fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky))
	case tar.TypeReg:
		f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, mode)
		if err != nil {
			return err
		}
		_, err = io.Copy(f, r)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("unpack %s: %w", rel, err)
		}
		// Owner first: chown clears set-id bits that chmod then sets.
		if err := u.own(p, h); err != nil {
			return err
		}
		return os.Chmod(p, h.FileInfo().Mode()&(fs.ModePerm|fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky))
	case tar.TypeSymlink:
		// An absolute link is resolved against the rootfs by the runtime
		// that uses it (images have many: /etc/localtime -> /usr/share/...);
		// a relative one is resolved where it lies, so one that climbs out
		// of the root would lead a host reader outside. Unpack itself
		// never follows a link (see host and TypeLink).
		if !path.IsAbs(h.Linkname) {
			if c := path.Clean(path.Join(path.Dir(rel), h.Linkname)); c == ".." || strings.HasPrefix(c, "../") {
				return reason.New(reason.EscapingLink, "link %q -> %q leaves the root", rel, h.Linkname)
			}
		}
		if err := os.Symlink(h.Linkname, p); err != nil {
			return err
		}
		return u.own(p, h)
	case tar.TypeLink:
		trel, err := clean(h.Linkname)
		if err != nil {
			return reason.New(reason.EscapingHardlink, "hardlink %q -> %q: %v", rel, h.Linkname, err)
		}
		tp, err := u.host(trel)
		if err != nil {
			return err
		}
		info, err := os.Lstat(tp)
		if err != nil || !info.Mode().IsRegular() {
			return reason.New(reason.EscapingHardlink, "hardlink %q -> %q names no regular file unpacked in the root", rel, h.Linkname)
		}
		return os.Link(tp, p)
	case tar.TypeChar, tar.TypeBlock:
		return reason.New(reason.DeviceNode, "entry %q is a device node", rel)
	default:
		return reason.New(reason.SpecialFile, "entry %q has type %q, which a rootfs does not need", rel, string(h.Typeflag))
	}
}

// own gives an entry its owner when unpacking as root (a rootfs for a
// container); an unprivileged unpack keeps the caller as owner.
func (u *unpacker) own(p string, h *tar.Header) error {
	if os.Geteuid() != 0 {
		return nil
	}
	return os.Lchown(p, h.Uid, h.Gid)
}

// opaque empties dir of what lower layers put there; what this layer
// already wrote stays.
func (u *unpacker) opaque(dir string) error {
	d, err := u.host(path.Join(dir, "x"))
	if err != nil {
		return err
	}
	d = filepath.Dir(d)
	entries, err := os.ReadDir(d)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		rel := path.Join(dir, e.Name())
		if dir == "." {
			rel = e.Name()
		}
		if u.written[rel] {
			continue
		}
		if err := os.RemoveAll(filepath.Join(d, e.Name())); err != nil {
			return err
		}
	}
	return nil
}
