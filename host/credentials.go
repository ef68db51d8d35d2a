package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/nlx-dev/nlx/internal/reason"
	"github.com/nlx-dev/nlx/plan"
	"github.com/nlx-dev/nlx/schema"
)

// A connection's credential home is CredentialRoot/HOME, HOME being the
// connection's credentialHome, a relative path. Apply makes it so that the
// launch checks (isolate) pass: the credential root and every directory
// between it and the home root's (when nlx is root), mode 0711 (the
// provider's user may search them, nobody but root list or change them:
// no provider can swap another's home), and the home itself mode 0700,
// the provider's user's. What is already there is kept as it is, never
// chmodded, chowned, emptied or removed: a home may hold a signed-in
// provider's tokens, and its owner may have chosen its modes.

// Modes of what apply makes under the credential root.
const (
	credentialDirMode  os.FileMode = 0o711 // the root and the directories above a home
	credentialHomeMode os.FileMode = 0o700 // a home
)

// CredentialHomePath is where the credential home rel lives under root.
// rel must be a clean relative path that stays below root (no "..", no
// "." component, not absolute, not the root itself); anything else is
// credential_home_unsafe, as it is at launch.
func CredentialHomePath(root, rel string) (string, error) {
	switch {
	case root == "":
		return "", reason.New(reason.CredentialHomeUnsafe, "credential home %q: no credential root", rel)
	case rel == "" || rel == ".":
		return "", reason.New(reason.CredentialHomeUnsafe, "no credential home: the credential root itself is never a connection's")
	case !filepath.IsLocal(rel) || filepath.Clean(rel) != rel:
		return "", reason.New(reason.CredentialHomeUnsafe, "credential home %q must be a clean path below the credential root (not absolute, no . or ..)", rel)
	}
	return filepath.Join(root, rel), nil
}

// makesCredentialHome reports whether a connection change makes a
// credential home: a connection created or replaced, or updated to another
// credentialHome. (A home removed by hand is not made again by an apply
// that does not change its connection; nlx doctor reports it.)
func makesCredentialHome(c *plan.Change) bool {
	switch {
	case c.Kind != schema.KindConnection:
		return false
	case c.Action.Creates():
		return true
	case c.Action != plan.Update:
		return false
	}
	var before, after schema.Connection
	if json.Unmarshal(c.Before, &before) != nil || json.Unmarshal(c.After, &after) != nil {
		return true // Do says why it cannot
	}
	return before.CredentialHome != after.CredentialHome
}

// makeCredentialHome creates the connection's credential home under
// CredentialRoot, through an os.Root so that nothing made leaves it, and
// with no symbolic link on the way (a launch refuses a home reached
// through one). A home already there is kept as it is.
func (h *Effects) makeCredentialHome(ctx context.Context, c *plan.Change) (string, error) {
	var conn schema.Connection
	if err := json.Unmarshal(c.After, &conn); err != nil {
		return "", fmt.Errorf("read the connection's spec: %w", err)
	}
	dir, err := CredentialHomePath(h.CredentialRoot, conn.CredentialHome)
	if err != nil {
		return "", err
	}
	owner, err := h.owner(ctx)
	if err != nil {
		return "", err
	}
	root, err := h.credentialRoot(dir)
	if err != nil {
		return "", err
	}
	parts := strings.Split(filepath.ToSlash(conn.CredentialHome), "/")
	for i := range parts {
		p := filepath.Join(parts[:i+1]...)
		last := i == len(parts)-1
		mode := credentialDirMode
		if last {
			mode = credentialHomeMode
		}
		fi, err := root.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) {
			err = root.Mkdir(p, mode)
			if err == nil {
				// The mode whatever the umask. Nobody but root can
				// swap p meanwhile: every directory above it was
				// checked to be root's (foundDir).
				if err := root.Chmod(p, mode); err != nil {
					return "", fmt.Errorf("credential home %s: %w", dir, err)
				}
				if last && owner != nil {
					if err := root.Lchown(p, int(owner.UID), int(owner.GID)); err != nil {
						return "", fmt.Errorf("credential home %s: %w", dir, err)
					}
				}
				continue
			}
			if errors.Is(err, fs.ErrExist) {
				fi, err = root.Lstat(p) // made meanwhile: check it as found
			}
		}
		if err != nil {
			return "", fmt.Errorf("credential home %s: %w", dir, err)
		}
		if err := foundDir(fi, filepath.Join(h.CredentialRoot, p), dir, !last); err != nil {
			return "", err
		}
	}
	return dir, nil
}

// credentialRoot opens the credential root, made and checked once per
// apply: every home is made through that one handle.
func (h *Effects) credentialRoot(home string) (*os.Root, error) {
	if h.credRoot != nil {
		return h.credRoot, nil
	}
	if err := makeDir(h.CredentialRoot, credentialDirMode); err != nil {
		return nil, fmt.Errorf("create credential root: %w", err)
	}
	root, err := os.OpenRoot(h.CredentialRoot)
	if err != nil {
		return nil, fmt.Errorf("open credential root: %w", err)
	}
	if fi, err := root.Stat("."); err != nil {
		root.Close()
		return nil, fmt.Errorf("credential root: %w", err)
	} else if err := foundDir(fi, h.CredentialRoot, home, true); err != nil {
		root.Close()
		return nil, err
	}
	h.credRoot = root
	return root, nil
}

// foundDir accepts a directory found on the way to a credential home, as
// it is; a symbolic link or anything else is credential_home_unsafe, and
// so is a directory above a home (or the credential root) that someone
// other than root (or nlx's own user) could change: whoever can could
// swap what apply makes in it, and a launch refuses it
// (bind_source_unsafe).
func foundDir(fi fs.FileInfo, p, home string, above bool) error {
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		return reason.New(reason.CredentialHomeUnsafe, "credential home %s: %s is a symbolic link; nlx makes nothing through one (a launch refuses it too)", home, p)
	case !fi.IsDir():
		return reason.New(reason.CredentialHomeUnsafe, "credential home %s: %s is not a directory", home, p)
	case !above:
		return nil
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return reason.New(reason.CredentialHomeUnsafe, "credential home %s: cannot tell who owns %s", home, p)
	}
	if euid := uint32(os.Geteuid()); st.Uid != 0 && st.Uid != euid {
		return reason.New(reason.CredentialHomeUnsafe, "credential home %s: %s belongs to uid %d, who could swap what it holds; make it root's (a launch refuses it too)", home, p, st.Uid)
	}
	if st.Mode&0o022 != 0 && st.Mode&syscall.S_ISVTX == 0 {
		return reason.New(reason.CredentialHomeUnsafe, "credential home %s: %s is writable by group or others (mode %o), who could swap what it holds (a launch refuses it too)", home, p, st.Mode&0o7777)
	}
	return nil
}

// makeDir makes dir, and the directories above it that are missing, with
// mode (dir itself whatever the umask); one already there is kept as it
// is.
func makeDir(dir string, mode os.FileMode) error {
	if _, err := os.Stat(dir); err == nil {
		return nil
	}
	if err := os.MkdirAll(dir, mode); err != nil {
		return err
	}
	return os.Chmod(dir, mode)
}

// HomeState is what a connection's credential home holds, as nlx doctor
// reports it.
type HomeState string

// The states of a credential home.
const (
	HomeMissing  HomeState = "missing"    // not there: a launch is refused (credential_home_missing)
	HomeEmpty    HomeState = "empty"      // there and empty: the provider is not signed in
	HomeSignedIn HomeState = "has_files"  // there with files: signed in, as far as nlx can tell
	HomeUnsafe   HomeState = "unsafe"     // a symlink, not a directory, outside the root: a launch is refused
	HomeUnread   HomeState = "unreadable" // nlx could not read it
)

// InspectCredentialHome reports the state of the credential home rel
// under root, and where it is, without following any symbolic link below
// root and without changing anything.
func InspectCredentialHome(root, rel string) (string, HomeState, error) {
	dir, err := CredentialHomePath(root, rel)
	if err != nil {
		return dir, HomeUnsafe, err
	}
	r, err := os.OpenRoot(root)
	if errors.Is(err, fs.ErrNotExist) {
		return dir, HomeMissing, nil
	}
	if err != nil {
		return dir, HomeUnread, err
	}
	defer r.Close()
	if fi, err := r.Stat("."); err != nil {
		return dir, HomeUnread, err
	} else if err := foundDir(fi, root, dir, true); err != nil {
		return dir, HomeUnsafe, err
	}
	parts := strings.Split(filepath.ToSlash(rel), "/")
	for i := range parts {
		p := filepath.Join(parts[:i+1]...)
		fi, err := r.Lstat(p)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return dir, HomeMissing, nil
		case err != nil:
			return dir, HomeUnread, err
		}
		if err := foundDir(fi, filepath.Join(root, p), dir, i < len(parts)-1); err != nil {
			return dir, HomeUnsafe, err
		}
	}
	f, err := r.Open(rel)
	if err != nil {
		return dir, HomeUnread, err
	}
	defer f.Close()
	if _, err := f.ReadDir(1); errors.Is(err, io.EOF) {
		return dir, HomeEmpty, nil
	} else if err != nil {
		return dir, HomeUnread, err
	}
	return dir, HomeSignedIn, nil
}
