package schema

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"cuelang.org/go/cue/token"
	"github.com/nlx-dev/nlx/internal/reason"
)

// InputFile is one file a config was made from.
type InputFile struct {
	Path   string `json:"path"` // slash-separated, relative to the config directory
	SHA256 string `json:"sha256"`
	Size   int64  `json:"size"`
}

// Inputs lists every file a config was made from: the package's .cue files
// and the files of every directory it refers to (skill packages). Dirs are
// those directories, so the same set can be listed again without evaluating
// the CUE (whose bytes are themselves inputs).
type Inputs struct {
	Files []InputFile `json:"files"`
	Dirs  []string    `json:"dirs,omitempty"`
	Hash  string      `json:"config_hash"`
}

func (in *Inputs) add(name string, data []byte) {
	sum := sha256.Sum256(data)
	in.Files = append(in.Files, InputFile{Path: name, SHA256: hex.EncodeToString(sum[:]), Size: int64(len(data))})
}

// sumOf is the SHA-256 (hex) recorded for the input at name, the latest
// one added; "" when there is none.
func (in *Inputs) sumOf(name string) string {
	for i := len(in.Files) - 1; i >= 0; i-- {
		if in.Files[i].Path == name {
			return in.Files[i].SHA256
		}
	}
	return ""
}

// finish sorts the inputs and computes Hash: SHA-256 over every file's name,
// size and content hash, in name order.
func (in *Inputs) finish() {
	sort.Slice(in.Files, func(i, j int) bool { return in.Files[i].Path < in.Files[j].Path })
	sort.Strings(in.Dirs)
	in.Dirs = compactStrings(in.Dirs)
	h := sha256.New()
	for _, f := range in.Files {
		h.Write([]byte(f.Path))
		h.Write([]byte{0})
		h.Write([]byte(strconv.FormatInt(f.Size, 10)))
		h.Write([]byte{0})
		h.Write([]byte(f.SHA256))
		h.Write([]byte{'\n'})
	}
	in.Hash = "sha256:" + hex.EncodeToString(h.Sum(nil))
}

func compactStrings(s []string) []string {
	out := s[:0]
	for i, x := range s {
		if i == 0 || x != s[i-1] {
			out = append(out, x)
		}
	}
	return out
}

// Rehash lists the inputs of the config in dir again, given the directories
// an earlier Load recorded, without evaluating any CUE. Apply uses it to
// prove that a config has not changed since it was planned. It reads the
// files as Load does: a .cue file that leads out of dir is an
// escaping_symlink error.
func Rehash(dir string, dirs []string) (Inputs, error) {
	var in Inputs
	root, err := os.OpenRoot(dir)
	if err != nil {
		return in, fmt.Errorf("read config directory: %w", err)
	}
	defer root.Close()
	entries, err := readRootDir(root)
	if err != nil {
		return in, fmt.Errorf("read config directory: %w", err)
	}
	for _, e := range entries {
		if !cueFile(e) {
			continue
		}
		data, _, err := readRegular(root, e.Name(), 0)
		if err != nil {
			return in, Errors{inputError(filepath.Join(dir, e.Name()), err)}
		}
		in.add(e.Name(), data)
	}
	for _, d := range dirs {
		if _, err := walkTree(root, d, &in); err != nil {
			return in, err
		}
	}
	in.Dirs = append(in.Dirs, dirs...)
	in.finish()
	return in, nil
}

// readRootDir lists root's own directory, the one its files are opened in.
func readRootDir(root *os.Root) ([]fs.DirEntry, error) {
	d, err := root.Open(".")
	if err != nil {
		return nil, err
	}
	defer d.Close()
	entries, err := d.ReadDir(-1)
	sort.Slice(entries, func(i, j int) bool { return entries[i].Name() < entries[j].Name() })
	return entries, err
}

// errEscapes and errNotRegular are why readRegular refuses a file.
var (
	errEscapes    = errors.New("a symbolic link leading out of the config directory")
	errNotRegular = errors.New("not a regular file (FIFOs, devices and directories are refused)")
)

// readRegular reads the file name inside root. The kernel resolves the name
// against root's open directory, so a symbolic link (or a parent directory
// swapped for one) cannot lead the read out of it, not even between a check
// and the open; the open never blocks on a FIFO, and only a regular file is
// read. A positive limit refuses a larger file, returning its size.
func readRegular(root *os.Root, name string, limit int64) ([]byte, int64, error) {
	return readFile(root, name, limit, nil)
}

// errChanged is why readListed refuses a file.
var errChanged = errors.New("changed while being read: it is no longer the regular file listed (a symbolic link swapped in?)")

// readListed is readRegular of a file a directory listing showed as the
// regular file listed: the file opened must be that very file. os.Root
// follows a link that stays inside it, so a file swapped for a link to
// another file of the config after the listing would otherwise be read in
// its place.
func readListed(root *os.Root, name string, listed fs.FileInfo) ([]byte, error) {
	data, _, err := readFile(root, name, 0, listed)
	return data, err
}

func readFile(root *os.Root, name string, limit int64, listed fs.FileInfo) ([]byte, int64, error) {
	f, err := root.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		if escapes(root, name, err) {
			return nil, 0, errEscapes
		}
		return nil, 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, 0, err
	}
	if !fi.Mode().IsRegular() {
		return nil, 0, errNotRegular
	}
	if listed != nil && !os.SameFile(fi, listed) {
		return nil, 0, errChanged
	}
	if limit > 0 && fi.Size() > limit {
		return nil, fi.Size(), fmt.Errorf("larger than %d bytes", limit)
	}
	data := make([]byte, 0, fi.Size()+1)
	for {
		n, err := f.Read(data[len(data):cap(data)])
		data = data[:len(data)+n]
		if err == io.EOF {
			return data, int64(len(data)), nil
		}
		if err != nil {
			return nil, 0, err
		}
		if len(data) == cap(data) {
			if limit > 0 && int64(len(data)) > limit {
				return nil, int64(len(data)), fmt.Errorf("larger than %d bytes", limit)
			}
			data = append(data, 0)[:len(data)] // it grew since the stat
		}
	}
}

// escapes reports whether root refused to open name because it is a
// symbolic link out of root. os.Root says so with an error of its own, not
// an errno, which it keeps unexported.
func escapes(root *os.Root, name string, err error) bool {
	var pe *fs.PathError
	if !errors.As(err, &pe) {
		return false
	}
	if _, isErrno := pe.Err.(syscall.Errno); isErrno {
		return false
	}
	fi, lerr := root.Lstat(name)
	return lerr == nil && fi.Mode()&fs.ModeSymlink != 0
}

// inputError is the positioned error of a config file readRegular refused.
func inputError(file string, err error) *Error {
	pos := token.Position{Filename: file, Line: 1, Column: 1}
	switch err {
	case errEscapes:
		return &Error{Pos: pos, Code: reason.EscapingSymlink,
			Msg: filepath.Base(file) + " is a symbolic link leading out of the config directory; nlx reads only files inside it"}
	case errNotRegular:
		return &Error{Pos: pos, Code: reason.ConfigIO, Msg: filepath.Base(file) + " is " + errNotRegular.Error()}
	}
	return &Error{Pos: token.Position{Filename: file}, Code: reason.ConfigIO, Msg: err.Error()}
}

// Changed lists the paths that differ between two input sets.
func Changed(a, b Inputs) []string {
	am := make(map[string]string, len(a.Files))
	for _, f := range a.Files {
		am[f.Path] = f.SHA256
	}
	var out []string
	for _, f := range b.Files {
		if sum, ok := am[f.Path]; !ok || sum != f.SHA256 {
			out = append(out, f.Path)
		}
		delete(am, f.Path)
	}
	for p := range am {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

// walkTree adds every regular file under rel (a slash path relative to
// root) to in and returns the tree's digest. Symbolic links and other
// non-regular files are refused: a package's content must be what is in the
// tree. Everything is read through root, so nothing outside it is.
func walkTree(root *os.Root, rel string, in *Inputs) (string, error) {
	if err := checkRelative(rel); err != nil {
		return "", err
	}
	rel = path.Clean(rel)
	top, err := root.Lstat(rel)
	if err == nil && top.Mode()&fs.ModeSymlink != 0 {
		return "", fmt.Errorf("read %s: %s is a symbolic link (symbolic links and devices are refused)", rel, rel)
	}
	h := sha256.New()
	err = fs.WalkDir(root.FS(), rel, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if p == rel && (top == nil || !os.SameFile(info, top)) {
			// WalkDir stats its root, following a link that stays in
			// root: rel was swapped for one since the Lstat above.
			return fmt.Errorf("%s %w", p, errChanged)
		}
		if d.IsDir() {
			return nil
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("%s is not a regular file (symbolic links and devices are refused)", p)
		}
		data, err := readListed(root, p, info)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		in.add(p, data)
		f := in.Files[len(in.Files)-1]
		fmt.Fprintf(h, "%s\x00%d\x00%s\n", strings.TrimPrefix(p, rel+"/"), f.Size, f.SHA256)
		return nil
	})
	if err != nil {
		if isEscape(err) {
			return "", fmt.Errorf("read %s: %s leaves the config directory through a symbolic link", rel, rel)
		}
		return "", fmt.Errorf("read %s: %w", rel, err)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

// isEscape reports an error of os.Root refusing a path out of it: a
// *PathError whose cause is not an errno.
func isEscape(err error) bool {
	var pe *fs.PathError
	if !errors.As(err, &pe) {
		return false
	}
	_, isErrno := pe.Err.(syscall.Errno)
	return !isErrno && pe.Err != errNotRegular && pe.Err != errEscapes && pe.Err != errChanged
}

// checkRelative refuses absolute paths and paths that leave the config
// directory.
func checkRelative(rel string) error {
	if rel == "" || path.IsAbs(rel) || filepath.IsAbs(rel) {
		return fmt.Errorf("path %q must be relative to the config directory", rel)
	}
	if !filepath.IsLocal(filepath.FromSlash(path.Clean(rel))) {
		return fmt.Errorf("path %q leaves the config directory", rel)
	}
	return nil
}
