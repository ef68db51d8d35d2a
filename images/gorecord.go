package images

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/nlx-dev/nlx/internal/atomicfile"
)

// A Go or nlx layer's cache key needs the go command: go env for the Go
// version, and for a go layer go list -deps for what the package is built
// from, ~130 ms a platform, most of a plan with nothing changed. A record
// keeps, per layer and platform, the key found last and everything the go
// command's answers were drawn from:
//
//   - the go command and its toolchain: the go found on PATH (the link and
//     the file it resolves to), its GOROOT's VERSION, go.env and the
//     compile, link and asm tools, and the go env file, each by size, mode,
//     mtime, inode and change time;
//   - every GO* and CGO_* variable of the environment;
//   - for a go layer, by content: the go.mod and go.work of the config
//     directory and of every directory above it (or that there is none),
//     the go.work in use and its go.work.sum, each module's go.mod and
//     go.sum built from its files (the main modules and local
//     replacements), that it has no vendor directory, and, for every
//     package of those modules, its directory's listing and every file of
//     it the go command may build from (Go, assembly, C and headers, syso)
//     or embed (with the listings of the directories embedded files are
//     in);
//   - for an nlx layer, the hash of the source it is built from, which
//     names the record.
//
// When every one of them is as recorded, the recorded key is the key the
// go command would give, and the layer is taken from the cache without
// running it. Any difference, a record that cannot be read, or a layer no
// longer in the cache is a miss: the full path runs and writes the record
// again. A record is not written when a file it would vouch for was
// modified after the resolution began (its content may not be the one the
// go command read), or when a module has a vendor directory.
const recordFormat = "nlx-go-record-1"

// goRecord is one record, as stored in the cache's records directory.
type goRecord struct {
	Format string    `json:"format"`
	Key    string    `json:"key"` // the layer cache key
	Tool   []stamp   `json:"tool"`
	Env    []string  `json:"env"`
	Files  []fileSum `json:"files,omitempty"` // content, or "" for a file that must not exist
	Dirs   []fileSum `json:"dirs,omitempty"`  // listings
}

type fileSum struct {
	Path string `json:"path"`
	Sum  string `json:"sum"`
}

// stamp identifies a file of the toolchain without reading it.
type stamp struct {
	Path  string `json:"path"`
	Size  int64  `json:"size"` // -1: absent
	Mode  uint32 `json:"mode"`
	MTime int64  `json:"mtime"`
	CTime int64  `json:"ctime"`
	Ino   uint64 `json:"ino"`
}

func stampOf(path string, lstat bool) stamp {
	st := os.Stat
	if lstat {
		st = os.Lstat
	}
	fi, err := st(path)
	if err != nil {
		return stamp{Path: path, Size: -1}
	}
	s := stamp{Path: path, Size: fi.Size(), Mode: uint32(fi.Mode()), MTime: fi.ModTime().UnixNano()}
	s.Ino, s.CTime = sysStamp(fi)
	return s
}

// toolchain is the go command's fingerprint and the Go environment.
type toolchain struct {
	stamps []stamp
	env    []string
	err    error // no go command: nothing to fingerprint, no record
}

// toolchain fingerprints the go command once per build.
func (b *builder) toolchain() *toolchain {
	if b.tool == nil {
		b.tool = fingerprint()
	}
	return b.tool
}

func fingerprint() *toolchain {
	goPath, err := exec.LookPath("go")
	if err != nil {
		return &toolchain{err: err}
	}
	if abs, err := filepath.Abs(goPath); err == nil {
		goPath = abs
	}
	real, err := filepath.EvalSymlinks(goPath)
	if err != nil {
		return &toolchain{err: err}
	}
	goroot := os.Getenv("GOROOT")
	if goroot == "" {
		goroot = filepath.Dir(filepath.Dir(real))
	}
	tools := filepath.Join(goroot, "pkg", "tool", runtime.GOOS+"_"+runtime.GOARCH)
	if _, err := os.Stat(filepath.Join(tools, "compile")); err != nil {
		// Not a Go installation around the go command (a shim choosing
		// a toolchain by its own rules?): nothing to vouch for it by.
		return &toolchain{err: fmt.Errorf("no Go installation at %s: %w", goroot, err)}
	}
	t := &toolchain{stamps: []stamp{stampOf(goPath, true)}}
	for _, p := range []string{real, filepath.Join(goroot, "VERSION"), filepath.Join(goroot, "go.env"),
		filepath.Join(tools, "compile"), filepath.Join(tools, "link"), filepath.Join(tools, "asm"), goEnvFile()} {
		if p != "" {
			t.stamps = append(t.stamps, stampOf(p, false))
		}
	}
	for _, e := range os.Environ() {
		if strings.HasPrefix(e, "GO") || strings.HasPrefix(e, "CGO_") {
			t.env = append(t.env, e)
		}
	}
	slices.Sort(t.env)
	return t
}

// goEnvFile is where go env -w writes, as the go command finds it.
func goEnvFile() string {
	if v := os.Getenv("GOENV"); v != "" {
		if v == "off" {
			return ""
		}
		return v
	}
	dir, err := os.UserConfigDir()
	if err != nil {
		return ""
	}
	return filepath.Join(dir, "go", "env")
}

// recordName names the record of a layer: its kind and what identifies it
// (the config directory and package, or the source's hash), its
// destination and platform, the epoch.
func (b *builder) recordName(parts ...string) string {
	h := sha256.New()
	for _, p := range append(append([]string{recordFormat}, parts...), fmt.Sprint(b.in.Epoch.Unix())) {
		fmt.Fprintf(h, "%d:%s\n", len(p), p)
	}
	return hex.EncodeToString(h.Sum(nil))
}

func (c *Cache) recordPath(name string) string {
	return filepath.Join(c.Dir, "records", name+".json")
}

// record gathers, during a full resolution, what the go command read.
type record struct {
	start  time.Time
	files  map[string]string
	dirs   map[string]string
	unsure bool // something a record cannot vouch for: write none
}

// newRecord starts a record as the full path begins: the toolchain is
// fingerprinted before the go command runs.
func (b *builder) newRecord() *record {
	b.toolchain()
	return &record{start: time.Now(), files: map[string]string{}, dirs: map[string]string{}}
}

// racy reports whether a file modified at mtime may have changed while
// the go command read it: modified since a second before the resolution
// began (file systems keep coarse times).
func (r *record) racy(mtime time.Time) bool {
	return !mtime.Before(r.start.Add(-time.Second))
}

// file records the content of path, or that it does not exist.
func (r *record) file(path string) {
	if _, ok := r.files[path]; ok {
		return
	}
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		r.files[path] = ""
		return
	}
	if err != nil || !fi.Mode().IsRegular() || r.racy(fi.ModTime()) {
		r.unsure = true
		return
	}
	sum, err := sumFile(path)
	if err != nil {
		r.unsure = true
		return
	}
	r.files[path] = sum
}

// absent records that path does not exist; if it does, no record.
func (r *record) absent(path string) {
	if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
		r.unsure = true
		return
	}
	r.files[path] = ""
}

// moduleSearch records what decides the main module and the workspace:
// go.mod and go.work in the config directory and every directory above
// it, and the go.work in use with its go.work.sum.
func (r *record) moduleSearch(dir, gowork string) {
	for d := dir; ; d = filepath.Dir(d) {
		r.file(filepath.Join(d, "go.mod"))
		r.file(filepath.Join(d, "go.work"))
		if filepath.Dir(d) == d {
			break
		}
	}
	if gowork != "" && gowork != "off" {
		r.file(gowork)
		r.file(filepath.Join(filepath.Dir(gowork), "go.work.sum"))
	}
}

// module records a module whose files are built: its go.mod and go.sum,
// and that it is not vendored.
func (r *record) module(root string) {
	r.file(filepath.Join(root, "go.mod"))
	r.file(filepath.Join(root, "go.sum"))
	r.absent(filepath.Join(root, "vendor"))
}

// buildExts are the files the go command may build a package from.
var buildExts = []string{".go", ".s", ".S", ".sx", ".h", ".hh", ".hpp", ".hxx", ".c", ".cc", ".cxx", ".cpp", ".m",
	".f", ".F", ".for", ".f90", ".swig", ".swigcxx", ".syso"}

// pkg records a package directory: its listing and every file of it the
// go command may build from, and each embedded file with the listings of
// the directories from the package's down to it.
func (r *record) pkg(dir string, embeds []string) {
	r.dir(dir)
	for _, e := range embeds {
		p := filepath.Join(dir, filepath.FromSlash(e))
		r.file(p)
		for d := filepath.Dir(p); d != dir && strings.HasPrefix(d, dir); d = filepath.Dir(d) {
			r.dir(d)
		}
	}
}

func (r *record) dir(dir string) {
	if _, ok := r.dirs[dir]; ok {
		return
	}
	fi, err := os.Stat(dir)
	if err != nil || r.racy(fi.ModTime()) {
		r.unsure = true
		return
	}
	sum, entries, err := listDir(dir)
	if err != nil {
		r.unsure = true
		return
	}
	r.dirs[dir] = sum
	for _, e := range entries {
		if e.Type().IsRegular() && slices.Contains(buildExts, filepath.Ext(e.Name())) {
			r.file(filepath.Join(dir, e.Name()))
		}
	}
}

// listDir hashes a directory's listing: every name with its type.
func listDir(dir string) (string, []os.DirEntry, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", nil, err
	}
	h := sha256.New()
	for _, e := range entries {
		fmt.Fprintf(h, "%d:%s %d\n", len(e.Name()), e.Name(), e.Type())
	}
	return hex.EncodeToString(h.Sum(nil)), entries, nil
}

func sumFile(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:]), nil
}

// saveRecord writes the record of a full resolution that found key ks. A
// record is an optimisation: failing to write one fails nothing.
func (b *builder) saveRecord(name string, r *record, ks string) {
	t := b.toolchain()
	if r.unsure || t.err != nil {
		return
	}
	rec := goRecord{Format: recordFormat, Key: ks, Tool: t.stamps, Env: t.env}
	for _, p := range slices.Sorted(maps.Keys(r.files)) {
		rec.Files = append(rec.Files, fileSum{p, r.files[p]})
	}
	for _, p := range slices.Sorted(maps.Keys(r.dirs)) {
		rec.Dirs = append(rec.Dirs, fileSum{p, r.dirs[p]})
	}
	data, err := json.Marshal(rec)
	if err != nil {
		return
	}
	path := b.in.Cache.recordPath(name)
	if os.MkdirAll(filepath.Dir(path), 0o755) == nil {
		_ = atomicfile.Write(path, data, 0o600)
	}
}

// copyRecord writes the record from under the name to: one found by the
// source's hash, for the executable that carries that source.
func (b *builder) copyRecord(from, to string) {
	data, err := os.ReadFile(b.in.Cache.recordPath(from))
	if err == nil {
		_ = atomicfile.Write(b.in.Cache.recordPath(to), data, 0o600)
	}
}

// warm returns the layer the record name vouches for, when everything it
// was drawn from is as recorded and the layer is in the cache whole.
func (b *builder) warm(name string) (v1.Layer, bool) {
	data, err := os.ReadFile(b.in.Cache.recordPath(name))
	if err != nil {
		return nil, false
	}
	var rec goRecord
	if json.Unmarshal(data, &rec) != nil || rec.Format != recordFormat || rec.Key == "" {
		return nil, false
	}
	t := b.toolchain()
	if t.err != nil || !slices.Equal(rec.Tool, t.stamps) || !slices.Equal(rec.Env, t.env) {
		return nil, false
	}
	for _, f := range rec.Files {
		if f.Sum == "" {
			if _, err := os.Lstat(f.Path); !errors.Is(err, fs.ErrNotExist) {
				return nil, false
			}
			continue
		}
		if sum, err := sumFile(f.Path); err != nil || sum != f.Sum {
			return nil, false
		}
	}
	for _, d := range rec.Dirs {
		if sum, _, err := listDir(d.Path); err != nil || sum != d.Sum {
			return nil, false
		}
	}
	return b.in.Cache.lookup(rec.Key)
}
