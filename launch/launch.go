// Package launch is the only way anything launches: it turns the applied
// state (the specs the last apply stored) and a launch's names into the
// isolate.Request that isolate carries out. It never reads a config
// directory: what runs on the host is what a reviewed plan applied. A
// resource that is not applied, or is held, is refused, as are the
// registry's rules broken in the applied state itself (a disabled
// provider, a connection of another workspace).
package launch

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/nlx-dev/nlx/host"
	"github.com/nlx-dev/nlx/images"
	"github.com/nlx-dev/nlx/internal/reason"
	"github.com/nlx-dev/nlx/isolate"
	"github.com/nlx-dev/nlx/reconcile"
	"github.com/nlx-dev/nlx/schema"
)

// Refusal codes of launches the applied state does not allow. Nothing is
// started.
const ()

// Applied is the applied state as a launch reads it.
type Applied interface {
	// AppliedSpec returns the applied spec and status of the resource at
	// address (kind.name); found is false when there is none.
	AppliedSpec(ctx context.Context, address string) (spec []byte, status reconcile.ResourceStatus, found bool, err error)
}

// Spec is a launch as a caller asks for it: the target and what to run.
type Spec struct {
	Target
	Command []string        // the program and its arguments
	HostEnv []string        // the caller's environment; the request's allowlist filters it
	Backend isolate.Backend // "" picks one
	// InImage runs the launch in the workspace's native image (unpacked
	// from Images for this host's platform) instead of a read-only view
	// of the host.
	InImage bool
	Images  *images.Store
}

// Prepare resolves s from the applied state and completes its request:
// the command, the environment, the backend, who it runs as (providers
// never run as root: an nlx running as root runs them as the host's
// provider user) and, in the image, its root file system.
func Prepare(ctx context.Context, st Applied, h Host, s Spec) (*Launch, error) {
	l, err := Resolve(ctx, st, h, s.Target)
	if err != nil {
		return nil, err
	}
	req := &l.Request
	if os.Geteuid() == 0 {
		u, err := host.ProviderUser(ctx)
		if err != nil {
			return nil, err
		}
		req.User = &isolate.User{UID: u.UID, GID: u.GID}
	}
	req.Command, req.HostEnv, req.Backend = s.Command, s.HostEnv, s.Backend
	if s.InImage {
		if l.ImageDigest == "" {
			return nil, refuse(reason.InvalidRequest, "workspace %s has no image", s.Workspace)
		}
		if s.Images == nil {
			return nil, refuse(reason.InvalidRequest, "workspace %s: no image store to unpack its image from", s.Workspace)
		}
		if req.RootFS, err = ImageRootFS(ctx, s.Images, l.ImageDigest); err != nil {
			return nil, err
		}
	}
	return l, nil
}

// Host is where this host keeps what launches mount.
type Host struct {
	WorkspaceRoot  string // one directory per workspace
	CredentialRoot string // every owner's credential homes
	// SkillRoot holds the skill packages apply installed, as
	// SkillRoot/NAME/HEX where HEX is the package digest's.
	SkillRoot string
	// WorkerRoot holds provider workers' private homes.
	WorkerRoot string
}

// Target names what to launch.
type Target struct {
	Workspace  string
	Connection string
}

// Launch is a launch resolved from the applied state.
type Launch struct {
	Request isolate.Request
	// ImageDigest is the native image the workspace is pinned to ("" when
	// it has none): a launch in the image runs exactly that digest.
	ImageDigest string
	Provider    string // the connection's provider
	ProviderCmd []string

	// The applied specs the launch was resolved from, for the turn's
	// binding and its revalidation.
	WorkspaceSpec  schema.Workspace
	ConnectionSpec schema.Connection
	ProviderSpec   schema.Provider
}

func refuse(code reason.Code, format string, args ...any) *reason.Error {
	return reason.New(code, format, args...)
}

// Resolve reads the target's workspace, connection, provider and skills
// from the applied state and returns the launch, or a refusal. The request
// has no command, host environment or backend yet: the caller's.
func Resolve(ctx context.Context, st Applied, host Host, t Target) (*Launch, error) {
	var w schema.Workspace
	if err := read(ctx, st, schema.KindWorkspace, t.Workspace, &w); err != nil {
		return nil, err
	}
	var c schema.Connection
	if err := read(ctx, st, schema.KindConnection, t.Connection, &c); err != nil {
		return nil, err
	}
	switch {
	case c.Workspace != t.Workspace:
		return nil, refuse(reason.ConnectionWorkspace, "connection %s belongs to workspace %s, not %s", t.Connection, c.Workspace, t.Workspace)
	case c.Scope == "personal" && w.Kind == "team":
		return nil, refuse(reason.PersonalOnTeam, "personal connection %s cannot run in team workspace %s", t.Connection, t.Workspace)
	}
	var p schema.Provider
	if err := read(ctx, st, schema.KindProvider, c.Provider, &p); err != nil {
		return nil, err
	}
	switch {
	case !p.Enabled():
		return nil, refuse(reason.ProviderDisabled, "connection %s uses provider %s, which the applied state has %s", t.Connection, c.Provider, orDisabled(p.Status))
	case p.Feature != "":
		// No feature flag can be turned on yet: a provider behind one
		// never runs.
		return nil, refuse(reason.ProviderFeatureOff, "provider %s runs only with feature flag %q on, and this host turns no feature flag on", c.Provider, p.Feature)
	}
	// The bytes schema checked the config's size with; an applied spec
	// that breaks the rule (only a state edited by hand) is refused.
	mem, err := w.Limits.MemoryBytes()
	if err != nil {
		return nil, refuse(reason.InvalidAppliedSpec, "workspace %s: %v", t.Workspace, err)
	}
	// To isolate a limit of 0 is none; the schema has every workspace capped.
	if !(w.Limits.CPU > 0) || w.Limits.Pids < 1 {
		return nil, refuse(reason.InvalidAppliedSpec, "workspace %s: cpu %v and pids %d must both be positive limits", t.Workspace, w.Limits.CPU, w.Limits.Pids)
	}
	l := &Launch{
		ImageDigest:    w.ImageDigest,
		Provider:       c.Provider,
		ProviderCmd:    slices.Clone(p.Command),
		WorkspaceSpec:  w,
		ConnectionSpec: c,
		ProviderSpec:   p,
		Request: isolate.Request{
			Workspace:      t.Workspace,
			WorkspaceRoot:  host.WorkspaceRoot,
			WorkspaceDir:   filepath.Join(host.WorkspaceRoot, t.Workspace),
			Policy:         isolate.Policy(w.Policy),
			Egress:         isolate.Egress(w.Network.Egress),
			CredentialRoot: host.CredentialRoot,
			CredentialHome: c.CredentialHome,
			Limits:         isolate.Limits{MemoryBytes: mem, CPU: w.Limits.CPU, Pids: w.Limits.Pids},
			Env:            map[string]string{},
		},
	}
	for k, v := range p.Env {
		l.Request.Env[k] = v
	}
	if ph, ok := providerHomes[p.Kind]; ok {
		l.Request.Env[ph.env] = isolate.CredentialPath
	}
	for _, name := range w.Skills {
		var sk schema.Skill
		if err := read(ctx, st, schema.KindSkill, name, &sk); err != nil {
			return nil, err
		}
		if sk.Scope == "personal" && sk.Owner != c.Owner {
			continue // another owner's personal skill stays invisible
		}
		dir, err := SkillDir(host.SkillRoot, name, sk.Digest)
		if err != nil {
			return nil, err
		}
		l.Request.Skills = append(l.Request.Skills, isolate.SkillMount{Name: name, Dir: dir})
	}
	return l, nil
}

// SkillDir is where apply installs the package of skill name with digest
// ("sha256:HEX"): SkillRoot/NAME/HEX (host.SkillDir).
func SkillDir(root, name, digest string) (string, error) {
	if root == "" {
		return "", refuse(reason.SkillNotInstalled, "skill %s: no skill store on this host", name)
	}
	dir, err := host.SkillDir(root, name, digest)
	if err != nil {
		return "", refuse(reason.InvalidAppliedSpec, "%v", err)
	}
	return dir, nil
}

// read decodes the applied spec of kind.name into v, refusing what is not
// applied or is held.
func read(ctx context.Context, st Applied, kind schema.Kind, name string, v any) error {
	addr := string(kind) + "." + name
	spec, status, found, err := st.AppliedSpec(ctx, addr)
	switch {
	case err != nil:
		return fmt.Errorf("read %s from the state: %w", addr, err)
	case !found:
		return refuse(reason.NotApplied, "%s is not in the applied state: plan and apply it first", addr)
	case status == reconcile.StatusHeld:
		return refuse(reason.Held, "%s is held (an import under review): an admin's approved plan releases it", addr)
	case status != reconcile.StatusActive:
		return refuse(reason.InvalidAppliedSpec, "%s has status %q in the state", addr, status)
	}
	if err := json.Unmarshal(spec, v); err != nil {
		return refuse(reason.InvalidAppliedSpec, "%s: applied spec: %v", addr, err)
	}
	return nil
}

func orDisabled(status string) string {
	if status == "" {
		return "disabled"
	}
	return status
}

// AppliedConnection reads the applied connection name, refusing one that
// is not applied or is held.
func AppliedConnection(ctx context.Context, st Applied, name string) (schema.Connection, error) {
	var c schema.Connection
	err := read(ctx, st, schema.KindConnection, name, &c)
	return c, err
}
