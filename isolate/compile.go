package isolate

import (
	"errors"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
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

// runc's defaults, minus /sys which the sandbox never mounts.
var (
	maskedPaths = []string{
		"/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
		"/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi",
	}
	readonlyPaths = []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"}
)

// Compile turns req into one OCI runtime-spec that every backend carries
// out. It touches the filesystem only to resolve and check paths. A request
// it cannot prove safe is refused with a *Refusal.
//
// The spec has no cgroupsPath: Launch adds it, naming the launch's cgroup.
// Swap is not in the spec either: the launch cgroup grants none (memsw on
// v1, memory.swap.max on v2) where the kernel accounts swap, and runc would
// fail on kernels that do not.
func Compile(req Request) (*specs.Spec, error) {
	r, err := check(req)
	if err != nil {
		return nil, err
	}
	danger := req.Policy == DangerFullAccess

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
			User: specs.User{UID: uint32(os.Getuid()), GID: uint32(os.Getgid())},
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
	if req.Egress == EgressNone {
		s.Linux.Namespaces = append(s.Linux.Namespaces, specs.LinuxNamespace{Type: specs.NetworkNamespace})
	}
	if req.RootFS != "" {
		s.Root.Path = r.rootfs
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
			}
		}
		s.Mounts = append(s.Mounts,
			tmpfs("/tmp", "1777"),
			tmpfs("/home", "755"),
			tmpfs(HomePath, "700"),
			tmpfs("/root", "700"),
			bind(r.workspace, WorkspacePath, req.Policy == ReadOnly),
		)
		for _, p := range r.protected {
			s.Mounts = append(s.Mounts, bind(p.src, p.dst, true))
		}
		if r.credHome != "" {
			// Read-write under every policy: providers refresh their
			// tokens in place.
			s.Mounts = append(s.Mounts, bind(r.credHome, CredentialPath, false))
		}
		for _, sk := range r.skills {
			s.Mounts = append(s.Mounts, bind(sk.Dir, SkillsPath+"/"+sk.Name, true))
		}
	}
	s.Process.Env = environment(req, r)
	return s, nil
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
	if req.Policy == DangerFullAccess {
		// No boundary: the real paths, and the caller's home.
		env["NLX_WORKSPACE"] = r.workspace
		if r.credHome != "" {
			env["NLX_CREDENTIAL_HOME"] = r.credHome
		}
		env["HOME"] = "/"
		if h, ok := host["HOME"]; ok {
			env["HOME"] = h
		}
	}
	for k, v := range req.Env {
		env[k] = v
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
}

type protectedMount struct{ src, dst string }

func check(req Request) (*resolved, error) {
	switch req.Policy {
	case ReadOnly, WorkspaceWrite, TrustedLocal, DangerFullAccess:
	default:
		return nil, refuse(CodeUnknownPolicy, "policy %q is not one of read_only, workspace_write, trusted_local, danger_full_access", req.Policy)
	}
	switch req.Egress {
	case EgressNone, EgressFull:
	default:
		return nil, refuse(CodeInvalidRequest, "egress %q is not one of none, full", req.Egress)
	}
	if err := checkStrings(req); err != nil {
		return nil, err
	}
	l := req.Limits
	if l.MemoryBytes < 0 || l.Pids < 0 || l.CPU < 0 || math.IsNaN(l.CPU) || math.IsInf(l.CPU, 0) {
		return nil, refuse(CodeInvalidRequest, "limits must be zero (none) or positive: memory %d, cpu %v, pids %d", l.MemoryBytes, l.CPU, l.Pids)
	}
	if l.MemoryBytes > 0 && l.MemoryBytes < 4<<20 {
		return nil, refuse(CodeInvalidRequest, "memory limit %d bytes is below the 4 MiB a process needs to start", l.MemoryBytes)
	}
	if l.Pids > 0 && l.Pids < minPids {
		return nil, refuse(CodeInvalidRequest, "pids limit %d is below the %d tasks the sandbox itself needs", l.Pids, minPids)
	}

	r := &resolved{}
	var err error
	if r.workspace, err = checkWorkspace(req.WorkspaceRoot, req.WorkspaceDir); err != nil {
		return nil, err
	}
	if r.protected, err = checkProtected(r.workspace); err != nil {
		return nil, err
	}
	credRoot := ""
	if credRoot, r.credHome, err = checkCredentialHome(req.CredentialRoot, req.CredentialHome); err != nil {
		return nil, err
	}
	if credRoot != "" && overlaps(credRoot, r.workspace) {
		return nil, refuse(CodeCredentialHomeUnsafe, "credential root %s and workspace %s overlap: the workspace would expose other owners' credentials", credRoot, r.workspace)
	}
	if r.skills, err = checkSkills(req.Skills, credRoot); err != nil {
		return nil, err
	}
	if req.RootFS != "" {
		if req.Policy == DangerFullAccess {
			return nil, refuse(CodeInvalidRequest, "danger_full_access runs on the host's filesystem and takes no image root")
		}
		if r.rootfs, err = checkDir(req.RootFS); err != nil {
			return nil, refuse(CodeInvalidRequest, "image root: %v", err)
		}
	}
	for _, d := range systemDirs {
		if _, err := os.Stat(d); err == nil {
			r.systemDirs = append(r.systemDirs, d)
		}
	}
	if target, err := filepath.EvalSymlinks(resolvConfPath); err == nil && target != resolvConfPath &&
		!slices.ContainsFunc(r.systemDirs, func(d string) bool { return strictlyInside(d, target) }) {
		if fi, err := os.Stat(target); err == nil && fi.Mode().IsRegular() {
			r.resolvConf = target
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
	return r, nil
}

// checkStrings refuses what cannot cross exec: NUL bytes, and variable
// names that are not names.
func checkStrings(req Request) error {
	if len(req.Command) == 0 || req.Command[0] == "" {
		return refuse(CodeInvalidRequest, "empty command")
	}
	for _, a := range req.Command {
		if strings.IndexByte(a, 0) >= 0 {
			return refuse(CodeInvalidRequest, "command argument %q holds a NUL byte", a)
		}
	}
	for k, v := range req.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.IndexByte(v, 0) >= 0 {
			return refuse(CodeInvalidRequest, "environment variable %q is not a valid name=value", k)
		}
	}
	if strings.IndexByte(req.Workspace, 0) >= 0 {
		return refuse(CodeInvalidRequest, "workspace name holds a NUL byte")
	}
	return nil
}

func checkWorkspace(root, dir string) (string, error) {
	if !filepath.IsAbs(root) || !filepath.IsAbs(dir) {
		return "", refuse(CodeWorkspaceOutsideRoot, "workspace root %q and directory %q must be absolute", root, dir)
	}
	rroot, err := filepath.EvalSymlinks(root)
	if err != nil {
		return "", refuse(CodeWorkspaceOutsideRoot, "workspace root: %v", err)
	}
	rdir, err := checkDir(dir)
	if err != nil {
		return "", refuse(CodeWorkspaceOutsideRoot, "workspace: %v", err)
	}
	if !strictlyInside(rroot, rdir) {
		return "", refuse(CodeWorkspaceOutsideRoot, "workspace %s resolves to %s, which is not inside the workspace root %s", dir, rdir, rroot)
	}
	return rdir, nil
}

// checkProtected finds .git and .nlx. One that is a symlink is followed,
// and must stay inside the workspace: otherwise the read-only bind would
// mount whatever it points at.
func checkProtected(ws string) ([]protectedMount, error) {
	var out []protectedMount
	for _, name := range protectedEntries {
		p := filepath.Join(ws, name)
		fi, err := os.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, refuse(CodeWorkspaceOutsideRoot, "%s: %v", p, err)
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			out = append(out, protectedMount{src: p, dst: WorkspacePath + "/" + name})
			continue
		}
		target, err := filepath.EvalSymlinks(p)
		if err != nil {
			return nil, refuse(CodeWorkspaceOutsideRoot, "%s: %v", p, err)
		}
		if !strictlyInside(ws, target) {
			return nil, refuse(CodeWorkspaceOutsideRoot, "%s points outside the workspace, at %s", p, target)
		}
		rel, _ := filepath.Rel(ws, target)
		out = append(out, protectedMount{src: target, dst: WorkspacePath + "/" + filepath.ToSlash(rel)})
	}
	return out, nil
}

// checkCredentialHome returns the resolved credential root and home. It
// walks the home one component at a time with Lstat, so that no symlink
// anywhere below the root can redirect the mount to another owner's home.
func checkCredentialHome(root, home string) (string, string, error) {
	if root == "" && home == "" {
		return "", "", nil
	}
	unsafe := func(format string, args ...any) (string, string, error) {
		return "", "", refuse(CodeCredentialHomeUnsafe, format, args...)
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
	rroot, err := filepath.EvalSymlinks(root)
	if err != nil {
		return unsafe("credential root: %v", err)
	}
	p := rroot
	var fi fs.FileInfo
	for _, c := range strings.Split(home, "/") {
		p = filepath.Join(p, c)
		if fi, err = os.Lstat(p); err != nil {
			return unsafe("credential home %s: %v", home, err)
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			return unsafe("credential home %s: %s is a symlink", home, p)
		}
	}
	if !fi.IsDir() {
		return unsafe("credential home %s is not a directory", p)
	}
	if !strictlyInside(rroot, p) {
		return unsafe("credential home %s is not inside %s", p, rroot)
	}
	return rroot, p, nil
}

func checkSkills(skills []SkillMount, credRoot string) ([]SkillMount, error) {
	var out []SkillMount
	seen := map[string]bool{}
	for _, sk := range skills {
		if !skillName.MatchString(sk.Name) {
			return nil, refuse(CodeInvalidRequest, "skill name %q is not 1-64 of [a-z0-9-]", sk.Name)
		}
		if seen[sk.Name] {
			return nil, refuse(CodeInvalidRequest, "skill %q is given twice", sk.Name)
		}
		seen[sk.Name] = true
		if !filepath.IsAbs(sk.Dir) {
			return nil, refuse(CodeInvalidRequest, "skill %s: directory %q must be absolute", sk.Name, sk.Dir)
		}
		dir, err := checkDir(sk.Dir)
		if err != nil {
			return nil, refuse(CodeInvalidRequest, "skill %s: %v", sk.Name, err)
		}
		if credRoot != "" && overlaps(credRoot, dir) {
			return nil, refuse(CodeCredentialHomeUnsafe, "skill %s directory %s overlaps the credential root %s", sk.Name, dir, credRoot)
		}
		out = append(out, SkillMount{Name: sk.Name, Dir: dir})
	}
	return out, nil
}

func checkDir(p string) (string, error) {
	rp, err := filepath.EvalSymlinks(p)
	if err != nil {
		return "", err
	}
	fi, err := os.Stat(rp)
	if err != nil {
		return "", err
	}
	if !fi.IsDir() {
		return "", &fs.PathError{Op: "check", Path: rp, Err: errors.New("not a directory")}
	}
	return rp, nil
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
