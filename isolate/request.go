package isolate

import (
	"os"

	"github.com/nlx-dev/nlx/egress"
	"github.com/nlx-dev/nlx/internal/reason"
)

// Policy is a workspace's filesystem policy.
type Policy string

// The policies. TrustedLocal has the same boundary as WorkspaceWrite: what
// distinguishes it (the provider not asking before it acts) is the provider
// adapter's business, not the sandbox's. DangerFullAccess is the only policy
// without a filesystem boundary: the host's filesystem is visible read-write,
// every owner's credentials included. Compile marks such a spec with
// AnnotationBoundary = BoundaryNone.
const (
	ReadOnly         Policy = "read_only"
	WorkspaceWrite   Policy = "workspace_write"
	TrustedLocal     Policy = "trusted_local"
	DangerFullAccess Policy = "danger_full_access"
)

// Egress is a workspace's network policy.
type Egress string

// The egress policies: with EgressNone the process gets its own network
// namespace holding only a loopback device that is down. EgressInference
// has the same namespace, with its loopback up and the launch's egress
// proxy (Request.Proxy) reached through a bridge listening on it: the
// command runs under the bridge, with the proxy variables set.
const (
	EgressNone      Egress = "none"
	EgressInference Egress = "inference"
	EgressFull      Egress = "full"
)

// Backend names what carries a spec out.
type Backend string

// The backends. Auto picks bwrap where it works, else runc.
const (
	Auto  Backend = ""
	Bwrap Backend = "bwrap"
	Runc  Backend = "runc"
)

// Paths inside the sandbox. Under DangerFullAccess nothing is mounted at
// them: the process sees the real paths, which NLX_WORKSPACE and
// NLX_CREDENTIAL_HOME name in every policy.
const (
	WorkspacePath  = "/workspace"
	HomePath       = "/home/nlx"
	CredentialPath = "/home/nlx/.credentials"
	SkillsPath     = "/opt/nlx/skills"
	// ProviderHomePath is where Request.ProviderHome is bound (and what
	// NLX_PROVIDER_HOME names).
	ProviderHomePath = "/home/nlx/.provider"
	// ToolsSocketPath is where the launch's tool proxy socket is bound;
	// nlx itself, which runs the bridge to it, is at egress.HelperPath.
	ToolsSocketPath = "/run/nlx/tools.sock"
)

// Annotations Compile puts on every spec.
const (
	AnnotationWorkspace = "nlx.workspace"
	AnnotationPolicy    = "nlx.policy"
	AnnotationEgress    = "nlx.egress"
	// AnnotationBoundary is BoundaryFilesystem, or BoundaryNone for
	// DangerFullAccess.
	AnnotationBoundary = "nlx.policy.boundary"

	BoundaryFilesystem = "filesystem"
	BoundaryNone       = "none"
)

// Request is everything a launch needs, already resolved from the config:
// which workspace, which credential home, which skills, what to run.
type Request struct {
	// Workspace is the workspace's name, recorded with the process.
	Workspace string
	// WorkspaceRoot holds every workspace; WorkspaceDir is this one. Both
	// are absolute and WorkspaceDir must lie strictly inside WorkspaceRoot
	// once symlinks are resolved.
	WorkspaceRoot string
	WorkspaceDir  string

	Policy Policy
	Egress Egress
	// Proxy is the launch's egress proxy, required with EgressInference.
	Proxy *Proxy
	// Tools is the launch's tool proxy, nlx's MCP server: its socket is
	// bound at ToolsSocketPath and nlx, which runs the bridge to it, at
	// egress.HelperPath (ToolPaths says where the sandbox finds them).
	Tools *Proxy

	// CredentialRoot holds every owner's credential homes; CredentialHome
	// is the selected one, relative to it ("alice/claude"). No component
	// of CredentialHome may be a symlink. Both empty means no credential
	// home is mounted.
	CredentialRoot string
	CredentialHome string

	// Skills are the skill packages this workspace may use (already
	// filtered by team and owner), mounted read-only under SkillsPath.
	Skills []SkillMount

	// ProviderHome is a directory of this launch's own on the host (the
	// provider's private configuration), bound read-write at
	// ProviderHomePath; "" binds none. It must lie outside the workspace
	// and the credential root.
	ProviderHome string

	// Programs are directories holding the program that runs (a
	// provider's installation: its npm package tree), bound read-only at
	// their own paths so the command's absolute path works inside. Only
	// without RootFS: an image carries its own programs.
	Programs []string

	Limits Limits

	// Command is what runs, resolved against the sandbox's PATH.
	Command []string
	// Env holds the provider's own variables (CODEX_HOME, ...). They are
	// set after the allowlisted ones and may override them.
	Env map[string]string
	// HostEnv is the caller's environment (os.Environ()). Only the names in
	// the allowlist (LANG, LC_ALL, LC_CTYPE, TERM, TZ, COLORTERM, NO_COLOR)
	// are copied from it; the rest never reaches the sandbox.
	HostEnv []string

	// Backend is bwrap, runc, or Auto.
	Backend Backend
	// RootFS is an unpacked image root filesystem to run in (read-only).
	// When empty the sandbox root is empty and the host's system
	// directories are bound read-only into it.
	RootFS string

	// User is who the provider runs as. Required when nlx runs as root,
	// and never root itself: a file permission is a second wall behind
	// the mount namespace. When nlx is not root it can only be nlx's own
	// user (nil means that).
	User *User
}

// Proxy is where a launch reaches one of its proxies: the egress proxy
// (Request.Proxy) or the tool proxy (Request.Tools).
type Proxy struct {
	// Socket is the proxy's Unix socket on the host, in a directory only
	// root writes; bound at egress.SocketPath (or ToolsSocketPath).
	Socket string
	// Helper is the nlx executable that runs the bridge, bound read-only
	// at egress.HelperPath. In an image root it must be statically linked
	// (CGO_ENABLED=0): the image has no host libc.
	Helper string
}

// ToolPaths are where the sandbox of req finds nlx (which runs the tool
// bridge) and the tool proxy's socket: the paths they are bound at, or
// under danger_full_access, which binds nothing, their host paths.
func (req *Request) ToolPaths() (helper, socket string) {
	if req.Tools == nil {
		return "", ""
	}
	if req.Policy == DangerFullAccess {
		return req.Tools.Helper, req.Tools.Socket
	}
	return egress.HelperPath, ToolsSocketPath
}

// RunAs is the user and group the provider of req runs as: req.User, or
// nlx's own when it is nil.
func (req *Request) RunAs() (uid, gid int) {
	if req.User == nil {
		return os.Geteuid(), os.Getegid()
	}
	return int(req.User.UID), int(req.User.GID)
}

// User is a host user and group, by number.
type User struct {
	UID uint32 `json:"uid"`
	GID uint32 `json:"gid"`
}

// SkillMount is one skill package directory, mounted read-only at
// SkillsPath/Name.
type SkillMount struct {
	Name string
	Dir  string
}

// Limits are the cgroup limits of one launch. Zero means no limit for that
// resource; the memory and pids controllers are required either way, so
// that the process tree can be accounted for and killed.
type Limits struct {
	MemoryBytes int64
	CPU         float64 // cores
	Pids        int64
}

// Refusal codes. They are stable: the CLI maps them to exit codes and they
// appear in JSON output.
const (
// reason.InvalidRequest covers malformed requests: an empty command, an
// unknown egress, a bad skill name, negative limits.
// reason.ProviderUserRoot: the provider would run as root (no user given
// to an nlx running as root, or uid 0 given).
// reason.ProviderUserNoSwitch: nlx, not root, cannot run the provider
// as another user.
)

// piMemoryHint is the fix for the most common missing controller.
const piMemoryHint = "enable the memory controller: on a Raspberry Pi add `cgroup_enable=memory cgroup_memory=1` " +
	"to /boot/firmware/cmdline.txt (one line) and reboot"

// refuse is a launch nlx will not make: nothing was started.
func refuse(code reason.Code, format string, args ...any) *reason.Error {
	return reason.New(code, format, args...)
}
