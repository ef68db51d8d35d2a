package images

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
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
	file     string // for regular files read at write time
	size     int64
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

// addTree adds the file or directory tree at src (on the host) under dest
// (in the image). A symbolic link is kept as a link when its target stays
// inside the tree; one that escapes it is an error, never followed.
func (c *layerContent) addTree(src, dest string) error {
	root, err := filepath.Abs(src)
	if err != nil {
		return err
	}
	info, err := os.Lstat(root)
	if err != nil {
		return fmt.Errorf("layer source: %w", err)
	}
	if !info.IsDir() {
		if !info.Mode().IsRegular() {
			return reason.New(reason.EscapingSymlink, "layer source %s is not a regular file or directory", src)
		}
		c.add(&entry{name: dest, mode: normMode(info.Mode()), typ: tar.TypeReg, file: root, size: info.Size()})
		return nil
	}
	c.dir(dest)
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil || rel == "." {
			return err
		}
		name := path.Join(dest, filepath.ToSlash(rel))
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			c.dir(name)
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			if filepath.IsAbs(target) {
				return reason.New(reason.EscapingSymlink, "%s links to the absolute path %s", filepath.Join(src, rel), target)
			}
			resolved := filepath.Join(filepath.Dir(p), target)
			if r, err := filepath.Rel(root, resolved); err != nil || r == ".." || strings.HasPrefix(r, "../") {
				return reason.New(reason.EscapingSymlink, "%s links to %s, outside %s", filepath.Join(src, rel), target, src)
			}
			c.add(&entry{name: name, mode: 0o777, typ: tar.TypeSymlink, linkname: filepath.ToSlash(target)})
		case info.Mode().IsRegular():
			c.add(&entry{name: name, mode: normMode(info.Mode()), typ: tar.TypeReg, file: p, size: info.Size()})
		default:
			return reason.New(reason.EscapingSymlink, "%s is not a regular file, directory or link", filepath.Join(src, rel))
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
		f, err := os.Open(e.file)
		if err != nil {
			return fmt.Errorf("layer file: %w", err)
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
	if n, err := io.Copy(tw, body); err != nil || n != h.Size {
		return fmt.Errorf("tar %s: wrote %d of %d bytes (the file changed while building?): %v", e.name, n, h.Size, err)
	}
	return nil
}
