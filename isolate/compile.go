package isolate

import (
	"debug/elf"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/nlx-dev/nlx/egress"
	"github.com/nlx-dev/nlx/internal/reason"
	"github.com/nlx-dev/nlx/isolate/seccomp"
)

// systemDirs are bound read-only when the sandbox has no image root.
var systemDirs = []string{"/usr", "/bin", "/lib", "/lib64", "/sbin", "/etc"}

// envAllowlist names the only variables taken from Request.HostEnv.
var envAllowlist = []string{"LANG", "LC_ALL", "LC_CTYPE", "TERM", "TZ", "COLORTERM", "NO_COLOR"}

// sandboxPATH is fixed: the caller's PATH names host directories that do
// not exist inside.
const sandboxPATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// emptyRoot is the spec's root when there is no image: relative to a runc
// bundle (which creates it empty); bwrap starts from an empty tmpfs anyway.
const emptyRoot = "rootfs"

// resolvConfPath is the host's resolver configuration (a variable for
// tests).
var resolvConfPath = "/etc/resolv.conf"

// protectedEntries stay read-only inside a writable workspace: git history
// and nlx's own files are not the provider's to rewrite.
var protectedEntries = []string{".git", ".nlx"}

var skillName = regexp.MustCompile(`^[a-z0-9-]{1,64}$`)

// minPids leaves room for bubblewrap's two processes, the thread that
// forks it, and a shell.
const minPids = 8

// The kernel paths a sandbox may not write or read: runc's and Docker's
// defaults (the /sys ones matter under danger_full_access, the only policy
// that mounts /sys, read-only). Every backend enforces each of them.
var (
	maskedPaths = []string{
		"/proc/acpi", "/proc/asound", "/proc/interrupts", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
		"/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi",
		"/sys/firmware", "/sys/devices/virtual/powercap",
	}
	readonlyPaths = []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"}
)

// Compile turns req into one OCI runtime-spec that every backend carries
// out. It touches the filesystem only to resolve and check paths. A request
// it cannot prove safe is refused with a *reason.Error.
//
// The spec has no cgroupsPath: Launch adds it, naming the launch's cgroup.
// Swap is not in the spec either: the launch cgroup grants none (memsw on
// v1, memory.swap.max on v2) where the kernel accounts swap, and runc would
// fail on kernels that do not.
func Compile(req Request) (*specs.Spec, error) {
	s, h, err := compile(req)
	h.close()
	return s, err
}

// compile is Compile, also returning the open handles of the spec's bind
// sources that a provider could change (the workspace, what is protected
// in it, the credential home, skills, the image root), by destination: a
// backend binds those, never their paths again. The caller closes them.
func compile(req Request) (*specs.Spec, handles, error) {
	r, err := check(req)
	if err != nil {
		return nil, nil, err
	}
	danger := req.Policy == DangerFullAccess
	h := handles{}
	keep := func(dest string, f *os.File) {
		if f != nil {
			h[dest] = f
		}
	}
	defer r.close()

	s := &specs.Spec{
		Version:  specs.Version,
		Hostname: "nlx",
		Root:     &specs.Root{Path: emptyRoot, Readonly: true},
		Annotations: map[string]string{
			AnnotationWorkspace: req.Workspace,
			AnnotationPolicy:    string(req.Policy),
			AnnotationEgress:    string(req.Egress),
			AnnotationBoundary:  BoundaryFilesystem,
		},
		Process: &specs.Process{
			User: r.user,
			Args: slices.Clone(req.Command),
			Cwd:  WorkspacePath,
			// Empty, not nil: runc keeps every capability when the field
			// is absent.
			Capabilities:    &specs.LinuxCapabilities{},
			NoNewPrivileges: true,
		},
		Linux: &specs.Linux{
			Namespaces: []specs.LinuxNamespace{
				{Type: specs.PIDNamespace}, {Type: specs.IPCNamespace},
				{Type: specs.UTSNamespace}, {Type: specs.MountNamespace},
			},
			Resources:     resources(req.Limits),
			MaskedPaths:   slices.Clone(maskedPaths),
			ReadonlyPaths: slices.Clone(readonlyPaths),
		},
	}
	if req.Egress == EgressNone || req.Egress == EgressInference {
		s.Linux.Namespaces = append(s.Linux.Namespaces, specs.LinuxNamespace{Type: specs.NetworkNamespace})
	}
	if req.Egress == EgressInference {
		// The command runs under the bridge, on the sandbox's loopback,
		// which runc leaves down: a hook of nlx's own brings it up
		// (bubblewrap does so itself).
		s.Process.Args = append([]string{egress.HelperPath, egress.BridgeMode, egress.BridgeAddr, egress.SocketPath, "--"}, s.Process.Args...)
		s.Hooks = &specs.Hooks{CreateRuntime: []specs.Hook{{Path: r.helper, Args: []string{r.helper, egress.LoopbackMode}, Timeout: intPtr(10)}}}
	}
	if req.RootFS != "" {
		s.Root.Path = r.rootfs
	}
	if s.Linux.Seccomp, err = seccomp.Profile(); err != nil {
		return nil, nil, refuse(reason.SeccompUnavailable, "%v", err)
	}

	if req.RootFS != "" {
		keep("/", r.take(&r.rootfsF))
	}
	if danger {
		s.Annotations[AnnotationBoundary] = BoundaryNone
		s.Root.Readonly = false
		s.Process.Cwd = r.workspace
		// The host's own top-level entries, read-write, replace the
		// boundary. /proc, /dev and /sys are not the host's: the first
		// two are the sandbox's own and /sys is read-only.
		for _, name := range r.topLevel {
			s.Mounts = append(s.Mounts, bind("/"+name, "/"+name, false))
		}
		s.Mounts = append(s.Mounts, kernelMounts()...)
		s.Mounts = append(s.Mounts, bind("/sys", "/sys", true))
	} else {
		s.Mounts = append(s.Mounts, kernelMounts()...)
		if req.RootFS == "" {
			for _, d := range r.systemDirs {
				s.Mounts = append(s.Mounts, bind(d, d, true))
			}
			if req.Egress == EgressFull && r.resolvConf != "" {
				// /etc/resolv.conf points outside /etc (systemd-resolved:
				// into /run): bind just that file where the link expects it.
				s.Mounts = append(s.Mounts, bind(r.resolvConf, r.resolvConf, true))
				keep(r.resolvConf, r.take(&r.resolvConfF))
			}
		}
		home := tmpfs(HomePath, "700")
		// The provider's home is its own (runc mounts it as root).
		home.Options = append(home.Options, fmt.Sprintf("uid=%d", r.user.UID), fmt.Sprintf("gid=%d", r.user.GID))
		s.Mounts = append(s.Mounts,
			tmpfs("/tmp", "1777"),
			tmpfs("/home", "755"),
			home,
			tmpfs("/root", "700"),
			bind(r.workspace, WorkspacePath, req.Policy == ReadOnly),
		)
		if req.RootFS != "" && len(r.skills) > 0 {
			// Where bubblewrap, as the provider's user, can make the
			// skills' mount points: not in the image's own /opt.
			s.Mounts = append(s.Mounts, tmpfs(SkillsPath, "755"))
		}
		keep(WorkspacePath, r.take(&r.workspaceF))
		// What is protected inside the writable workspace is made
		// read-only where it is inside the sandbox, never bound from its
		// host path, which a provider of the same workspace may swap for
		// a symlink at any time: runc resolves a read-only path inside the
		// container's root, bubblewrap binds the handle opened here and
		// checks the mounted inode is its.
		for i, p := range r.protected {
			s.Linux.ReadonlyPaths = append(s.Linux.ReadonlyPaths, p.dst)
			keep(p.dst, r.take(&r.protected[i].f))
		}
		if r.credHome != "" {
			// Read-write under every policy: providers refresh their
			// tokens in place.
			s.Mounts = append(s.Mounts, bind(r.credHome, CredentialPath, false))
			keep(CredentialPath, r.take(&r.credHomeF))
		}
		for i, sk := range r.skills {
			dst := SkillsPath + "/" + sk.Name
			s.Mounts = append(s.Mounts, bind(sk.Dir, dst, true))
			keep(dst, r.take(&r.skillFs[i]))
		}
		for i, dir := range r.programs {
			s.Mounts = append(s.Mounts, bind(dir, dir, true))
			keep(dir, r.take(&r.programFs[i]))
		}
		if r.providerHome != "" {
			s.Mounts = append(s.Mounts, bind(r.providerHome, ProviderHomePath, false))
			keep(ProviderHomePath, r.take(&r.providerHomeF))
		}
		// The sockets live in directories only root writes (so a path is
		// safe); nlx itself is bound by its handle, once.
		if req.Egress == EgressInference {
			s.Mounts = append(s.Mounts, bind(r.socket, egress.SocketPath, false))
		}
		if r.toolsSocket != "" {
			s.Mounts = append(s.Mounts, bind(r.toolsSocket, ToolsSocketPath, false))
		}
		if r.helper != "" {
			s.Mounts = append(s.Mounts, bind(r.helper, egress.HelperPath, true))
			keep(egress.HelperPath, r.take(&r.helperF))
		}
	}
	s.Process.Env = environment(req, r)
	return s, h, nil
}

func kernelMounts() []specs.Mount {
	return []specs.Mount{
		{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "noexec", "nodev"}},
		{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
		{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}},
		{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
	}
}

func bind(src, dst string, ro bool) specs.Mount {
	mode := "rw"
	if ro {
		mode = "ro"
	}
	return specs.Mount{Destination: dst, Type: "bind", Source: src, Options: []string{"rbind", mode, "nosuid", "nodev"}}
}

func tmpfs(dst, mode string) specs.Mount {
	return specs.Mount{Destination: dst, Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "nodev", "mode=" + mode}}
}

func resources(l Limits) *specs.LinuxResources {
	res := &specs.LinuxResources{
		// Deny every device; runc then allows only its default nodes
		// (null, zero, full, random, urandom, tty, ptmx).
		Devices: []specs.LinuxDeviceCgroup{{Allow: false, Access: "rwm"}},
	}
	if l.MemoryBytes > 0 {
		m := l.MemoryBytes
		res.Memory = &specs.LinuxMemory{Limit: &m}
	}
	if l.CPU > 0 {
		period := uint64(100000)
		quota := int64(math.Ceil(l.CPU * float64(period)))
		// The kernel refuses quotas under 1ms.
		quota = max(quota, 1000)
		res.CPU = &specs.LinuxCPU{Quota: &quota, Period: &period}
	}
	if l.Pids > 0 {
		p := l.Pids
		res.Pids = &specs.LinuxPids{Limit: &p}
	}
	return res
}

func environment(req Request, r *resolved) []string {
	env := map[string]string{
		"PATH":          sandboxPATH,
		"HOME":          HomePath,
		"TMPDIR":        "/tmp",
		"NLX_WORKSPACE": WorkspacePath,
	}
	host := map[string]string{}
	for _, kv := range req.HostEnv {
		if k, v, ok := strings.Cut(kv, "="); ok {
			host[k] = v
		}
	}
	for _, k := range envAllowlist {
		if v, ok := host[k]; ok {
			env[k] = v
		}
	}
	if r.credHome != "" {
		env["NLX_CREDENTIAL_HOME"] = CredentialPath
	}
	if r.providerHome != "" {
		env["NLX_PROVIDER_HOME"] = ProviderHomePath
	}
	if req.Policy == DangerFullAccess {
		// No boundary: the real paths, and the caller's home.
		env["NLX_WORKSPACE"] = r.workspace
		if r.credHome != "" {
			env["NLX_CREDENTIAL_HOME"] = r.credHome
		}
		if r.providerHome != "" {
			env["NLX_PROVIDER_HOME"] = r.providerHome
		}
		env["HOME"] = "/"
		if h, ok := host["HOME"]; ok {
			env["HOME"] = h
		}
	}
	for k, v := range req.Env {
		env[k] = v
	}
	if req.Egress == EgressInference {
		// After the provider's own: nothing may point it elsewhere.
		for k, v := range egress.ProxyEnv() {
			env[k] = v
		}
	}
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	slices.Sort(out)
	return out
}

// resolved holds the request's paths with every symlink resolved, so that
// the spec names what was checked.
type resolved struct {
	workspace  string
	protected  []protectedMount
	credHome   string
	skills     []SkillMount
	rootfs     string
	systemDirs []string
	resolvConf string   // where /etc/resolv.conf leads, when outside the system directories
	topLevel   []string // DangerFullAccess: the host's top-level entries

	user specs.User // who the provider runs as

	// The handles the paths above were read from (see open.go).
	workspaceF, credHomeF, rootfsF, resolvConfF *os.File
	skillFs                                     []*os.File
	programs                                    []string
	programFs                                   []*os.File
	socket, helper                              string // inference egress: the proxy's socket; the bridges' nlx
	helperF                                     *os.File
	toolsSocket                                 string // the tool proxy's socket
	providerHome                                string
	providerHomeF                               *os.File
}

// protectedMount is a read-only path inside the workspace (dst, as the
// sandbox sees it) and the handle of what it is on the host.
type protectedMount struct {
	dst string
	f   *os.File
}

// take hands *f over to the caller: close no longer closes it.
func (r *resolved) take(f **os.File) *os.File {
	g := *f
	*f = nil
	return g
}

// close closes the handles nobody took.
func (r *resolved) close() {
	if r == nil {
		return
	}
	for _, f := range slices.Concat([]*os.File{r.workspaceF, r.credHomeF, r.rootfsF, r.resolvConfF, r.helperF, r.providerHomeF}, r.skillFs, r.programFs) {
		if f != nil {
			f.Close()
		}
	}
	for _, p := range r.protected {
		if p.f != nil {
			p.f.Close()
		}
	}
}

func check(req Request) (*resolved, error) {
	switch req.Policy {
	case ReadOnly, WorkspaceWrite, TrustedLocal, DangerFullAccess:
	default:
		return nil, refuse(reason.UnknownPolicy, "policy %q is not one of read_only, workspace_write, trusted_local, danger_full_access", req.Policy)
	}
	switch req.Egress {
	case EgressNone, EgressFull:
		if req.Proxy != nil {
			return nil, refuse(reason.InvalidRequest, "egress %s takes no proxy", req.Egress)
		}
	case EgressInference:
		if req.Proxy == nil {
			return nil, refuse(reason.EgressProxyUnavailable, "egress inference without a proxy: the launch has no way out and is not made")
		}
		if req.Policy == DangerFullAccess {
			return nil, refuse(reason.InvalidRequest, "danger_full_access sees the host's filesystem, its /run included: it takes egress none or full, not inference")
		}
	default:
		return nil, refuse(reason.InvalidRequest, "egress %q is not one of none, inference, full", req.Egress)
	}
	if err := checkStrings(req); err != nil {
		return nil, err
	}
	l := req.Limits
	if l.MemoryBytes < 0 || l.Pids < 0 || l.CPU < 0 || math.IsNaN(l.CPU) || math.IsInf(l.CPU, 0) {
		return nil, refuse(reason.InvalidRequest, "limits must be zero (none) or positive: memory %d, cpu %v, pids %d", l.MemoryBytes, l.CPU, l.Pids)
	}
	if l.MemoryBytes > 0 && l.MemoryBytes < 4<<20 {
		return nil, refuse(reason.InvalidRequest, "memory limit %d bytes is below the 4 MiB a process needs to start", l.MemoryBytes)
	}
	if l.Pids > 0 && l.Pids < minPids {
		return nil, refuse(reason.InvalidRequest, "pids limit %d is below the %d tasks the sandbox itself needs", l.Pids, minPids)
	}

	r := &resolved{}
	var err error
	if r.user, err = checkUser(req.User); err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			r.close()
		}
	}()
	if r.workspace, r.workspaceF, err = checkWorkspace(req.WorkspaceRoot, req.WorkspaceDir); err != nil {
		return nil, err
	}
	if r.protected, err = checkProtected(r.workspaceF, r.workspace); err != nil {
		return nil, err
	}
	credRoot := ""
	if credRoot, r.credHome, r.credHomeF, err = checkCredentialHome(req.CredentialRoot, req.CredentialHome, r.user); err != nil {
		return nil, err
	}
	if credRoot != "" && overlaps(credRoot, r.workspace) {
		return nil, refuse(reason.CredentialHomeUnsafe, "credential root %s and workspace %s overlap: the workspace would expose other owners' credentials", credRoot, r.workspace)
	}
	if r.skills, r.skillFs, err = checkSkills(req.Skills, credRoot); err != nil {
		return nil, err
	}
	if req.RootFS != "" {
		if req.Policy == DangerFullAccess {
			return nil, refuse(reason.InvalidRequest, "danger_full_access runs on the host's filesystem and takes no image root")
		}
		if r.rootfs, r.rootfsF, err = checkDir(req.RootFS); err != nil {
			return nil, refuse(reason.InvalidRequest, "image root: %v", err)
		}
	}
	if r.programs, r.programFs, err = checkPrograms(req, credRoot, r.workspace); err != nil {
		return nil, err
	}
	if req.Egress == EgressInference {
		if r.socket, r.helper, r.helperF, err = checkProxy(*req.Proxy, req.RootFS != "", reason.EgressProxyUnavailable); err != nil {
			return nil, err
		}
	}
	if req.Tools != nil {
		var helper string
		var f *os.File
		if r.toolsSocket, helper, f, err = checkProxy(*req.Tools, req.RootFS != "", reason.ToolsProxyUnavailable); err != nil {
			return nil, err
		}
		switch {
		case r.helper == "":
			r.helper, r.helperF = helper, f
		case helper != r.helper:
			f.Close()
			return nil, refuse(reason.InvalidRequest, "the egress and tool proxies name two helpers (%s, %s): one nlx runs both bridges", r.helper, helper)
		default:
			f.Close()
		}
	}
	if req.ProviderHome != "" {
		if r.providerHome, r.providerHomeF, err = checkDir(req.ProviderHome); err != nil {
			return nil, refuse(reason.InvalidRequest, "the provider home: %v", err)
		}
		if overlaps(r.providerHome, r.workspace) || (credRoot != "" && overlaps(r.providerHome, credRoot)) {
			return nil, refuse(reason.InvalidRequest, "the provider home %s overlaps the workspace or the credential root", r.providerHome)
		}
	}
	bound := []string{r.workspace, r.credHome, r.rootfs, r.providerHome}
	for _, sk := range r.skills {
		bound = append(bound, sk.Dir)
	}
	bound = append(bound, r.programs...)
	bound = append(bound, r.socket, r.toolsSocket, r.helper)
	for _, p := range bound {
		if p == "" {
			continue
		}
		if err := checkAncestors(p); err != nil {
			return nil, err
		}
	}
	for _, d := range systemDirs {
		if _, err := os.Stat(d); err == nil {
			r.systemDirs = append(r.systemDirs, d)
		}
	}
	// Where /etc/resolv.conf leads is opened once and checked on the
	// handle, which bubblewrap then binds: its target's directory is not
	// always root's (systemd-resolved's /run/systemd/resolve), and a target
	// swapped for a link to another file after a check by path would be
	// what got bound.
	if f, err := openFile(resolvConfPath); err == nil {
		target, k, err := locate(f)
		if err == nil && k == 'f' && target != resolvConfPath &&
			!slices.ContainsFunc(r.systemDirs, func(d string) bool { return strictlyInside(d, target) }) {
			r.resolvConf, r.resolvConfF = target, f
		} else {
			f.Close()
		}
	}
	if req.Policy == DangerFullAccess {
		entries, err := os.ReadDir("/")
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			switch e.Name() {
			case "proc", "dev", "sys":
				continue
			}
			r.topLevel = append(r.topLevel, e.Name())
		}
	}
	ok = true
	return r, nil
}

// checkUser decides who the provider runs as: the request's user, never
// root; nlx's own user when nlx is not root (it cannot be anyone else).
func checkUser(u *User) (specs.User, error) {
	euid, egid := uint32(os.Geteuid()), uint32(os.Getegid())
	switch {
	case u == nil && euid == 0:
		return specs.User{}, refuse(reason.ProviderUserRoot, "no user to run the provider as, and nlx runs as root: providers never run as root")
	case u == nil:
		return specs.User{UID: euid, GID: egid}, nil
	case u.UID == 0 || u.GID == 0:
		return specs.User{}, refuse(reason.ProviderUserRoot, "the provider user %d:%d is root's: providers never run as root", u.UID, u.GID)
	case euid != 0 && (u.UID != euid || u.GID != egid):
		return specs.User{}, refuse(reason.ProviderUserNoSwitch, "nlx runs as %d:%d and cannot run the provider as %d:%d (only root can)", euid, egid, u.UID, u.GID)
	}
	return specs.User{UID: u.UID, GID: u.GID}, nil
}

// checkStrings refuses what cannot cross exec: NUL bytes, and variable
// names that are not names.
func checkStrings(req Request) error {
	if len(req.Command) == 0 || req.Command[0] == "" {
		return refuse(reason.InvalidRequest, "empty command")
	}
	for _, a := range req.Command {
		if strings.IndexByte(a, 0) >= 0 {
			return refuse(reason.InvalidRequest, "command argument %q holds a NUL byte", a)
		}
	}
	for k, v := range req.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.IndexByte(v, 0) >= 0 {
			return refuse(reason.InvalidRequest, "environment variable %q is not a valid name=value", k)
		}
	}
	if strings.IndexByte(req.Workspace, 0) >= 0 {
		return refuse(reason.InvalidRequest, "workspace name holds a NUL byte")
	}
	return nil
}

// checkWorkspace opens the workspace below its root: the kernel resolves
// it, so a symlink leading out of the root is refused, and the handle is
// what the sandbox binds.
func checkWorkspace(root, dir string) (string, *os.File, error) {
	outside := func(format string, args ...any) (string, *os.File, error) {
		return "", nil, refuse(reason.WorkspaceOutsideRoot, format, args...)
	}
	if !filepath.IsAbs(root) || !filepath.IsAbs(dir) {
		return outside("workspace root %q and directory %q must be absolute", root, dir)
	}
	rel, err := filepath.Rel(root, dir)
	if err != nil || !filepath.IsLocal(rel) || rel == "." {
		return outside("workspace %s is not inside the workspace root %s", dir, root)
	}
	rootF, err := openDir(root)
	if err != nil {
		return outside("workspace root: %v", err)
	}
	defer rootF.Close()
	rroot, err := realPath(rootF)
	if err != nil {
		return outside("workspace root: %v", err)
	}
	f, err := openBeneath(rootF, rel, false)
	if err != nil {
		return outside("workspace: %v", err)
	}
	rdir, k, err := locate(f)
	if err == nil && (k != 'd' || !strictlyInside(rroot, rdir)) {
		err = fmt.Errorf("it is %s, not a directory inside %s", rdir, rroot)
	}
	if err != nil {
		f.Close()
		return outside("workspace %s: %v", dir, err)
	}
	return rdir, f, nil
}

// checkProtected opens .git and .nlx below the workspace. One that is a
// symlink is followed, and must stay inside the workspace: the read-only
// bind then covers what it points at.
func checkProtected(wsF *os.File, ws string) ([]protectedMount, error) {
	var out []protectedMount
	fail := func(err error) ([]protectedMount, error) {
		for _, p := range out {
			p.f.Close()
		}
		return nil, err
	}
	for _, name := range protectedEntries {
		f, err := openBeneath(wsF, name, false)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if errors.Is(err, errEscapes) {
			return fail(refuse(reason.WorkspaceOutsideRoot, "%s points outside the workspace", filepath.Join(ws, name)))
		}
		if err != nil {
			return fail(refuse(reason.WorkspaceOutsideRoot, "%v", err))
		}
		target, k, err := locate(f)
		switch {
		case err != nil:
			f.Close()
			return fail(refuse(reason.WorkspaceOutsideRoot, "%s: %v", filepath.Join(ws, name), err))
		case !strictlyInside(ws, target):
			f.Close()
			return fail(refuse(reason.WorkspaceOutsideRoot, "%s points outside the workspace, at %s", filepath.Join(ws, name), target))
		case k == '?':
			f.Close()
			return fail(refuse(reason.WorkspaceOutsideRoot, "%s is neither a directory nor a file", target))
		}
		rel, _ := filepath.Rel(ws, target)
		out = append(out, protectedMount{dst: WorkspacePath + "/" + filepath.ToSlash(rel), f: f})
	}
	return out, nil
}

// checkCredentialHome returns the resolved credential root and home, and
// the home's handle. The home is opened below the root with no symlink
// anywhere in it (RESOLVE_NO_SYMLINKS), so that no link below the root can
// redirect the mount to another owner's home. A home (or root) that is not
// there is credential_home_missing, with how to make it for u; one that is
// there but unsafe stays credential_home_unsafe.
func checkCredentialHome(root, home string, u specs.User) (string, string, *os.File, error) {
	if root == "" && home == "" {
		return "", "", nil, nil
	}
	unsafe := func(format string, args ...any) (string, string, *os.File, error) {
		return "", "", nil, refuse(reason.CredentialHomeUnsafe, format, args...)
	}
	switch {
	case root == "":
		return unsafe("credential home %q has no credential root", home)
	case !filepath.IsAbs(root):
		return unsafe("credential root %q must be absolute", root)
	case home == "" || home == ".":
		return unsafe("no credential home selected: the credential root itself is never mounted")
	case filepath.IsAbs(home):
		return unsafe("credential home %q must be relative to the credential root", home)
	case filepath.Clean(home) != home || slices.Contains(strings.Split(home, "/"), ".."):
		return unsafe("credential home %q must be a clean path without ..", home)
	}
	rootF, err := openDir(root)
	if errors.Is(err, fs.ErrNotExist) {
		return "", "", nil, missingHome(root, home, u, fmt.Sprintf("the credential root %s does not exist", root))
	}
	if err != nil {
		return unsafe("credential root: %v", err)
	}
	defer rootF.Close()
	rroot, err := realPath(rootF)
	if err != nil {
		return unsafe("credential root: %v", err)
	}
	f, err := openBeneath(rootF, home, true)
	if errors.Is(err, unix.ELOOP) {
		return unsafe("credential home %s: a component of it is a symlink", home)
	}
	if errors.Is(err, fs.ErrNotExist) {
		return "", "", nil, missingHome(root, home, u, fmt.Sprintf("credential home %s does not exist", filepath.Join(root, home)))
	}
	if err != nil {
		return unsafe("credential home %s: %v", home, err)
	}
	p, k, err := locate(f)
	switch {
	case err != nil:
		f.Close()
		return unsafe("credential home %s: %v", home, err)
	case k != 'd':
		f.Close()
		return unsafe("credential home %s is not a directory", p)
	case !strictlyInside(rroot, p):
		f.Close()
		return unsafe("credential home %s is not inside %s", p, rroot)
	}
	return rroot, p, f, nil
}

// missingHome is the refusal of a launch whose credential home is not
// there: apply makes the home of each connection it creates or moves
// (host.Effects), so a missing one was removed since, or applied by an nlx
// that made none. The fix makes it as apply would: the directories above
// it root's and searchable, the home the provider user's, mode 0700.
func missingHome(root, home string, u specs.User, what string) *reason.Error {
	dir := filepath.Join(root, home)
	fix := fmt.Sprintf("mkdir -p -m 0711 %s && mkdir -m 0700 %s", shellQuote(filepath.Dir(dir)), shellQuote(dir))
	if os.Geteuid() == 0 {
		fix += fmt.Sprintf(" && chown %d:%d %s", u.UID, u.GID, shellQuote(dir))
	}
	return &reason.Error{Code: reason.CredentialHomeMissing,
		Msg: what + ": nlx apply creates the home of each connection it creates or moves, so it was removed since, " +
			"applied by an older nlx, or made under another NLX_CREDENTIAL_ROOT; create it, then sign in (nlx doctor shows how); fix: " + fix,
		Fix: fix}
}

// shellQuote quotes s for a POSIX shell when it needs it (as
// plan.ShellQuote, which isolate does not import).
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:@%+=,") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func checkSkills(skills []SkillMount, credRoot string) (_ []SkillMount, files []*os.File, err error) {
	var out []SkillMount
	defer func() {
		if err != nil {
			for _, f := range files {
				f.Close()
			}
			files = nil
		}
	}()
	seen := map[string]bool{}
	for _, sk := range skills {
		if !skillName.MatchString(sk.Name) {
			return nil, files, refuse(reason.InvalidRequest, "skill name %q is not 1-64 of [a-z0-9-]", sk.Name)
		}
		if seen[sk.Name] {
			return nil, files, refuse(reason.InvalidRequest, "skill %q is given twice", sk.Name)
		}
		seen[sk.Name] = true
		if !filepath.IsAbs(sk.Dir) {
			return nil, files, refuse(reason.InvalidRequest, "skill %s: directory %q must be absolute", sk.Name, sk.Dir)
		}
		dir, f, err := checkDir(sk.Dir)
		if err != nil {
			return nil, files, refuse(reason.InvalidRequest, "skill %s: %v", sk.Name, err)
		}
		files = append(files, f)
		if credRoot != "" && overlaps(credRoot, dir) {
			return nil, files, refuse(reason.CredentialHomeUnsafe, "skill %s directory %s overlaps the credential root %s", sk.Name, dir, credRoot)
		}
		out = append(out, SkillMount{Name: sk.Name, Dir: dir})
	}
	return out, files, nil
}

// checkPrograms opens the program directories of req: absolute, outside
// the credential root and the workspace (a provider must not be able to
// rewrite the program it runs), never with an image root.
func checkPrograms(req Request, credRoot, workspace string) (_ []string, files []*os.File, err error) {
	defer func() {
		if err != nil {
			for _, f := range files {
				f.Close()
			}
			files = nil
		}
	}()
	if len(req.Programs) > 0 && (req.RootFS != "" || req.Policy == DangerFullAccess) {
		return nil, nil, refuse(reason.InvalidRequest, "program directories are bound into a host view only: an image carries its programs, danger_full_access sees the host's")
	}
	var out []string
	for _, p := range req.Programs {
		if !filepath.IsAbs(p) {
			return nil, files, refuse(reason.InvalidRequest, "program directory %q must be absolute", p)
		}
		dir, f, err := checkDir(p)
		if err != nil {
			return nil, files, refuse(reason.InvalidRequest, "program directory: %v", err)
		}
		files = append(files, f)
		switch {
		case credRoot != "" && overlaps(credRoot, dir):
			return nil, files, refuse(reason.CredentialHomeUnsafe, "program directory %s overlaps the credential root %s", dir, credRoot)
		case overlaps(workspace, dir):
			return nil, files, refuse(reason.InvalidRequest, "program directory %s overlaps the workspace %s, which the provider may write", dir, workspace)
		case slices.Contains(out, dir):
			continue
		case dir == "/" || slices.ContainsFunc(systemDirs, func(d string) bool { return d == dir || strictlyInside(d, dir) }):
			// Already visible read-only.
			f.Close()
			files = files[:len(files)-1]
			continue
		}
		out = append(out, dir)
	}
	return out, files, nil
}

// checkProxy checks a launch's proxy socket (a socket, its path
// absolute; missing is code) and opens the helper nlx (a regular file;
// statically linked when it runs in an image root, which has no host
// libc).
func checkProxy(p Proxy, inImage bool, code reason.Code) (socket, helper string, f *os.File, err error) {
	if !filepath.IsAbs(p.Socket) || !filepath.IsAbs(p.Helper) {
		return "", "", nil, refuse(reason.InvalidRequest, "the proxy socket %q and helper %q must be absolute", p.Socket, p.Helper)
	}
	if fi, err := os.Lstat(p.Socket); err != nil || fi.Mode().Type() != os.ModeSocket {
		return "", "", nil, refuse(code, "the proxy socket %s is not a listening socket (%v)", p.Socket, err)
	}
	if f, err = openFile(p.Helper); err != nil {
		return "", "", nil, refuse(reason.InvalidRequest, "the helper %s: %v", p.Helper, err)
	}
	if helper, err = realPath(f); err != nil {
		f.Close()
		return "", "", nil, err
	}
	if inImage {
		if dynamic, err := dynamicallyLinked(helper); err != nil || dynamic {
			f.Close()
			return "", "", nil, refuse(reason.InvalidRequest, "the helper %s is dynamically linked and cannot run in an image root: "+
				"build nlx with CGO_ENABLED=0 (make build does)", helper)
		}
	}
	return p.Socket, helper, f, nil
}

// dynamicallyLinked reports whether the ELF file at path names an
// interpreter.
func dynamicallyLinked(path string) (bool, error) {
	e, err := elf.Open(path)
	if err != nil {
		return false, err
	}
	defer e.Close()
	for _, p := range e.Progs {
		if p.Type == elf.PT_INTERP {
			return true, nil
		}
	}
	return false, nil
}

func intPtr(n int) *int { return &n }

// checkDir opens a directory an operator (or nlx) chose, and returns where
// it really is.
func checkDir(p string) (string, *os.File, error) {
	f, err := openDir(p)
	if err != nil {
		return "", nil, err
	}
	rp, err := realPath(f)
	if err != nil {
		f.Close()
		return "", nil, err
	}
	return rp, f, nil
}

// strictlyInside reports whether p lies below dir (both clean and absolute).
func strictlyInside(dir, p string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != "." && rel != ".." && !strings.HasPrefix(rel, "../") && !filepath.IsAbs(rel)
}

func overlaps(a, b string) bool {
	return a == b || strictlyInside(a, b) || strictlyInside(b, a)
}

// parseSize reads a tmpfs size option ("65536k") in bytes.
func parseSize(s string) (int64, error) {
	mult := int64(1)
	switch {
	case strings.HasSuffix(s, "k"):
		mult, s = 1<<10, strings.TrimSuffix(s, "k")
	case strings.HasSuffix(s, "m"):
		mult, s = 1<<20, strings.TrimSuffix(s, "m")
	case strings.HasSuffix(s, "g"):
		mult, s = 1<<30, strings.TrimSuffix(s, "g")
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 || n > math.MaxInt64/mult {
		return 0, errors.New("bad size " + strconv.Quote(s))
	}
	return n * mult, nil
}
