package isolate

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/nlx-dev/nlx/internal/reason"
	"github.com/nlx-dev/nlx/isolate/seccomp"
)

// ReportVersion is the version of Report's JSON form.
const ReportVersion = 1

// Report is what this host can enforce.
type Report struct {
	FormatVersion int    `json:"format_version"`
	Arch          string `json:"arch"`
	Kernel        string `json:"kernel"`
	CgroupMode    string `json:"cgroup_mode"` // v1, hybrid, v2 or unavailable
	// Findings are in a fixed order: namespaces, backends, cgroups.
	Findings []Finding `json:"findings"`
}

// Finding is one capability nlx needs, checked by trying it.
type Finding struct {
	Name   string `json:"name"` // such as namespace.pid, backend.bwrap, cgroup.memory
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
	Fix    string `json:"fix,omitempty"` // set when not OK
}

// CanLaunch reports whether a provider can be launched safely: some
// backend works and the memory and pids controllers are usable. (A
// workspace with a cpu limit also needs cgroup.cpu.)
func (r Report) CanLaunch() bool {
	ok := map[string]bool{}
	for _, f := range r.Findings {
		ok[f.Name] = f.OK
	}
	backend := ok["backend.bwrap"] || ok["backend.runc"] && ok["seccomp.runc"]
	return backend && ok["seccomp.kernel"] && ok["cgroup.memory"] && ok["cgroup.pids"]
}

// Doctor checks what this host can enforce by trying each thing:
// creating namespaces, running a trivial sandbox with each backend,
// creating a cgroup with each controller under DefaultCgroupParent.
func Doctor(ctx context.Context) Report {
	r := Report{FormatVersion: ReportVersion, Arch: runtime.GOARCH}
	var uts unix.Utsname
	if unix.Uname(&uts) == nil {
		r.Kernel = unix.ByteSliceToString(uts.Release[:])
	}

	for _, ns := range []struct {
		name string
		flag uintptr
	}{
		{"user", syscall.CLONE_NEWUSER},
		{"pid", syscall.CLONE_NEWPID},
		{"net", syscall.CLONE_NEWNET},
		{"mount", syscall.CLONE_NEWNS},
	} {
		f := Finding{Name: "namespace." + ns.name}
		if err := tryNamespace(ctx, ns.flag); err != nil {
			f.Detail = err.Error()
			f.Fix = namespaceFix(ns.name)
		} else {
			f.OK, f.Detail = true, "a process can be started in a new "+ns.name+" namespace"
		}
		r.Findings = append(r.Findings, f)
	}

	for _, b := range []Backend{Bwrap, Runc} {
		f := Finding{Name: "backend." + string(b)}
		if err := b.Available(ctx); err != nil {
			f.Detail = err.Error()
			f.Fix = backendFix(b)
		} else {
			path, _ := b.lookPath()
			f.OK, f.Detail = true, path+" runs a sandbox"
		}
		r.Findings = append(r.Findings, f)
	}

	r.Findings = append(r.Findings, seccompFinding("seccomp.kernel", seccomp.Available(),
		"this kernel installs seccomp filters (every launch has one)"))
	if path, err := Runc.lookPath(); err == nil {
		r.Findings = append(r.Findings, seccompFinding("seccomp.runc", seccomp.RuncSupports(ctx, path),
			path+" applies a spec's seccomp filter"))
	}

	host, err := loadCgroupHost()
	if err != nil {
		r.CgroupMode = "unavailable"
		r.Findings = append(r.Findings, Finding{Name: "cgroup.mode", Detail: err.Error(), Fix: "mount cgroupfs at /sys/fs/cgroup"})
		return r
	}
	r.CgroupMode = modeName(host.mode)
	mounted := len(host.v1) > 0 || host.unified != ""
	r.Findings = append(r.Findings, Finding{Name: "cgroup.mode", OK: mounted,
		Detail: "cgroup " + r.CgroupMode, Fix: fixIf(!mounted, "mount cgroupfs at /sys/fs/cgroup")})
	for _, ctrl := range []string{"memory", "pids", "cpu"} {
		f := Finding{Name: "cgroup." + ctrl}
		if err := tryController(ctx, host, ctrl); err != nil {
			f.Detail = err.Error()
			f.Fix = controllerFix(ctrl)
		} else {
			f.OK, f.Detail = true, fmt.Sprintf("a cgroup with a %s limit can be created under %s", ctrl, DefaultCgroupParent)
		}
		r.Findings = append(r.Findings, f)
	}
	return r
}

func seccompFinding(name string, err error, ok string) Finding {
	f := Finding{Name: name, OK: err == nil, Detail: ok}
	if err != nil {
		f.Detail = err.Error()
		var se *reason.Error
		if errors.As(err, &se) && se.Fix != "" {
			f.Detail, f.Fix = string(se.Code)+": "+strings.TrimSuffix(se.Msg, "; fix: "+se.Fix), se.Fix
		} else {
			f.Fix = "use a kernel built with CONFIG_SECCOMP_FILTER, and a runc built with libseccomp"
		}
	}
	return f
}

func fixIf(cond bool, fix string) string {
	if cond {
		return fix
	}
	return ""
}

// tryNamespace starts true in a new namespace of one kind (inside a new
// user namespace when not root, as rootless bubblewrap does).
func tryNamespace(ctx context.Context, flag uintptr) error {
	path, err := exec.LookPath("true")
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, path)
	attr := &syscall.SysProcAttr{Cloneflags: flag}
	if flag == syscall.CLONE_NEWUSER || os.Geteuid() != 0 {
		attr.Cloneflags |= syscall.CLONE_NEWUSER
		attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Geteuid(), Size: 1}}
		attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getegid(), Size: 1}}
	}
	cmd.SysProcAttr = attr
	return cmd.Run()
}

func namespaceFix(name string) string {
	if name == "user" {
		return "allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1 and user.max_user_namespaces > 0; " +
			"on Ubuntu also kernel.apparmor_restrict_unprivileged_userns=0), or run nlx as root"
	}
	return "use a kernel built with " + strings.ToUpper(name) + " namespaces (CONFIG_" + strings.ToUpper(name) + "_NS)"
}

func backendFix(b Backend) string {
	switch b {
	case Bwrap:
		return "install bubblewrap (apt-get install bubblewrap); rootless use needs unprivileged user namespaces"
	default:
		return "install runc (apt-get install runc) and run nlx as root for the runc backend"
	}
}

// tryController creates a cgroup with a limit of ctrl under the nlx parent
// and removes it.
func tryController(ctx context.Context, h *cgroupHost, ctrl string) error {
	if !h.has(ctrl) {
		return fmt.Errorf("no %s controller is mounted or enabled", ctrl)
	}
	var res specs.LinuxResources
	switch ctrl {
	case "memory":
		limit := int64(64 << 20)
		res.Memory = &specs.LinuxMemory{Limit: &limit}
	case "pids":
		limit := int64(32)
		res.Pids = &specs.LinuxPids{Limit: &limit}
	case "cpu":
		quota, period := int64(50000), uint64(100000)
		res.CPU = &specs.LinuxCPU{Quota: &quota, Period: &period}
	}
	c, err := h.create(DefaultCgroupParent+"/doctor-"+newID(), []string{ctrl}, &res, false, false)
	if err != nil {
		return fmt.Errorf("set a %s limit: %w", ctrl, err)
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return c.remove(ctx)
}

func controllerFix(ctrl string) string {
	switch ctrl {
	case "memory":
		return piMemoryHint + "; run nlx as root or delegate a cgroup subtree to its user"
	case "pids":
		return "use a kernel with CONFIG_CGROUP_PIDS and run nlx as root or delegate a cgroup subtree to its user"
	default:
		return "use a kernel with CONFIG_CFS_BANDWIDTH, or give workspaces no cpu limit; run nlx as root or delegate a cgroup subtree"
	}
}
