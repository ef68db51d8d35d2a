package host

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/nlx-dev/nlx/plan"
	"github.com/nlx-dev/nlx/schema"
)

// SkillDir is where the package of skill name with digest ("sha256:HEX")
// is installed: root/NAME/HEX. Launches mount it from there.
func SkillDir(root, name, digest string) (string, error) {
	hex, ok := strings.CutPrefix(digest, "sha256:")
	if !ok || len(hex) != 64 || strings.Trim(hex, "0123456789abcdef") != "" || !schema.ValidName(name) {
		return "", fmt.Errorf("skill %s: digest %q is not sha256:HEX", name, digest)
	}
	return filepath.Join(root, name, hex), nil
}

// installSkill copies the skill package the change's spec names from the
// config into SkillRoot/NAME/HEX: into a private directory first, whose
// digest must be the spec's (so the copy is what the plan named, whatever
// happened to the config since it was loaded), then renamed into place.
// A package already installed under its digest is kept.
func (h *Effects) installSkill(c *plan.Change) (string, error) {
	var sk schema.Skill
	if err := json.Unmarshal(c.After, &sk); err != nil {
		return "", fmt.Errorf("read the skill's spec: %w", err)
	}
	if h.SkillRoot == "" || h.ConfigDir == "" {
		return "", errors.New("no skill store or config directory to install the package from")
	}
	dir, err := SkillDir(h.SkillRoot, c.Name, sk.Digest)
	if err != nil {
		return "", err
	}
	hexDigest := filepath.Base(dir)
	if _, err := os.Lstat(dir); err == nil {
		return dir, nil
	}
	parent := filepath.Join(h.SkillRoot, c.Name)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return "", fmt.Errorf("create skill store: %w", err)
	}
	src, err := os.OpenRoot(h.ConfigDir)
	if err != nil {
		return "", fmt.Errorf("open config %s: %w", h.ConfigDir, err)
	}
	defer src.Close()
	rel := path.Clean(filepath.ToSlash(sk.Path))
	tmpName := ".tmp-" + hexDigest[:12] + "-" + randomSuffix()
	tmp := filepath.Join(parent, tmpName)
	if err := copyTree(src, rel, tmp); err != nil {
		os.RemoveAll(tmp)
		return "", fmt.Errorf("install skill package %s: %w", rel, err)
	}
	store, err := os.OpenRoot(parent)
	if err != nil {
		os.RemoveAll(tmp)
		return "", err
	}
	got, err := schema.TreeDigest(store, tmpName)
	store.Close()
	if err != nil || got != sk.Digest {
		os.RemoveAll(tmp)
		if err == nil {
			err = fmt.Errorf("the package copied from %s has digest %s, but the plan names %s: the config changed under the apply", rel, got, sk.Digest)
		}
		return "", fmt.Errorf("install skill package %s: %w", rel, err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		os.RemoveAll(tmp)
		if _, serr := os.Lstat(dir); serr == nil {
			return dir, nil // another apply installed the same digest
		}
		return "", fmt.Errorf("install skill package %s: %w", rel, err)
	}
	return dir, nil
}

// copyTree copies the regular files and directories at rel under src into
// dst, readable by everyone (providers run as another user) and writable by
// nobody but root; anything else (a symbolic link, a device) is refused.
func copyTree(src *os.Root, rel, dst string) error {
	return fs.WalkDir(src.FS(), rel, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		out := filepath.Join(dst, filepath.FromSlash(strings.TrimPrefix(strings.TrimPrefix(p, rel), "/")))
		switch {
		case d.IsDir():
			if err := os.Mkdir(out, 0o755); err != nil {
				return err
			}
			return os.Chmod(out, 0o755) // whatever the umask

		case !d.Type().IsRegular():
			return fmt.Errorf("%s is not a regular file", p)
		}
		listed, err := d.Info()
		if err != nil {
			return err
		}
		// os.Root follows a link that stays inside it, O_NOFOLLOW or not:
		// the file opened must be the one listed, not a link swapped in
		// for it since (to another file of the config).
		in, err := src.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK, 0)
		if err != nil {
			return err
		}
		defer in.Close()
		if fi, err := in.Stat(); err != nil || !fi.Mode().IsRegular() || !os.SameFile(fi, listed) {
			return fmt.Errorf("%s is not the regular file listed (it changed while being copied)", p)
		}
		f, err := os.OpenFile(out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			return err
		}
		if _, err := io.Copy(f, in); err != nil {
			f.Close()
			return err
		}
		if err := f.Chmod(0o644); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	})
}

func randomSuffix() string {
	var b [6]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
