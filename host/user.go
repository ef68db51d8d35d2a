package host

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"strconv"
	"strings"
	"sync"

	"github.com/nlx-dev/nlx/internal/reason"
)

// DefaultProviderUser is the host user provider processes run as, unless
// NLX_PROVIDER_USER names another. nlx (as root) creates it when it is
// missing: a system user with its own group, no home and no login shell.
const DefaultProviderUser = "nlx-provider"

// reason.ProviderUserMissing refuses a launch or a workspace whose provider
// user does not exist and that nlx may not create.

// Owner is a user and group by number.
type Owner struct {
	UID, GID uint32
	Name     string // as configured: a user name, or UID:GID
}

// creating serializes the creation of the default user within a process.
var creating sync.Mutex

// ProviderUser returns who providers run as on this host: NLX_PROVIDER_USER
// (a user name, or UID:GID numbers with no passwd entry needed), else
// DefaultProviderUser, created here when nlx is root and it is missing.
// Root is never a provider user.
func ProviderUser(ctx context.Context) (*Owner, error) {
	if o, err := FindProviderUser(); err != nil || o != nil {
		return o, err
	}
	creating.Lock()
	err := createSystemUser(ctx, DefaultProviderUser)
	creating.Unlock()
	if err != nil {
		return nil, err
	}
	o, err := FindProviderUser()
	if err == nil && o == nil {
		err = fmt.Errorf("provider user %s: created, but not found", DefaultProviderUser)
	}
	return o, err
}

// ProviderUserName is NLX_PROVIDER_USER, else DefaultProviderUser.
func ProviderUserName() string {
	if name := os.Getenv("NLX_PROVIDER_USER"); name != "" {
		return name
	}
	return DefaultProviderUser
}

// FindProviderUser is ProviderUser without creating anything: nil, nil
// when the default user is missing and nlx, as root, would create it.
func FindProviderUser() (*Owner, error) {
	name := ProviderUserName()
	o, err := lookupOwner(name)
	var unknown user.UnknownUserError
	switch {
	case errors.As(err, &unknown) && name == DefaultProviderUser && os.Geteuid() == 0:
		return nil, nil
	case errors.As(err, &unknown):
		return nil, &reason.Error{Code: reason.ProviderUserMissing, Msg: fmt.Sprintf("provider user %q does not exist; create it (useradd --system --user-group --no-create-home --shell /usr/sbin/nologin %s) or set NLX_PROVIDER_USER", name, name)}
	case err != nil:
		return nil, err
	case o.UID == 0 || o.GID == 0:
		return nil, &reason.Error{Code: reason.ProviderUserRoot, Msg: fmt.Sprintf("provider user %q is root's (%d:%d): providers never run as root", name, o.UID, o.GID)}
	}
	return o, nil
}

func lookupOwner(name string) (*Owner, error) {
	if u, g, ok := strings.Cut(name, ":"); ok {
		uid, err1 := strconv.ParseUint(u, 10, 32)
		gid, err2 := strconv.ParseUint(g, 10, 32)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("NLX_PROVIDER_USER %q: want a user name or UID:GID", name)
		}
		return &Owner{UID: uint32(uid), GID: uint32(gid), Name: name}, nil
	}
	u, err := user.Lookup(name)
	if err != nil {
		return nil, err
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("user %s has uid %q gid %q", name, u.Uid, u.Gid)
	}
	return &Owner{UID: uint32(uid), GID: uint32(gid), Name: name}, nil
}

// createSystemUser runs useradd (Debian's passwd package, on every Debian
// and Raspberry Pi OS host); one created meanwhile by another nlx is fine.
func createSystemUser(ctx context.Context, name string) error {
	out, err := exec.CommandContext(ctx, "useradd", "--system", "--user-group", "--no-create-home",
		"--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin", "--comment", "nlx provider processes", name).CombinedOutput()
	if err != nil {
		if _, lerr := user.Lookup(name); lerr == nil {
			return nil
		}
		return fmt.Errorf("create provider user %s: %v: %s", name, err, strings.TrimSpace(string(out)))
	}
	return nil
}
