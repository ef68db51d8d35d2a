package launch

import (
	"fmt"
	"path/filepath"

	"github.com/nlx-dev/nlx/host"
)

// HostFor is where this host keeps what launches mount, for the state at
// statePath: each root as the environment names it, else beside the state
// (host.DefaultWorkspaceRoot, DefaultCredentialRoot, DefaultSkillRoot).
func HostFor(statePath string) (Host, error) {
	var h Host
	for _, r := range []struct {
		dst *string
		src string
	}{
		{&h.WorkspaceRoot, host.DefaultWorkspaceRoot(statePath)},
		{&h.CredentialRoot, host.DefaultCredentialRoot(statePath)},
		{&h.SkillRoot, host.DefaultSkillRoot(statePath)},
		{&h.WorkerRoot, host.DefaultWorkerRoot(statePath)},
	} {
		abs, err := filepath.Abs(r.src)
		if err != nil {
			return h, fmt.Errorf("launch paths: %w", err)
		}
		*r.dst = abs
	}
	return h, nil
}
