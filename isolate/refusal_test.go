package isolate

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
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

	marker := "/tmp/should-not-exist"
	cases := []struct {
		name string
		code string
		mut  func(*testing.T, *Request)
	}{
		{"unknown policy", CodeUnknownPolicy, func(t *testing.T, r *Request) { r.Policy = "yolo" }},
		{"empty policy", CodeUnknownPolicy, func(t *testing.T, r *Request) { r.Policy = "" }},
		{"workspace outside root", CodeWorkspaceOutsideRoot, func(t *testing.T, r *Request) { r.WorkspaceDir = outside }},
		{"workspace outside root via symlink", CodeWorkspaceOutsideRoot, func(t *testing.T, r *Request) { r.WorkspaceDir = filepath.Join(f.wsRoot, "evil") }},
		{"workspace outside root via ..", CodeWorkspaceOutsideRoot, func(t *testing.T, r *Request) { r.WorkspaceDir = f.wsRoot + "/alpha/../../outside" }},
		{"workspace is the root", CodeWorkspaceOutsideRoot, func(t *testing.T, r *Request) { r.WorkspaceDir = f.wsRoot }},
		{"workspace relative", CodeWorkspaceOutsideRoot, func(t *testing.T, r *Request) { r.WorkspaceDir = "workspaces/alpha" }},
		{"workspace missing", CodeWorkspaceOutsideRoot, func(t *testing.T, r *Request) { r.WorkspaceDir = filepath.Join(f.wsRoot, "nope") }},
		{".git symlink out of the workspace", CodeWorkspaceOutsideRoot, func(t *testing.T, r *Request) { r.WorkspaceDir = gitEscape }},
		{"credential home is a symlink", CodeCredentialHomeUnsafe, func(t *testing.T, r *Request) { r.CredentialHome = "alice/codex" }},
		{"credential home under a symlink", CodeCredentialHomeUnsafe, func(t *testing.T, r *Request) { r.CredentialHome = "mallory/codex" }},
		{"credential home escapes with ..", CodeCredentialHomeUnsafe, func(t *testing.T, r *Request) { r.CredentialHome = "alice/../bob/codex" }},
		{"credential home escapes the root", CodeCredentialHomeUnsafe, func(t *testing.T, r *Request) { r.CredentialHome = "../credentials/bob/codex" }},
		{"credential home absolute", CodeCredentialHomeUnsafe, func(t *testing.T, r *Request) { r.CredentialHome = filepath.Join(f.credRoot, "bob", "codex") }},
		{"credential home is the root", CodeCredentialHomeUnsafe, func(t *testing.T, r *Request) { r.CredentialHome = "." }},
		{"credential home empty", CodeCredentialHomeUnsafe, func(t *testing.T, r *Request) { r.CredentialHome = "" }},
		{"credential home is a file", CodeCredentialHomeUnsafe, func(t *testing.T, r *Request) { r.CredentialHome = "bob/codex/token" }},
		{"credential root relative", CodeCredentialHomeUnsafe, func(t *testing.T, r *Request) { r.CredentialRoot = "credentials" }},
		{"credential root inside the workspace", CodeCredentialHomeUnsafe, func(t *testing.T, r *Request) { r.CredentialRoot = inner }},
		{"skill dir holds the credential root", CodeCredentialHomeUnsafe, func(t *testing.T, r *Request) { r.Skills = []SkillMount{{Name: "all", Dir: f.base}} }},
		{"skill name", CodeInvalidRequest, func(t *testing.T, r *Request) { r.Skills = []SkillMount{{Name: "../x", Dir: f.skillRoot}} }},
		{"unknown egress", CodeInvalidRequest, func(t *testing.T, r *Request) { r.Egress = "some" }},
		{"empty command", CodeInvalidRequest, func(t *testing.T, r *Request) { r.Command = nil }},
		{"NUL in an argument", CodeInvalidRequest, func(t *testing.T, r *Request) { r.Command = []string{"sh", "-c", "a\x00b"} }},
		{"bad env name", CodeInvalidRequest, func(t *testing.T, r *Request) { r.Env = map[string]string{"A=B": "c"} }},
		{"negative limit", CodeInvalidRequest, func(t *testing.T, r *Request) { r.Limits.Pids = -1 }},
		{"NaN cpu", CodeInvalidRequest, func(t *testing.T, r *Request) { r.Limits.CPU = math.NaN() }},
		{"tiny memory", CodeInvalidRequest, func(t *testing.T, r *Request) { r.Limits.MemoryBytes = 1024 }},
		{"tiny pids", CodeInvalidRequest, func(t *testing.T, r *Request) { r.Limits.Pids = 2 }},
		{"unknown backend", CodeNoBackend, func(t *testing.T, r *Request) { r.Backend = "lxc" }},
		{"no backend on PATH", CodeNoBackend, func(t *testing.T, r *Request) { t.Setenv("PATH", "") }},
		{"explicit backend missing", CodeNoBackend, func(t *testing.T, r *Request) { r.Backend = Runc; t.Setenv("PATH", t.TempDir()) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req := f.request(Auto, WorkspaceWrite, "touch", marker)
			c.mut(t, &req)
			rec := &fakeRecorder{}
			id := "refused-" + newID()
			p, err := Launch(context.Background(), req, Options{Recorder: rec, LaunchID: id})
			var r *Refusal
			if !errors.As(err, &r) {
				t.Fatalf("Launch = %v, %v; want a refusal %s", p, err, c.code)
			}
			if r.Code != c.code {
				t.Errorf("code %s, want %s (%v)", r.Code, c.code, r)
			}
			if !strings.HasPrefix(r.Error(), c.code+": ") {
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
	mem := &hierarchy{mount: "/x/memory", controllers: []string{"memory"}}
	pids := &hierarchy{mount: "/x/pids", controllers: []string{"pids"}}
	cpu := &hierarchy{mount: "/x/cpu", controllers: []string{"cpu", "cpuacct"}}
	unified := &hierarchy{mount: "/x/unified", v2: true, controllers: []string{"memory", "pids"}}
	cases := []struct {
		name    string
		hs      []*hierarchy
		needCPU bool
		code    string
		hint    string
	}{
		{"all there", []*hierarchy{mem, pids, cpu}, true, "", ""},
		{"no memory (a Raspberry Pi kernel)", []*hierarchy{pids, cpu}, false, CodeCgroupMemoryUnavailable, "cgroup_enable=memory cgroup_memory=1"},
		{"no pids", []*hierarchy{mem, cpu}, false, CodeCgroupPidsUnavailable, "CONFIG_CGROUP_PIDS"},
		{"no cpu, cpu limited", []*hierarchy{mem, pids}, true, CodeCgroupCPUUnavailable, "cpu"},
		{"no cpu, no cpu limit", []*hierarchy{mem, pids}, false, "", ""},
		{"v2 only", []*hierarchy{unified}, false, "", ""},
		{"hybrid: memory on v2, pids on v1", []*hierarchy{pids, unified}, false, "", ""},
		{"nothing", nil, false, CodeCgroupMemoryUnavailable, "/boot/firmware/cmdline.txt"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := (&cgroupHost{hierarchies: c.hs}).require(c.needCPU)
			if c.code == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var r *Refusal
			if !errors.As(err, &r) || r.Code != c.code || !strings.Contains(r.Msg, c.hint) {
				t.Errorf("require = %v, want %s mentioning %q", err, c.code, c.hint)
			}
		})
	}
}

func TestFindPrefersV1(t *testing.T) {
	v1 := &hierarchy{mount: "/sys/fs/cgroup/memory", controllers: []string{"memory"}}
	v2 := &hierarchy{mount: "/sys/fs/cgroup/unified", v2: true, controllers: []string{"memory", "pids"}}
	h := &cgroupHost{hierarchies: []*hierarchy{v2, v1}}
	if got := h.find("memory"); got != v1 {
		t.Errorf("memory in %s, want the v1 hierarchy", got.mount)
	}
	if got := h.find("pids"); got != v2 {
		t.Errorf("pids in %v, want the unified hierarchy", got)
	}
	if got := h.find("rdma"); got != nil {
		t.Errorf("rdma in %s", got.mount)
	}
}

func TestUnescapeMount(t *testing.T) {
	for in, want := range map[string]string{
		`/sys/fs/cgroup`:     "/sys/fs/cgroup",
		`/mnt/with\040space`: "/mnt/with space",
		`/a\134b`:            `/a\b`,
		`/trailing\04`:       `/trailing\04`,
		`/not\999octal`:      `/not\999octal`,
	} {
		if got := unescapeMount(in); got != want {
			t.Errorf("unescapeMount(%q) = %q, want %q", in, got, want)
		}
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
