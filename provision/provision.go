// Package provision carries out what applying a resource means on the host
// beyond the state. Today that is one thing: a new workspace gets its
// directory under the workspace root. Deleting or replacing a workspace
// leaves its directory in place: nlx never removes a workspace's files.
package provision

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

// Host provisions resources under a workspace root. Close it when done.
type Host struct {
	// WorkspaceRoot holds one directory per workspace.
	WorkspaceRoot string
	Now           func() time.Time

	log *os.File // the effects log, opened on the first effect
}

// Close closes the effects log.
func (h *Host) Close() error {
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

// Dir is the directory of workspace name.
func (h *Host) Dir(name string) string { return filepath.Join(h.WorkspaceRoot, name) }

// Has reports whether c has an effect on the host: creating a workspace.
func (h *Host) Has(c *plan.Change) bool {
	return c.Kind == schema.KindWorkspace && c.Action == plan.Create
}

// Do creates the workspace's directory (and the root) and notes the effect
// in the root's effects log, the host's own record of what nlx did to it.
func (h *Host) Do(ctx context.Context, c *plan.Change) error {
	if !h.Has(c) {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if !schema.ValidName(c.Name) {
		return fmt.Errorf("workspace name %q cannot name a directory", c.Name)
	}
	if h.log == nil {
		if err := os.MkdirAll(h.WorkspaceRoot, 0o750); err != nil {
			return fmt.Errorf("create workspace root: %w", err)
		}
	}
	// A directory that already exists is the workspace's: keep it.
	dir := h.Dir(c.Name)
	if err := os.Mkdir(dir, 0o750); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("create workspace directory: %w", err)
	}
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
