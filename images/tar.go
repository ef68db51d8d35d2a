package images

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/nlx-dev/nlx/internal/reason"
)

// entry is one file of a layer before it is written: the layer's content
// is a sorted list of entries, so the tar does not depend on the order a
// directory happens to list its files.
type entry struct {
	name     string // slash path inside the image, no leading slash
	mode     int64  // permission bits
	typ      byte   // tar.TypeReg, tar.TypeDir or tar.TypeSymlink
	linkname string
	data     []byte // for regular files read into memory
	file     string // for regular files read at write time: a host path, or a slash path inside root
	size     int64

	// root, when set, is the config directory file is inside: the file is
	// opened through it (confined to it by the kernel), and must still be
	// the very file listed (info) when it is read.
	root *os.Root
	info fs.FileInfo
	// sum is the SHA-256 of the content the cache key was computed from;
	// the tar must hold exactly that content.
	sum []byte
}

// open opens a regular file entry for reading. A file of the config
// directory is opened through its root: a link swapped in for it, or for a
// directory above it, since it was listed cannot lead the read outside the
// directory, and a file that is no longer the one listed (a link to another
// file of it) is refused. The open never blocks on a FIFO.
func (e *entry) open() (*os.File, error) {
	if e.root == nil {
		f, err := os.Open(e.file)
		if err != nil {
			return nil, fmt.Errorf("layer file: %w", err)
		}
		return f, nil
	}
	f, err := e.root.OpenFile(e.file, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			if _, errno := pe.Err.(syscall.Errno); !errno {
				return nil, reason.New(reason.EscapingSymlink, "%s leads out of the config directory: %v", e.file, err)
			}
		}
		return nil, fmt.Errorf("layer file: %w", err)
	}
	fi, err := f.Stat()
	if err == nil && (!fi.Mode().IsRegular() || e.info == nil || !os.SameFile(fi, e.info)) {
		err = fmt.Errorf("layer file %s changed while building: it is no longer the regular file listed", e.file)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// layerContent collects entries; add parents as needed.
type layerContent struct {
	entries map[string]*entry
}

func newContent() *layerContent { return &layerContent{entries: map[string]*entry{}} }

// dir adds a directory and its parents.
func (c *layerContent) dir(name string) {
	name = strings.Trim(path.Clean("/"+name), "/")
	for name != "" && name != "." {
		if _, ok := c.entries[name]; ok {
			return
		}
		c.entries[name] = &entry{name: name, mode: 0o755, typ: tar.TypeDir}
		name = path.Dir(name)
		if name == "." {
			return
		}
	}
}

func (c *layerContent) add(e *entry) {
	e.name = strings.Trim(path.Clean("/"+e.name), "/")
	if d := path.Dir(e.name); d != "." {
		c.dir(d)
	}
	c.entries[e.name] = e
}

// normMode is the one mode a file gets in an image: what is executable by
// its owner is 0755, everything else 0644. umask and checkouts differ; the
// image must not.
func normMode(m fs.FileMode) int64 {
	if m.IsDir() || m&0o100 != 0 {
		return 0o755
	}
	return 0o644
}

// addTree adds the file or directory tree at src, a slash path inside the
// config directory root, under dest (in the image). A symbolic link is kept
// as a link when its target stays inside the tree; one that escapes it is
// an error, never followed. Everything is listed and later read through
// root, so nothing outside the config directory is, whatever is swapped
// for a link meanwhile.
func (c *layerContent) addTree(root *os.Root, src, dest string) error {
	src = path.Clean(src)
	if !filepath.IsLocal(filepath.FromSlash(src)) {
		return fmt.Errorf("layer source %q is not inside the config directory", src)
	}
	info, err := root.Lstat(src)
	if err != nil {
		return fmt.Errorf("layer source: %w", err)
	}
	if !info.IsDir() {
		if !info.Mode().IsRegular() {
			return reason.New(reason.EscapingSymlink, "layer source %s is not a regular file or directory", src)
		}
		c.add(&entry{name: dest, mode: normMode(info.Mode()), typ: tar.TypeReg, file: src, size: info.Size(), root: root, info: info})
		return nil
	}
	c.dir(dest)
	return fs.WalkDir(root.FS(), src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == src {
			if !d.IsDir() {
				return fmt.Errorf("layer source %s changed while building: it is no longer a directory", src)
			}
			return nil
		}
		rel := strings.TrimPrefix(p, src+"/")
		if src == "." {
			rel = p
		}
		name := path.Join(dest, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			c.dir(name)
		case d.Type()&fs.ModeSymlink != 0:
			target, err := root.Readlink(p)
			if err != nil {
				return err
			}
			if filepath.IsAbs(target) || path.IsAbs(target) {
				return reason.New(reason.EscapingSymlink, "%s links to the absolute path %s", p, target)
			}
			resolved := path.Join(path.Dir(p), target)
			if r, err := filepath.Rel(filepath.FromSlash(src), filepath.FromSlash(resolved)); err != nil || !filepath.IsLocal(r) && r != "." {
				return reason.New(reason.EscapingSymlink, "%s links to %s, outside %s", p, target, src)
			}
			c.add(&entry{name: name, mode: 0o777, typ: tar.TypeSymlink, linkname: filepath.ToSlash(target)})
		case info.Mode().IsRegular():
			c.add(&entry{name: name, mode: normMode(info.Mode()), typ: tar.TypeReg, file: p, size: info.Size(), root: root, info: info})
		default:
			return reason.New(reason.EscapingSymlink, "%s is not a regular file, directory or link", p)
		}
		return nil
	})
}

// sorted lists the entries by name: parents before children.
func (c *layerContent) sorted() []*entry {
	out := make([]*entry, 0, len(c.entries))
	for _, e := range c.entries {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// writeTar writes the entries as a reproducible tar: sorted, uid and gid 0,
// no user or group names, one mtime for everything, PAX records only where
// a name needs them.
func writeTar(w io.Writer, entries []*entry, mtime time.Time) error {
	tw := tar.NewWriter(w)
	for _, e := range entries {
		h := &tar.Header{
			Typeflag: e.typ,
			Name:     e.name,
			Linkname: e.linkname,
			Mode:     e.mode,
			ModTime:  mtime,
		}
		if e.typ == tar.TypeDir {
			h.Name += "/"
		}
		if e.typ != tar.TypeReg {
			if err := tw.WriteHeader(h); err != nil {
				return fmt.Errorf("tar %s: %w", e.name, err)
			}
			continue
		}
		if err := writeFile(tw, h, e); err != nil {
			return err
		}
	}
	return tw.Close()
}

func writeFile(tw *tar.Writer, h *tar.Header, e *entry) error {
	var body io.Reader = bytes.NewReader(e.data)
	h.Size = int64(len(e.data))
	if e.data == nil {
		f, err := e.open()
		if err != nil {
			return err
		}
		defer f.Close()
		info, err := f.Stat()
		if err != nil {
			return err
		}
		body, h.Size = f, info.Size()
	}
	if err := tw.WriteHeader(h); err != nil {
		return fmt.Errorf("tar %s: %w", e.name, err)
	}
	sum := sha256.New()
	if n, err := io.Copy(tw, io.TeeReader(body, sum)); err != nil || n != h.Size {
		return fmt.Errorf("tar %s: wrote %d of %d bytes (the file changed while building?): %v", e.name, n, h.Size, err)
	}
	// The cache key names the content hashed for it: a layer stored under
	// it must hold that content, not what a file became since.
	if e.sum != nil && !bytes.Equal(sum.Sum(nil), e.sum) {
		return fmt.Errorf("tar %s: %s changed while building: its content is not what the layer's cache key was computed from", e.name, e.file)
	}
	return nil
}
