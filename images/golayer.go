package images

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/nlx-dev/nlx/internal/reason"
	"github.com/nlx-dev/nlx/schema"
)

// selfMain is the package of Input.Self an nlx layer builds: nlx's command.
const selfMain = "./cmd/nlx"

// goEnv is the environment of every go command an image build runs for
// platform p: no cgo, the platform's architecture level pinned (the default
// of each, so that an operator's GOAMD64 cannot change a build its cache key
// does not see), the operator's GOFLAGS dropped, and extra.
func goEnv(p v1.Platform, extra ...string) []string {
	env := append(os.Environ(), "CGO_ENABLED=0", "GOOS="+p.OS, "GOARCH="+p.Architecture, "GOFLAGS=")
	switch p.Architecture {
	case "arm64":
		env = append(env, "GOARM64=v8.0")
	case "amd64":
		env = append(env, "GOAMD64=v1")
	}
	return append(env, extra...)
}

// goBuildArgs are the flags of every build: no paths, no build id, no VCS
// stamp, so that the same sources give the same binary anywhere.
var goBuildArgs = []string{"build", "-trimpath", "-buildvcs=false", "-ldflags=-buildid="}

// gocmd runs the go command in dir: its stdout, or a *goError. Every run
// is counted (Result.GoRuns).
func (b *builder) gocmd(ctx context.Context, dir string, env []string, args ...string) ([]byte, error) {
	b.goRuns++
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir, cmd.Env = dir, env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, &goError{args: args, said: goSaid(err, stderr.Bytes())}
	}
	return out, nil
}

// goError is a go command that failed, with what it said; it presents
// itself as go_build.
type goError struct {
	args []string
	said string
}

func (e *goError) Error() string { return "go " + strings.Join(e.args, " ") + ": " + e.said }

func (e *goError) As(target any) bool {
	return reason.Present(target, &reason.Error{Code: reason.GoBuild, Msg: e.Error()})
}

// goFailed rewrites a failed go command's error as go_build with msg and
// what the command said; any other error is returned as it is.
func goFailed(err error, format string, args ...any) error {
	var ge *goError
	if !errors.As(err, &ge) {
		return err
	}
	return reason.New(reason.GoBuild, "%s: %s", fmt.Sprintf(format, args...), ge.said)
}

// goSaid is what a failed go command said, on one line (a positioned error
// is one line): its stderr's lines joined, the first 12 of them.
func goSaid(err error, stderr []byte) string {
	var lines []string
	for _, l := range strings.Split(string(stderr), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	if len(lines) == 0 {
		return err.Error()
	}
	if len(lines) > 12 {
		lines = append(lines[:12], fmt.Sprintf("(%d more lines)", len(lines)-12))
	}
	var b strings.Builder
	for i, l := range lines {
		switch {
		case i == 0:
		case strings.HasSuffix(lines[i-1], ":"):
			b.WriteString(" ")
		default:
			b.WriteString("; ")
		}
		b.WriteString(l)
	}
	return b.String()
}

// goEnvInfo is what go env says that a build depends on.
type goEnvInfo struct {
	GOVERSION    string
	GOEXPERIMENT string
	GOFIPS140    string
	GOMOD        string // the main module's go.mod; os.DevNull or "" outside a module
	GOWORK       string // the go.work in use, if any
}

func (b *builder) goEnvInfo(ctx context.Context, dir string, env []string) (goEnvInfo, error) {
	out, err := b.gocmd(ctx, dir, env, "env", "-json", "GOVERSION", "GOEXPERIMENT", "GOFIPS140", "GOMOD", "GOWORK")
	if err != nil {
		return goEnvInfo{}, goFailed(err, "go env for %s in %s", env2platform(env), dir)
	}
	var info goEnvInfo
	if err := json.Unmarshal(out, &info); err != nil {
		return goEnvInfo{}, reason.New(reason.GoBuild, "go env: %v", err)
	}
	return info, nil
}

// key adds what the toolchain contributes to a build.
func (info goEnvInfo) key(k *key) {
	k.add(info.GOVERSION, "GOEXPERIMENT="+info.GOEXPERIMENT, "GOFIPS140="+info.GOFIPS140)
}

// goLayer cross-compiles a Go package for p (CGO_ENABLED=0, -trimpath, no
// build id, no VCS stamp) into a one-file layer, in the Go module or
// workspace holding the config directory. Its cache key covers the Go
// version, the platform and every source the package is built from; its
// record (gorecord.go) lets a build with nothing changed find that key
// without running the go command.
func (b *builder) goLayer(ctx context.Context, l schema.Layer, p v1.Platform) (v1.Layer, bool, error) {
	recName := b.recordName("go", b.absConfigDir(), l.Go, l.Dest, p.String())
	if layer, ok := b.warm(recName); ok {
		return layer, true, nil
	}
	rec := b.newRecord()
	env := goEnv(p)
	k := newKey("go")
	k.add(l.Go, l.Dest, p.String(), b.in.Epoch.String())
	if err := b.goInputs(ctx, env, l.Go, k, rec); err != nil {
		return nil, false, err
	}
	ks := k.String()
	if layer, ok := b.in.Cache.lookup(ks); ok {
		b.saveRecord(recName, rec, ks)
		return layer, true, nil
	}
	layer, err := b.goBuild(ctx, b.in.ConfigDir, env, l.Go, l.Dest, ks, p)
	if err != nil {
		return nil, false, goFailed(err, "go build %s for %s", l.Go, p)
	}
	b.saveRecord(recName, rec, ks)
	return layer, false, nil
}

// goBuild builds pkg in dir into a one-file layer at dest, stored under
// the cache key ks; a failed build is a *goError.
func (b *builder) goBuild(ctx context.Context, dir string, env []string, pkg, dest, ks string, p v1.Platform) (v1.Layer, error) {
	if err := os.MkdirAll(b.in.Cache.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("layer cache: %w", err)
	}
	tmp, err := os.MkdirTemp(b.in.Cache.Dir, "go-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	out := filepath.Join(tmp, "bin")
	args := append(slices.Clone(goBuildArgs), "-o", out, pkg)
	if _, err := b.gocmd(ctx, dir, env, args...); err != nil {
		return nil, err
	}
	content := newContent()
	content.add(&entry{name: dest, mode: 0o755, typ: '0', file: out})
	return b.in.Cache.store(ks, func(w io.Writer) error { return writeTar(w, content.sorted(), b.in.Epoch) })
}

// goPackage is what go list says of one package.
type goPackage struct {
	ImportPath string
	Dir        string
	GoFiles    []string
	SFiles     []string
	HFiles     []string
	SysoFiles  []string
	EmbedFiles []string
	Module     *struct {
		Path    string
		Version string
		Main    bool
		GoMod   string
		Replace *struct {
			Path    string
			Version string
		}
	}
}

// goInputs adds to k everything a build of pkg reads: the go version, and
// for every package it depends on either its module and version or, for the
// main module and local replacements, its files' content. rec is told what
// the go command read to say so.
func (b *builder) goInputs(ctx context.Context, env []string, pkg string, k *key, rec *record) error {
	dir := b.in.ConfigDir
	info, err := b.goEnvInfo(ctx, dir, env)
	if err != nil {
		return err
	}
	info.key(k)
	if info.GOWORK == "off" {
		info.GOWORK = ""
	}
	rec.moduleSearch(b.absConfigDir(), info.GOWORK)
	if (info.GOMOD == "" || info.GOMOD == os.DevNull) && info.GOWORK == "" {
		msg := fmt.Sprintf("go package %s cannot be built for %s: the config directory %s is in no Go module (no go.mod in it or above it, and no go.work); a go layer builds a package of the module or workspace holding the config directory",
			pkg, env2platform(env), dir)
		if b.isSelf(pkg) {
			msg += "; " + b.selfHint()
		}
		return reason.New(reason.GoBuild, "%s", msg)
	}
	out, err := b.gocmd(ctx, dir, env, "list", "-deps", "-json=ImportPath,Dir,GoFiles,SFiles,HFiles,SysoFiles,EmbedFiles,Module", pkg)
	if err != nil {
		var ge *goError
		if !errors.As(err, &ge) {
			return err
		}
		msg := fmt.Sprintf("go package %s cannot be built for %s in %s: %s", pkg, env2platform(env), dir, ge.said)
		if b.isSelf(pkg) {
			msg += "; " + b.selfHint()
		}
		return reason.New(reason.GoBuild, "%s", msg)
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	seenMod := map[string]bool{}
	for dec.More() {
		var p goPackage
		if err := dec.Decode(&p); err != nil {
			return fmt.Errorf("go list: %w", err)
		}
		k.add(p.ImportPath)
		m := p.Module
		switch {
		case m == nil: // the standard library: the go version says it
		case m.Main || (m.Replace != nil && m.Replace.Version == ""):
			if m.GoMod != "" && !seenMod[m.GoMod] {
				seenMod[m.GoMod] = true
				root := filepath.Dir(m.GoMod)
				if err := hashFiles(k, root, "go.mod", "go.sum"); err != nil {
					return err
				}
				rec.module(root)
			}
			var files []string
			for _, fs := range [][]string{p.GoFiles, p.SFiles, p.HFiles, p.SysoFiles, p.EmbedFiles} {
				files = append(files, fs...)
			}
			if err := hashFiles(k, p.Dir, files...); err != nil {
				return err
			}
			rec.pkg(p.Dir, p.EmbedFiles)
		default:
			v := m.Path + "@" + m.Version
			if m.Replace != nil {
				v += "=>" + m.Replace.Path + "@" + m.Replace.Version
			}
			k.add(v)
		}
	}
	return nil
}

// env2platform names the platform an environment of goEnv builds for.
func env2platform(env []string) string {
	var goos, goarch string
	for _, e := range env {
		if v, ok := strings.CutPrefix(e, "GOOS="); ok {
			goos = v
		}
		if v, ok := strings.CutPrefix(e, "GOARCH="); ok {
			goarch = v
		}
	}
	return goos + "/" + goarch
}

func hashFiles(k *key, dir string, files ...string) error {
	c := newContent()
	for _, f := range files {
		p := filepath.Join(dir, f)
		if _, err := os.Stat(p); err != nil {
			if os.IsNotExist(err) {
				k.add("missing", p)
				continue
			}
			return err
		}
		c.add(&entry{name: filepath.ToSlash(p), typ: '0', file: p})
	}
	return k.content(c)
}

// selfSource is Input.Self, listed: every file, sorted, and the hash of all
// of them. Test files too: nlx embeds its source, tests included, so the
// nlx built from it is the same only if they are.
type selfSource struct {
	files  []selfFile
	hash   string
	module string // the module path its go.mod declares
}

type selfFile struct {
	name string // slash path from the module root
}

// selfSrc lists and hashes in.Self once per build.
func (b *builder) selfSrc() (*selfSource, error) {
	if b.self != nil {
		return b.self, nil
	}
	if b.in.Self == nil {
		return nil, reason.New(reason.GoBuild, "this nlx carries no source to build an nlx layer from")
	}
	src := &selfSource{}
	h := sha256.New()
	buf := make([]byte, 64<<10)
	err := fs.WalkDir(b.in.Self, ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		f, err := b.in.Self.Open(name)
		if err != nil {
			return err
		}
		defer f.Close()
		fmt.Fprintf(h, "%d:%s\n%d:", len(name), name, info.Size())
		if n, err := io.CopyBuffer(h, f, buf); err != nil || n != info.Size() {
			return fmt.Errorf("%s: read %d of %d bytes: %v", name, n, info.Size(), err)
		}
		src.files = append(src.files, selfFile{name: name})
		return nil
	})
	if err != nil {
		return nil, reason.New(reason.GoBuild, "nlx's own source: %v", err)
	}
	if gomod, err := fs.ReadFile(b.in.Self, "go.mod"); err == nil {
		for _, line := range strings.Split(string(gomod), "\n") {
			if m, ok := strings.CutPrefix(strings.TrimSpace(line), "module "); ok {
				src.module = strings.Trim(strings.TrimSpace(m), `"`)
			}
		}
	}
	if src.module == "" {
		return nil, reason.New(reason.GoBuild, "nlx's own source has no go.mod naming its module")
	}
	src.hash = hex.EncodeToString(h.Sum(nil))
	b.self = src
	return src, nil
}

// isSelf reports whether pkg is a package of the module Self holds.
func (b *builder) isSelf(pkg string) bool {
	src, err := b.selfSrc()
	return err == nil && (pkg == src.module || strings.HasPrefix(pkg, src.module+"/"))
}

func (b *builder) selfHint() string {
	return "a config repository need not hold nlx's source: a layer {nlx: {}, dest: \"/usr/local/bin/nlx\"} puts this nlx in the image, built from the source it carries"
}

// write writes the files of src (all of them, or only go.mod), read from
// fsys, under dir. All of them must hash to src.hash: the layer is stored
// under a key holding it (an embedded source cannot change, another file
// system might).
func (src *selfSource) write(fsys fs.FS, dir string, onlyGoMod bool) error {
	h := sha256.New()
	for _, f := range src.files {
		if onlyGoMod && f.name != "go.mod" {
			continue
		}
		data, err := fs.ReadFile(fsys, f.name)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%d:%s\n%d:", len(f.name), f.name, len(data))
		h.Write(data)
		p := filepath.Join(dir, filepath.FromSlash(f.name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			return err
		}
	}
	if !onlyGoMod && hex.EncodeToString(h.Sum(nil)) != src.hash {
		return errors.New("the source changed since it was hashed")
	}
	return nil
}

// nlxLayer cross-compiles the nlx whose source Input.Self holds for p, in a
// module of its own written from that source (never the config directory's,
// never a workspace), with the flags of every Go layer: the same nlx source
// and Go toolchain give the same layer, and the same binary as a go layer
// building the command in a checkout of that source. Its cache key covers
// the Go version, the platform and every file of the source; its record
// lets a build with nothing changed find it without the go command.
func (b *builder) nlxLayer(ctx context.Context, l schema.Layer, p v1.Platform) (v1.Layer, bool, error) {
	// The record is found by the executable holding the source, when it
	// does (no hashing), else by the source's hash.
	var names []string
	if id := b.selfID(); id != "" {
		names = append(names, b.recordName("nlx", "executable", id, l.Dest, p.String()))
		if layer, ok := b.warm(names[0]); ok {
			return layer, true, nil
		}
	}
	src, err := b.selfSrc()
	if err != nil {
		return nil, false, err
	}
	names = append(names, b.recordName("nlx", "source", src.hash, l.Dest, p.String()))
	if layer, ok := b.warm(names[len(names)-1]); ok {
		if len(names) > 1 {
			b.copyRecord(names[len(names)-1], names[0])
		}
		return layer, true, nil
	}
	rec := b.newRecord()
	if err := os.MkdirAll(b.in.Cache.Dir, 0o755); err != nil {
		return nil, false, fmt.Errorf("layer cache: %w", err)
	}
	tmp, err := os.MkdirTemp(b.in.Cache.Dir, "nlx-")
	if err != nil {
		return nil, false, err
	}
	defer os.RemoveAll(tmp)
	dir := filepath.Join(tmp, "src")
	// go.mod alone first: its go line decides the toolchain go env reports.
	if err := src.write(b.in.Self, dir, true); err != nil {
		return nil, false, fmt.Errorf("nlx's own source: %w", err)
	}
	env := goEnv(p, "GOWORK=off")
	info, err := b.goEnvInfo(ctx, dir, env)
	if err != nil {
		return nil, false, err
	}
	k := newKey("nlx")
	k.add(src.module, selfMain, l.Dest, p.String(), b.in.Epoch.String(), src.hash)
	info.key(k)
	ks := k.String()
	if layer, ok := b.in.Cache.lookup(ks); ok {
		for _, n := range names {
			b.saveRecord(n, rec, ks)
		}
		return layer, true, nil
	}
	if err := src.write(b.in.Self, dir, false); err != nil {
		return nil, false, fmt.Errorf("nlx's own source: %w", err)
	}
	layer, err := b.goBuild(ctx, dir, env, selfMain, l.Dest, ks, p)
	if err != nil {
		return nil, false, goFailed(err, "go build of nlx (module %s) for %s", src.module, p)
	}
	for _, n := range names {
		b.saveRecord(n, rec, ks)
	}
	return layer, false, nil
}

// selfID identifies Self by the running executable it is embedded in: its
// path, size, mode, mtime, inode and change time. "" when Self is not
// embedded, or the executable cannot be found.
func (b *builder) selfID() string {
	if !b.in.SelfEmbedded || b.in.Self == nil {
		return ""
	}
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	st := stampOf(exe, false)
	if st.Size < 0 {
		return ""
	}
	return fmt.Sprintf("%s size %d mode %o mtime %d ctime %d ino %d", st.Path, st.Size, st.Mode, st.MTime, st.CTime, st.Ino)
}

// absConfigDir is the config directory, absolute: records name it.
func (b *builder) absConfigDir() string {
	if b.abs == "" {
		b.abs = b.in.ConfigDir
		if a, err := filepath.Abs(b.in.ConfigDir); err == nil {
			b.abs = a
		}
	}
	return b.abs
}
