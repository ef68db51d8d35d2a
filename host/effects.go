// Package host prepares this host for what is applied and launched: it
// carries out what applying a resource means on the host beyond the state:
// a new workspace gets its directory under the workspace root, a new
// connection its credential home under the credential root (empty: the
// operator signs the provider in), and a skill package is installed in the
// skill store, where launches mount it from (never from a config
// directory). Deleting or replacing a workspace leaves its directory in
// place: nlx never removes a workspace's files, nor a credential home (a
// connection deleted or moved elsewhere keeps its old home); a skill's old
// packages stay too, each under its own digest.
package host

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/nlx-dev/nlx/plan"
	"github.com/nlx-dev/nlx/schema"
)

// Effects provisions resources under a workspace root and a skill store.
// Close it when done.
type Effects struct {
	// WorkspaceRoot holds one directory per workspace.
	WorkspaceRoot string
	// CredentialRoot holds every connection's credential home, as
	// CredentialRoot/HOME (the connection's credentialHome).
	CredentialRoot string
	// SkillRoot holds installed skill packages, SkillRoot/NAME/HEX.
	SkillRoot string
	// ConfigDir is the config the plan was derived from, whose skill
	// packages are installed; each copy is checked against the digest the
	// applied spec names.
	ConfigDir string
	// Owner, when set, names who owns the workspace directories and
	// credential homes made (providers run as that user; see
	// ProviderUser), when nlx is root. Resolved at each one made.
	Owner func(ctx context.Context) (*Owner, error)
	Now   func() time.Time

	log      *os.File // the effects log, opened on the first effect
	resolved *Owner   // Owner's answer, asked once per apply
	credRoot *os.Root // the credential root, opened and checked at the first home
}

// Close closes the effects log.
func (h *Effects) Close() error {
	if h.credRoot != nil {
		h.credRoot.Close()
		h.credRoot = nil
	}
	if h.log == nil {
		return nil
	}
	err := h.log.Close()
	h.log = nil
	return err
}

// DefaultWorkspaceRoot is $NLX_WORKSPACE_ROOT, else "workspaces" beside the
// state file.
func DefaultWorkspaceRoot(statePath string) string {
	if r := os.Getenv("NLX_WORKSPACE_ROOT"); r != "" {
		return r
	}
	return filepath.Join(filepath.Dir(statePath), "workspaces")
}

// DefaultSkillRoot is $NLX_SKILL_ROOT, else "skills" beside the state file.
func DefaultSkillRoot(statePath string) string {
	if r := os.Getenv("NLX_SKILL_ROOT"); r != "" {
		return r
	}
	return filepath.Join(filepath.Dir(statePath), "skills")
}

// DefaultCredentialRoot is $NLX_CREDENTIAL_ROOT, else "credentials" beside
// the state file: every owner's credential homes.
func DefaultCredentialRoot(statePath string) string {
	if r := os.Getenv("NLX_CREDENTIAL_ROOT"); r != "" {
		return r
	}
	return filepath.Join(filepath.Dir(statePath), "credentials")
}

// DefaultWorkerRoot is $NLX_WORKER_ROOT, else "workers" beside the state
// file: the private homes of provider workers (a Codex worker's own
// CODEX_HOME), one per conversation.
func DefaultWorkerRoot(statePath string) string {
	if r := os.Getenv("NLX_WORKER_ROOT"); r != "" {
		return r
	}
	return filepath.Join(filepath.Dir(statePath), "workers")
}

// Dir is the directory of workspace name.
func (h *Effects) Dir(name string) string { return filepath.Join(h.WorkspaceRoot, name) }

// Has reports whether c has an effect on the host: creating a workspace
// (its directory is made), creating or changing a skill (its package is
// installed), creating or replacing a connection or moving its credential
// home (the home is made).
func (h *Effects) Has(c *plan.Change) bool {
	switch c.Kind {
	case schema.KindWorkspace:
		return c.Action == plan.Create
	case schema.KindSkill:
		return c.Action.Creates() || c.Action == plan.Update
	case schema.KindConnection:
		return makesCredentialHome(c)
	}
	return false
}

// Do carries out c's effect and notes it in the workspace root's effects
// log, the host's own record of what nlx did to it.
func (h *Effects) Do(ctx context.Context, c *plan.Change) error {
	if !h.Has(c) {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if !schema.ValidName(c.Name) {
		return fmt.Errorf("%s name %q cannot name a directory", c.Kind, c.Name)
	}
	if h.log == nil {
		// Searchable by the provider's user, who reaches its own
		// workspace through it; listable by nobody but root.
		if err := os.MkdirAll(h.WorkspaceRoot, 0o711); err != nil {
			return fmt.Errorf("create workspace root: %w", err)
		}
	}
	var dir string
	var err error
	switch c.Kind {
	case schema.KindSkill:
		dir, err = h.installSkill(c)
	case schema.KindConnection:
		dir, err = h.makeCredentialHome(ctx, c)
	default:
		dir, err = h.makeWorkspace(ctx, c)
	}
	if err != nil {
		return err
	}
	return h.note(c, dir)
}

// makeWorkspace creates the workspace's directory, owned by the provider's
// user; one already there is the workspace's, kept as it is.
func (h *Effects) makeWorkspace(ctx context.Context, c *plan.Change) (string, error) {
	owner, err := h.owner(ctx)
	if err != nil {
		return "", err
	}
	dir := h.Dir(c.Name)
	err = os.Mkdir(dir, 0o750)
	if errors.Is(err, fs.ErrExist) {
		return dir, nil
	}
	if err != nil {
		return "", fmt.Errorf("create workspace directory: %w", err)
	}
	if owner != nil {
		if err := os.Lchown(dir, int(owner.UID), int(owner.GID)); err != nil {
			return "", fmt.Errorf("workspace directory %s: %w", dir, err)
		}
	}
	return dir, nil
}

// owner is who owns what Do makes for providers: the provider's user when
// nlx is root, else nil (what nlx makes is its own user's).
func (h *Effects) owner(ctx context.Context) (*Owner, error) {
	if h.Owner == nil || os.Geteuid() != 0 {
		return nil, nil
	}
	if h.resolved == nil {
		o, err := h.Owner(ctx)
		if err != nil {
			return nil, err
		}
		h.resolved = o
	}
	return h.resolved, nil
}

func (h *Effects) note(c *plan.Change, dir string) error {
	now := time.Now
	if h.Now != nil {
		now = h.Now
	}
	if h.log == nil {
		log, err := os.OpenFile(filepath.Join(h.WorkspaceRoot, ".nlx-effects.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o640)
		if err != nil {
			return fmt.Errorf("effects log: %w", err)
		}
		h.log = log
	}
	// One write per line (O_APPEND): lines of concurrent writers never mix.
	if _, err := fmt.Fprintf(h.log, "%s %s %s %s\n", now().UTC().Format(time.RFC3339), c.Action, c.Address, dir); err != nil {
		return fmt.Errorf("effects log: %w", err)
	}
	return nil
}
