package isolate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/containerd/cgroups/v3/cgroup1"
	"github.com/nlx-dev/nlx/internal/reason"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// TestRefusals: a request nlx cannot prove safe is refused with its code,
// and nothing is started: no identity recorded, no cgroup created, and the
// command (which would leave a marker) never ran.
func TestRefusals(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	f := newFixture(t)
	outside := filepath.Join(f.base, "outside")
	must(t, os.MkdirAll(outside, 0o755))
	// A workspace entry that is a symlink out of the root.
	must(t, os.Symlink(outside, filepath.Join(f.wsRoot, "evil")))
	// Credential homes reached through symlinks.
	must(t, os.Symlink(filepath.Join(f.credRoot, "bob", "codex"), filepath.Join(f.credRoot, "alice", "codex")))
	must(t, os.Symlink(filepath.Join(f.credRoot, "bob"), filepath.Join(f.credRoot, "mallory")))
	// A workspace whose .git points at another owner's home.
	gitEscape := filepath.Join(f.wsRoot, "gamma")
	must(t, os.MkdirAll(gitEscape, 0o755))
	must(t, os.Symlink(filepath.Join(f.credRoot, "bob"), filepath.Join(gitEscape, ".git")))
	// A credential root inside the workspace.
	inner := filepath.Join(f.ws, "creds")
	must(t, os.MkdirAll(filepath.Join(inner, "alice", "claude"), 0o755))

	// A workspace root anyone may write: whoever can could swap a
	// workspace for a link between the check and the mount.
	openRoot := filepath.Join(f.base, "open")
	must(t, os.MkdirAll(filepath.Join(openRoot, "delta"), 0o755))
	must(t, os.Chmod(openRoot, 0o777))
	// A runc that runs containers but has no seccomp support.
	noSeccomp := t.TempDir()
	fakeRunc := "#!/bin/sh\ncase \"$1\" in --version) echo 'runc version 1.1.5'; echo 'spec: 1.0.2';; features) exit 1;; *) exit 0;; esac\n"
	must(t, os.WriteFile(filepath.Join(noSeccomp, "runc"), []byte(fakeRunc), 0o755))

	marker := "/tmp/should-not-exist"
	cases := []struct {
		name string
		code reason.Code
		mut  func(*testing.T, *Request)
	}{
		{"unknown policy", reason.UnknownPolicy, func(t *testing.T, r *Request) { r.Policy = "yolo" }},
		{"empty policy", reason.UnknownPolicy, func(t *testing.T, r *Request) { r.Policy = "" }},
		{"workspace outside root", reason.WorkspaceOutsideRoot, func(t *testing.T, r *Request) { r.WorkspaceDir = outside }},
		{"workspace outside root via symlink", reason.WorkspaceOutsideRoot, func(t *testing.T, r *Request) { r.WorkspaceDir = filepath.Join(f.wsRoot, "evil") }},
		{"workspace outside root via ..", reason.WorkspaceOutsideRoot, func(t *testing.T, r *Request) { r.WorkspaceDir = f.wsRoot + "/alpha/../../outside" }},
		{"workspace is the root", reason.WorkspaceOutsideRoot, func(t *testing.T, r *Request) { r.WorkspaceDir = f.wsRoot }},
		{"workspace relative", reason.WorkspaceOutsideRoot, func(t *testing.T, r *Request) { r.WorkspaceDir = "workspaces/alpha" }},
		{"workspace missing", reason.WorkspaceOutsideRoot, func(t *testing.T, r *Request) { r.WorkspaceDir = filepath.Join(f.wsRoot, "nope") }},
		{".git symlink out of the workspace", reason.WorkspaceOutsideRoot, func(t *testing.T, r *Request) { r.WorkspaceDir = gitEscape }},
		{"credential home is a symlink", reason.CredentialHomeUnsafe, func(t *testing.T, r *Request) { r.CredentialHome = "alice/codex" }},
		{"credential home under a symlink", reason.CredentialHomeUnsafe, func(t *testing.T, r *Request) { r.CredentialHome = "mallory/codex" }},
		{"credential home escapes with ..", reason.CredentialHomeUnsafe, func(t *testing.T, r *Request) { r.CredentialHome = "alice/../bob/codex" }},
		{"credential home escapes the root", reason.CredentialHomeUnsafe, func(t *testing.T, r *Request) { r.CredentialHome = "../credentials/bob/codex" }},
		{"credential home absolute", reason.CredentialHomeUnsafe, func(t *testing.T, r *Request) { r.CredentialHome = filepath.Join(f.credRoot, "bob", "codex") }},
		{"credential home is the root", reason.CredentialHomeUnsafe, func(t *testing.T, r *Request) { r.CredentialHome = "." }},
		{"credential home empty", reason.CredentialHomeUnsafe, func(t *testing.T, r *Request) { r.CredentialHome = "" }},
		{"credential home is a file", reason.CredentialHomeUnsafe, func(t *testing.T, r *Request) { r.CredentialHome = "bob/codex/token" }},
		{"credential root relative", reason.CredentialHomeUnsafe, func(t *testing.T, r *Request) { r.CredentialRoot = "credentials" }},
		{"credential home missing", reason.CredentialHomeMissing, func(t *testing.T, r *Request) { r.CredentialHome = "carol/codex" }},
		{"credential home missing below a home", reason.CredentialHomeMissing, func(t *testing.T, r *Request) { r.CredentialHome = "bob/codex/sub" }},
		{"credential root missing", reason.CredentialHomeMissing, func(t *testing.T, r *Request) { r.CredentialRoot = filepath.Join(f.base, "nowhere") }},
		{"credential home missing under a symlink", reason.CredentialHomeUnsafe, func(t *testing.T, r *Request) { r.CredentialHome = "mallory/nope" }},
		{"credential root inside the workspace", reason.CredentialHomeUnsafe, func(t *testing.T, r *Request) { r.CredentialRoot = inner }},
		{"skill dir holds the credential root", reason.CredentialHomeUnsafe, func(t *testing.T, r *Request) { r.Skills = []SkillMount{{Name: "all", Dir: f.base}} }},
		{"skill name", reason.InvalidRequest, func(t *testing.T, r *Request) { r.Skills = []SkillMount{{Name: "../x", Dir: f.skillRoot}} }},
		{"unknown egress", reason.InvalidRequest, func(t *testing.T, r *Request) { r.Egress = "some" }},
		{"empty command", reason.InvalidRequest, func(t *testing.T, r *Request) { r.Command = nil }},
		{"NUL in an argument", reason.InvalidRequest, func(t *testing.T, r *Request) { r.Command = []string{"sh", "-c", "a\x00b"} }},
		{"bad env name", reason.InvalidRequest, func(t *testing.T, r *Request) { r.Env = map[string]string{"A=B": "c"} }},
		{"negative limit", reason.InvalidRequest, func(t *testing.T, r *Request) { r.Limits.Pids = -1 }},
		{"NaN cpu", reason.InvalidRequest, func(t *testing.T, r *Request) { r.Limits.CPU = math.NaN() }},
		{"tiny memory", reason.InvalidRequest, func(t *testing.T, r *Request) { r.Limits.MemoryBytes = 1024 }},
		{"tiny pids", reason.InvalidRequest, func(t *testing.T, r *Request) { r.Limits.Pids = 2 }},
		{"unknown backend", reason.NoBackend, func(t *testing.T, r *Request) { r.Backend = "lxc" }},
		{"no backend on PATH", reason.NoBackend, func(t *testing.T, r *Request) { t.Setenv("PATH", "") }},
		{"explicit backend missing", reason.NoBackend, func(t *testing.T, r *Request) { r.Backend = Runc; t.Setenv("PATH", t.TempDir()) }},
		{"workspace root writable by others", reason.BindSourceUnsafe, func(t *testing.T, r *Request) {
			r.WorkspaceRoot, r.WorkspaceDir = openRoot, filepath.Join(openRoot, "delta")
		}},
		{"kernel without seccomp filters", reason.SeccompUnavailable, func(t *testing.T, r *Request) {
			saved := seccompHost
			seccompHost = func() error { return &reason.Error{Code: reason.SeccompUnavailable, Msg: "no filter mode (test)"} }
			t.Cleanup(func() { seccompHost = saved })
		}},
		{"runc without seccomp", reason.SeccompUnavailable, func(t *testing.T, r *Request) {
			r.Backend = Runc
			t.Setenv("PATH", noSeccomp+":"+os.Getenv("PATH"))
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req := f.request(Auto, WorkspaceWrite, "touch", marker)
			c.mut(t, &req)
			rec := &fakeRecorder{}
			id := "refused-" + newID()
			p, err := Launch(context.Background(), req, Options{Recorder: rec, LaunchID: id})
			var r *reason.Error
			if !errors.As(err, &r) {
				t.Fatalf("Launch = %v, %v; want a refusal %s", p, err, c.code)
			}
			if r.Code != c.code {
				t.Errorf("code %s, want %s (%v)", r.Code, c.code, r)
			}
			if !strings.HasPrefix(r.Error(), string(c.code)+": ") {
				t.Errorf("Error() = %q", r.Error())
			}
			if rec.count() != 0 {
				t.Errorf("a refused launch was recorded")
			}
			assertCgroupGone(t, DefaultCgroupParent+"/"+id)
		})
	}
}

// TestRequireControllers: a host missing a controller refuses with the
// controller's code before anything is created.
func TestRequireControllers(t *testing.T) {
	mem, pids, cpu := cgroup1.NewMemory("/x"), cgroup1.NewPids("/x"), cgroup1.NewCpu("/x")
	cases := []struct {
		name    string
		v1      []cgroup1.Subsystem
		v2      []string // the unified hierarchy's controllers
		needCPU bool
		code    reason.Code
		hint    string
	}{
		{"all there", []cgroup1.Subsystem{mem, pids, cpu}, nil, true, "", ""},
		{"no memory (a Raspberry Pi kernel)", []cgroup1.Subsystem{pids, cpu}, nil, false, reason.CgroupMemory, "cgroup_enable=memory cgroup_memory=1"},
		{"no pids", []cgroup1.Subsystem{mem, cpu}, nil, false, reason.CgroupPids, "CONFIG_CGROUP_PIDS"},
		{"no cpu, cpu limited", []cgroup1.Subsystem{mem, pids}, nil, true, reason.CgroupCPU, "cpu"},
		{"no cpu, no cpu limit", []cgroup1.Subsystem{mem, pids}, nil, false, "", ""},
		{"v2 only", nil, []string{"memory", "pids"}, false, "", ""},
		{"v2 without memory", nil, []string{"cpu", "pids"}, false, reason.CgroupMemory, "/boot/firmware/cmdline.txt"},
		{"v2 without cpu, cpu limited", nil, []string{"memory", "pids"}, true, reason.CgroupCPU, "CONFIG_CFS_BANDWIDTH"},
		{"hybrid: memory on v2, pids on v1", []cgroup1.Subsystem{pids}, []string{"memory", "pids"}, false, "", ""},
		{"nothing", nil, nil, false, reason.CgroupMemory, "/boot/firmware/cmdline.txt"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := &cgroupHost{v1: c.v1, v2: c.v2}
			if c.v2 != nil {
				h.unified = "/x/unified"
			}
			err := h.require(c.needCPU)
			if c.code == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var r *reason.Error
			if !errors.As(err, &r) || r.Code != c.code || !strings.Contains(r.Msg, c.hint) {
				t.Errorf("require = %v, want %s mentioning %q", err, c.code, c.hint)
			}
		})
	}
}

func TestFindPrefersV1(t *testing.T) {
	h := &cgroupHost{
		v1:      []cgroup1.Subsystem{cgroup1.NewMemory("/sys/fs/cgroup")},
		unified: "/sys/fs/cgroup/unified",
		v2:      []string{"memory", "pids"},
	}
	if dir, v2 := h.dir("memory", "/nlx/a"); dir != "/sys/fs/cgroup/memory/nlx/a" || v2 {
		t.Errorf("memory in %s (v2 %v), want the v1 hierarchy", dir, v2)
	}
	if dir, v2 := h.dir("pids", "/nlx/a"); dir != "/sys/fs/cgroup/unified/nlx/a" || !v2 {
		t.Errorf("pids in %s (v2 %v), want the unified hierarchy", dir, v2)
	}
	if h.has("rdma") {
		t.Error("rdma found on a host without it")
	}
}

// TestLibraryResources: the spec's limits reach cgroup1 and cgroup2 as
// nlx means them (no swap, memory and pids always enabled on v2, only the
// controllers the hierarchy holds), and the spec itself, which runc gets,
// is never changed.
func TestLibraryResources(t *testing.T) {
	res := resources(Limits{MemoryBytes: 64 << 20, CPU: 0.5, Pids: 32})
	before, _ := json.Marshal(res)

	for _, memsw := range []bool{true, false} {
		got := (&cgroupHost{memsw: memsw}).v1Resources(res)
		switch {
		case *got.Memory.Limit != 64<<20:
			t.Errorf("memsw %v: v1 memory limit %d", memsw, *got.Memory.Limit)
		case memsw && (got.Memory.Swap == nil || *got.Memory.Swap != 64<<20):
			t.Errorf("memsw %v: v1 memory+swap %v, want the memory limit (no swap)", memsw, got.Memory.Swap)
		case !memsw && got.Memory.Swap != nil:
			t.Errorf("memsw %v: v1 memory+swap %d written where the kernel has no such file", memsw, *got.Memory.Swap)
		}
	}

	v2 := v2Resources(res, []string{"memory", "pids", "cpu"})
	if *v2.Memory.Max != 64<<20 || v2.Pids.Max != 32 || v2.CPU.Max != "50000 100000" {
		t.Errorf("v2 memory.max %d, pids.max %d, cpu.max %q", *v2.Memory.Max, v2.Pids.Max, v2.CPU.Max)
	}
	if got := v2.EnabledControllers(); !reflect.DeepEqual(got, []string{"cpu", "memory", "pids"}) {
		t.Errorf("v2 controllers %v", got)
	}
	if got := v2Resources(&specs.LinuxResources{}, []string{"memory", "pids"}); !reflect.DeepEqual(got.EnabledControllers(), []string{"memory", "pids"}) || len(got.Values()) != 0 {
		t.Errorf("v2 without limits: controllers %v, values %v; want memory and pids enabled, nothing written", got.EnabledControllers(), got.Values())
	}
	if got := v2Resources(res, []string{"pids"}); got.Memory != nil || got.CPU != nil || got.Pids == nil {
		t.Errorf("hybrid, only pids on v2: %+v", got)
	}

	if after, _ := json.Marshal(res); !bytes.Equal(before, after) {
		t.Errorf("the spec's resources changed:\n%s\n%s", before, after)
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"65536k": 64 << 20, "1m": 1 << 20, "2g": 2 << 30, "100": 100} {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "k", "-1k", "1x", "99999999999999999999g"} {
		if _, err := parseSize(in); err == nil {
			t.Errorf("parseSize(%q) succeeded", in)
		}
	}
}

// TestCredentialHomeMissing: a home that is not there is told apart from
// one that is unsafe, and the refusal says how to make it as apply would
// (the provider user's, mode 0700); one reached through a symlink stays
// unsafe whatever lies beyond it.
func TestCredentialHomeMissing(t *testing.T) {
	f := newFixture(t)
	must(t, os.Symlink(filepath.Join(f.credRoot, "bob"), filepath.Join(f.credRoot, "mallory")))
	for _, tt := range []struct {
		name, root, home string
		code             reason.Code
		say              []string
	}{
		{"missing home", f.credRoot, "carol/codex", reason.CredentialHomeMissing, []string{
			"credential home " + filepath.Join(f.credRoot, "carol", "codex") + " does not exist",
			"mkdir -p -m 0711 " + filepath.Join(f.credRoot, "carol") + " && mkdir -m 0700 " + filepath.Join(f.credRoot, "carol", "codex")}},
		{"missing root", filepath.Join(f.base, "nowhere"), "bob/codex", reason.CredentialHomeMissing, []string{
			"the credential root " + filepath.Join(f.base, "nowhere") + " does not exist"}},
		{"symlink", f.credRoot, "mallory/codex", reason.CredentialHomeUnsafe, []string{"symlink"}},
		{"symlink to nothing", f.credRoot, "mallory/nope", reason.CredentialHomeUnsafe, []string{"symlink"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req := f.request(Auto, WorkspaceWrite, "true")
			req.CredentialRoot, req.CredentialHome = tt.root, tt.home
			_, err := Compile(req)
			r := reason.Of(err)
			if r == nil || r.Code != tt.code {
				t.Fatalf("Compile = %v, want %s", err, tt.code)
			}
			for _, s := range tt.say {
				if !strings.Contains(r.Msg, s) {
					t.Errorf("message %q does not say %q", r.Msg, s)
				}
			}
			if tt.code == reason.CredentialHomeMissing {
				if r.Fix == "" || !strings.HasSuffix(r.Msg, "fix: "+r.Fix) {
					t.Errorf("fix %q, message %q", r.Fix, r.Msg)
				}
				if os.Geteuid() == 0 && !strings.Contains(r.Fix, fmt.Sprintf("chown %d:%d ", testUID, testUID)) {
					t.Errorf("fix %q does not hand the home to the provider user", r.Fix)
				}
			}
		})
	}
}
