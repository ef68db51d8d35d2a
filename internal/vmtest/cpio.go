package vmtest

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"
)

// Initramfs is an initramfs being assembled: the kernel's newc cpio format
// (Documentation/driver-api/early-userspace/buffer-format.rst), written
// here (a few dozen lines; no cpio tool, no library needed). Entries are
// written sorted, parents first, with fixed owners and times, so the same
// inputs make the same bytes.
type Initramfs struct {
	entries map[string]entry
}

type entry struct {
	mode uint32 // type and permission bits, as in stat(2)
	data []byte // file contents, or a symlink's target
	src  string // a host file to read at Write time, instead of data
}

const (
	modeDir  = 0o040000
	modeFile = 0o100000
	modeLink = 0o120000
)

// NewInitramfs starts an empty one.
func NewInitramfs() *Initramfs { return &Initramfs{entries: map[string]entry{}} }

func clean(p string) string { return strings.TrimPrefix(path.Clean("/"+p), "/") }

// Dir adds a directory (and its parents).
func (a *Initramfs) Dir(p string, perm os.FileMode) {
	p = clean(p)
	if p == "" {
		return
	}
	a.Dir(path.Dir(p), 0o755)
	if _, ok := a.entries[p]; !ok {
		a.entries[p] = entry{mode: modeDir | uint32(perm.Perm())}
	}
}

// File adds a file with data.
func (a *Initramfs) File(p string, perm os.FileMode, data []byte) {
	p = clean(p)
	a.Dir(path.Dir(p), 0o755)
	a.entries[p] = entry{mode: modeFile | uint32(perm.Perm()), data: data}
}

// HostFile adds the host file src as p, with src's permissions; it is read
// when the archive is written.
func (a *Initramfs) HostFile(p, src string) error {
	fi, err := os.Stat(src)
	if err != nil {
		return err
	}
	p = clean(p)
	a.Dir(path.Dir(p), 0o755)
	a.entries[p] = entry{mode: modeFile | uint32(fi.Mode().Perm()), src: src}
	return nil
}

// Symlink adds a symbolic link p to target.
func (a *Initramfs) Symlink(p, target string) {
	p = clean(p)
	a.Dir(path.Dir(p), 0o755)
	a.entries[p] = entry{mode: modeLink | 0o777, data: []byte(target)}
}

// Has reports whether p is in the archive.
func (a *Initramfs) Has(p string) bool { _, ok := a.entries[clean(p)]; return ok }

// WriteTo writes the archive.
func (a *Initramfs) WriteTo(w io.Writer) (int64, error) {
	names := make([]string, 0, len(a.entries))
	for n := range a.entries {
		names = append(names, n)
	}
	sort.Strings(names) // a parent sorts before what is in it
	cw := &countingWriter{w: w}
	ino := uint32(1)
	for _, n := range names {
		e := a.entries[n]
		data := e.data
		if e.src != "" {
			b, err := os.ReadFile(e.src)
			if err != nil {
				return cw.n, err
			}
			data = b
		}
		if err := writeEntry(cw, n, e.mode, ino, data); err != nil {
			return cw.n, err
		}
		ino++
	}
	if err := writeEntry(cw, "TRAILER!!!", 0, 0, nil); err != nil {
		return cw.n, err
	}
	return cw.n, nil
}

// Bytes is the archive in memory.
func (a *Initramfs) Bytes() ([]byte, error) {
	var b bytes.Buffer
	_, err := a.WriteTo(&b)
	return b.Bytes(), err
}

func writeEntry(w *countingWriter, name string, mode, ino uint32, data []byte) error {
	nlink := uint32(1)
	if mode&0o170000 == modeDir {
		nlink = 2
	}
	// newc: magic, then 13 fields of 8 hex digits: ino, mode, uid, gid,
	// nlink, mtime, filesize, devmajor, devminor, rdevmajor, rdevminor,
	// namesize (with its NUL), check.
	hdr := fmt.Sprintf("070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		ino, mode, 0, 0, nlink, 0, len(data), 0, 0, 0, 0, len(name)+1, 0)
	if _, err := io.WriteString(w, hdr+name+"\x00"); err != nil {
		return err
	}
	if err := w.pad(); err != nil {
		return err
	}
	if _, err := w.Write(data); err != nil {
		return err
	}
	return w.pad()
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// pad aligns to 4 bytes, as newc wants after each header+name and data.
func (c *countingWriter) pad() error {
	if r := c.n % 4; r != 0 {
		_, err := c.Write(make([]byte, 4-r))
		return err
	}
	return nil
}
