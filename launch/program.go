package launch

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/nlx-dev/nlx/internal/reason"
)

// Program is a provider's program as found on this host.
type Program struct {
	// Path is the program file, absolute, every symlink resolved: what
	// runs inside the sandbox (bound there at the same path).
	Path string
	// Dir is its installation, bound read-only: the outermost node_modules
	// directory above Path for an npm package (its optional platform
	// packages sit beside it: Codex's native binary is one), else the
	// nearest directory above Path holding a package manifest
	// (package.json), else Path's own directory.
	Dir string
	// Identity is the device, inode, size and modification time of Path and
	// of its package manifest: a program whose identity changed is probed
	// for its version again.
	Identity string
}

// FindProgram resolves a provider registration's command name: an absolute
// path, or a name looked up in path (a PATH value) at launch. A name with a
// slash that is not absolute is refused: it would be relative to wherever
// nlx happens to run.
func FindProgram(name, path string) (*Program, error) {
	var file string
	switch {
	case filepath.IsAbs(name):
		file = name
	case strings.Contains(name, "/"):
		return nil, reason.New(reason.ProviderNotFound, "provider command %q is relative: give an absolute path or a name found on PATH", name)
	default:
		for _, dir := range filepath.SplitList(path) {
			if dir == "" || !filepath.IsAbs(dir) {
				continue // an empty or relative PATH entry names the working directory
			}
			if p := filepath.Join(dir, name); executable(p) {
				file = p
				break
			}
		}
		if file == "" {
			return nil, reason.New(reason.ProviderNotFound, "provider command %q is not on PATH (%s)", name, path)
		}
	}
	real, err := filepath.EvalSymlinks(file)
	if err != nil || !executable(real) {
		return nil, reason.New(reason.ProviderNotFound, "provider command %s is not an executable file on this host", file)
	}
	p := &Program{Path: real, Dir: filepath.Dir(real)}
	manifest := ""
	for dir := filepath.Dir(real); dir != "/"; dir = filepath.Dir(dir) {
		if manifest == "" {
			if _, err := os.Stat(filepath.Join(dir, "package.json")); err == nil {
				manifest = filepath.Join(dir, "package.json")
				p.Dir = dir
			}
		}
		if filepath.Base(dir) == "node_modules" {
			p.Dir = dir // the outermost wins
		}
	}
	p.Identity = identity(real)
	if manifest != "" {
		p.Identity += "+" + identity(manifest)
	}
	return p, nil
}

func executable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

func identity(p string) string {
	fi, err := os.Stat(p)
	if err != nil {
		return "absent"
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Sprintf("%d:%d", fi.Size(), fi.ModTime().UnixNano())
	}
	return fmt.Sprintf("%d:%d:%d:%d", st.Dev, st.Ino, fi.Size(), fi.ModTime().UnixNano())
}

// LookupPath is PATH in env (a list of NAME=VALUE), or the default a shell
// would use.
func LookupPath(env []string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(env[i], "PATH="); ok {
			return v
		}
	}
	return "/usr/local/bin:/usr/bin:/bin"
}
