package isolate

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/nlx-dev/nlx/isolate/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

var update = flag.Bool("update", false, "rewrite the golden specs in testdata")

func mountAt(s *specs.Spec, dst string) (specs.Mount, bool) {
	for _, m := range s.Mounts {
		if m.Destination == dst {
			return m, true
		}
	}
	return specs.Mount{}, false
}

func hasNamespace(s *specs.Spec, t specs.LinuxNamespaceType) bool {
	return slices.ContainsFunc(s.Linux.Namespaces, func(n specs.LinuxNamespace) bool { return n.Type == t })
}

// TestCompile checks the properties the boundary rests on, per policy and
// egress, without running anything.
func TestCompile(t *testing.T) {
	f := newFixture(t)
	for _, policy := range []Policy{ReadOnly, WorkspaceWrite, TrustedLocal, DangerFullAccess} {
		for _, egress := range []Egress{EgressNone, EgressFull} {
			t.Run(string(policy)+"/"+string(egress), func(t *testing.T) {
				req := f.request(Auto, policy, "codex", "app-server")
				req.Egress = egress
				s, err := Compile(req)
				if err != nil {
					t.Fatal(err)
				}
				danger := policy == DangerFullAccess
				if got, want := s.Annotations[AnnotationBoundary], map[bool]string{true: BoundaryNone, false: BoundaryFilesystem}[danger]; got != want {
					t.Errorf("boundary annotation %q, want %q", got, want)
				}
				if got := s.Annotations[AnnotationPolicy]; got != string(policy) {
					t.Errorf("policy annotation %q", got)
				}
				for _, ns := range []specs.LinuxNamespaceType{specs.PIDNamespace, specs.IPCNamespace, specs.UTSNamespace, specs.MountNamespace} {
					if !hasNamespace(s, ns) {
						t.Errorf("no %s namespace", ns)
					}
				}
				if got := hasNamespace(s, specs.NetworkNamespace); got != (egress == EgressNone) {
					t.Errorf("network namespace %v with egress %s", got, egress)
				}
				if !s.Process.NoNewPrivileges || s.Process.Capabilities == nil || !reflect.DeepEqual(*s.Process.Capabilities, specs.LinuxCapabilities{}) {
					t.Errorf("process keeps privileges: nnp %v caps %+v", s.Process.NoNewPrivileges, s.Process.Capabilities)
				}
				r := s.Linux.Resources
				if *r.Memory.Limit != req.Limits.MemoryBytes || *r.Pids.Limit != req.Limits.Pids || *r.CPU.Quota != 100000 || *r.CPU.Period != 100000 {
					t.Errorf("resources %+v %+v %+v, want %+v", r.Memory, r.Pids, r.CPU, req.Limits)
				}
				for _, m := range s.Mounts {
					// Never the credential root, nor anything holding another
					// owner's home, nor the workspace root.
					if m.Type == "bind" && !danger {
						for _, forbidden := range []string{f.credRoot, filepath.Dir(f.bobToken), f.wsRoot, f.other, "/"} {
							if m.Source == forbidden || strictlyInside(m.Source, forbidden) {
								t.Errorf("mount %s from %s exposes %s", m.Destination, m.Source, forbidden)
							}
						}
					}
				}
				if danger {
					if s.Process.Cwd != f.ws || s.Root.Readonly {
						t.Errorf("danger_full_access: cwd %s, readonly root %v", s.Process.Cwd, s.Root.Readonly)
					}
					return
				}
				ws, ok := mountAt(s, WorkspacePath)
				if !ok || ws.Source != f.ws {
					t.Fatalf("workspace mount %+v", ws)
				}
				if ro := slices.Contains(ws.Options, "ro"); ro != (policy == ReadOnly) {
					t.Errorf("workspace read-only %v under %s", ro, policy)
				}
				// Protected entries are read-only paths inside the sandbox,
				// never binds of a host path a provider could swap.
				for _, p := range []string{".git", ".nlx"} {
					if !slices.Contains(s.Linux.ReadonlyPaths, WorkspacePath+"/"+p) {
						t.Errorf("%s is not a read-only path of the sandbox: %v", p, s.Linux.ReadonlyPaths)
					}
					if _, bound := mountAt(s, WorkspacePath+"/"+p); bound {
						t.Errorf("%s is bound from its host path", p)
					}
				}
				cred, ok := mountAt(s, CredentialPath)
				if !ok || cred.Source != filepath.Join(f.credRoot, f.aliceHome) {
					t.Errorf("credential mount %+v", cred)
				}
				skill, ok := mountAt(s, SkillsPath+"/lint")
				if !ok || !slices.Contains(skill.Options, "ro") {
					t.Errorf("skill mount %+v", skill)
				}
				for _, d := range []string{"/tmp", "/home", "/root"} {
					if m, ok := mountAt(s, d); !ok || m.Type != "tmpfs" {
						t.Errorf("%s is not a private tmpfs: %+v", d, m)
					}
				}
				if s.Process.Cwd != WorkspacePath || !s.Root.Readonly {
					t.Errorf("cwd %s readonly root %v", s.Process.Cwd, s.Root.Readonly)
				}
				env := strings.Join(s.Process.Env, "\n")
				for _, want := range []string{"PATH=" + sandboxPATH, "HOME=" + HomePath, "LANG=C.UTF-8", "CODEX_HOME=" + CredentialPath} {
					if !strings.Contains(env, want) {
						t.Errorf("env lacks %s:\n%s", want, env)
					}
				}
				if strings.Contains(env, "SECRET_TOKEN") {
					t.Errorf("env passes a variable outside the allowlist:\n%s", env)
				}
			})
		}
	}
}

// TestCompileRoundTrip: every compiled spec survives the runtime-spec Go
// types' own JSON encoding unchanged (what runc reads is what was meant).
func TestCompileRoundTrip(t *testing.T) {
	f := newFixture(t)
	for _, policy := range []Policy{ReadOnly, WorkspaceWrite, TrustedLocal, DangerFullAccess} {
		for _, egress := range []Egress{EgressNone, EgressFull} {
			req := f.request(Auto, policy, "true")
			req.Egress = egress
			s, err := Compile(req)
			if err != nil {
				t.Fatal(err)
			}
			data, err := json.Marshal(s)
			if err != nil {
				t.Fatal(err)
			}
			var back specs.Spec
			if err := json.Unmarshal(data, &back); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(&back, s) {
				t.Errorf("%s/%s: spec changed through JSON:\n got %+v\nwant %+v", policy, egress, back, *s)
			}
		}
	}
}

// TestCompileGolden pins the whole spec for the two common policies, with
// the fixture's paths replaced by placeholders. Refresh with -update.
func TestCompileGolden(t *testing.T) {
	f := newFixture(t)
	for _, c := range []struct {
		policy Policy
		egress Egress
	}{{ReadOnly, EgressNone}, {WorkspaceWrite, EgressFull}} {
		name := string(c.policy) + "-" + string(c.egress)
		t.Run(name, func(t *testing.T) {
			req := f.request(Auto, c.policy, "codex", "app-server")
			req.Egress = c.egress
			s, err := Compile(req)
			if err != nil {
				t.Fatal(err)
			}
			s.Process.User = specs.User{} // the caller's
			// The filter is the architecture's; isolate/seccomp holds its
			// golden per architecture.
			profile, err := seccomp.Profile()
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(s.Linux.Seccomp, profile) {
				t.Error("the spec's seccomp filter is not seccomp.Profile()")
			}
			s.Linux.Seccomp = &specs.LinuxSeccomp{DefaultAction: "(seccomp.Profile)"}
			var sys []specs.Mount
			for _, m := range s.Mounts {
				// System directories depend on the host's layout.
				if !slices.Contains(systemDirs, m.Destination) {
					sys = append(sys, m)
				}
			}
			s.Mounts = sys
			data, err := json.MarshalIndent(s, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			got := strings.ReplaceAll(string(data), f.base, "$FIXTURE") + "\n"
			golden := filepath.Join("testdata", "spec-"+name+".json")
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if got != string(want) {
				t.Errorf("spec differs from %s (run with -update after checking):\n%s", golden, got)
			}
		})
	}
}

// TestRuncBundle: the bundle the runc backend writes is accepted by runc
// (the run succeeds) and its config.json decodes to exactly the spec that
// was run, which is Compile's plus the cgroup path.
func TestRuncBundle(t *testing.T) {
	needBackend(t, Runc)
	f := newFixture(t)
	req := f.request(Runc, WorkspaceWrite, "sh", "-c", "test -r "+CredentialPath+"/token && echo ran")
	compiled, err := Compile(req)
	if err != nil {
		t.Fatal(err)
	}
	rec := &fakeRecorder{}
	ctx := context.Background()
	var out syncBuffer
	p, err := Launch(ctx, req, Options{Recorder: rec, Stdout: &out, Stderr: &out})
	if err != nil {
		t.Fatal(err)
	}
	st, err := p.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.ExitCode() != 0 || !strings.Contains(out.String(), "ran") {
		t.Fatalf("runc did not run the bundle: exit %d, %q", st.ExitCode(), out.String())
	}
	data, err := os.ReadFile(filepath.Join(p.Identity.Bundle, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var written specs.Spec
	if err := json.Unmarshal(data, &written); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(&written, p.Spec) {
		t.Errorf("config.json differs from the spec run:\n got %+v\nwant %+v", written, *p.Spec)
	}
	if want := p.Identity.Cgroup + "/" + containerLeaf; written.Linux.CgroupsPath != want {
		t.Errorf("cgroupsPath %q, want %q", written.Linux.CgroupsPath, want)
	}
	written.Linux.CgroupsPath = ""
	if !reflect.DeepEqual(&written, compiled) {
		t.Errorf("config.json differs from Compile's spec beyond the cgroup path")
	}
	if _, err := Stop(ctx, p.Identity, 0, rec); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p.Identity.Bundle); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("bundle left after Stop: %v", err)
	}
}

// TestBwrapArgs checks the translation, and that what bubblewrap cannot
// express is refused rather than dropped.
func TestBwrapArgs(t *testing.T) {
	f := newFixture(t)
	s, err := Compile(f.request(Bwrap, ReadOnly, "codex"))
	if err != nil {
		t.Fatal(err)
	}
	protected := map[string]int{WorkspacePath + "/.git": 8, WorkspacePath + "/.nlx": 9}
	args, err := bwrapArgs(s, bwrapFDs{seccomp: 5, binds: protected})
	if err != nil {
		t.Fatal(err)
	}
	line := strings.Join(args, " ")
	for _, want := range []string{
		"--new-session", "--die-with-parent", "--seccomp 5", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-net",
		"--clearenv", "--proc /proc", "--dev /dev", "--tmpfs /tmp",
		"--ro-bind " + f.ws + " " + WorkspacePath,
		"--ro-bind-fd 8 " + WorkspacePath + "/.git",
		"--bind " + filepath.Join(f.credRoot, f.aliceHome) + " " + CredentialPath,
		"--remount-ro / --chdir /workspace -- codex",
	} {
		if !strings.Contains(line, want) {
			t.Errorf("bwrap arguments lack %q:\n%s", want, line)
		}
	}
	// Sources nlx holds open are bound by their handles.
	byFD, err := bwrapArgs(s, bwrapFDs{seccomp: 5, binds: map[string]int{WorkspacePath: 6, CredentialPath: 7,
		WorkspacePath + "/.git": 8, WorkspacePath + "/.nlx": 9}})
	if err != nil {
		t.Fatal(err)
	}
	line = strings.Join(byFD, " ")
	for _, want := range []string{"--ro-bind-fd 6 " + WorkspacePath + " ", "--bind-fd 7 " + CredentialPath + " "} {
		if !strings.Contains(line, want) {
			t.Errorf("bwrap arguments lack %q:\n%s", want, line)
		}
	}
	if _, err := bwrapArgs(s, bwrapFDs{seccomp: -1, binds: protected}); err == nil {
		t.Error("a spec with a seccomp filter translated without its descriptor")
	}
	if _, err := bwrapArgs(s, bwrapFDs{seccomp: 5}); err == nil {
		t.Error("a read-only path inside the workspace translated without its handle")
	}
	// The provider's user is not nlx's (root): bubblewrap runs as it,
	// unprivileged, in a user namespace of its own that allows no other.
	if !strings.Contains(line, "--unshare-user --disable-userns --cap-drop ALL") {
		t.Errorf("bwrap arguments do not run the sandbox unprivileged as the provider's user:\n%s", line)
	}
	if cred := bwrapCredential(s); cred == nil || cred.Uid != testUID || cred.Gid != testUID || len(cred.Groups) != 0 {
		t.Errorf("bubblewrap starts as %+v, want %d:%d without groups", cred, testUID, testUID)
	}
	bad := map[string]func(*specs.Spec){
		"joined namespace": func(s *specs.Spec) { s.Linux.Namespaces[0].Path = "/proc/1/ns/pid" },
		"kept capability":  func(s *specs.Spec) { s.Process.Capabilities.Bounding = []string{"CAP_SYS_ADMIN"} },
		"unknown mount":    func(s *specs.Spec) { s.Mounts = append(s.Mounts, specs.Mount{Destination: "/x", Type: "nfs"}) },
		"no mount ns": func(s *specs.Spec) {
			s.Linux.Namespaces = slices.DeleteFunc(s.Linux.Namespaces, func(n specs.LinuxNamespace) bool { return n.Type == specs.MountNamespace })
		},
	}
	for name, mut := range bad {
		t.Run(name, func(t *testing.T) {
			c, _ := Compile(f.request(Bwrap, ReadOnly, "codex"))
			mut(c)
			if _, err := bwrapArgs(c, bwrapFDs{seccomp: 5, binds: protected}); err == nil {
				t.Error("translated")
			}
		})
	}
}

// TestResolvConfLink: with egress, a resolv.conf that is a link out of the
// system directories (systemd-resolved) has its target bound, and only it.
func TestResolvConfLink(t *testing.T) {
	f := newFixture(t)
	target := filepath.Join(f.base, "run", "stub-resolv.conf")
	must(t, os.MkdirAll(filepath.Dir(target), 0o755))
	must(t, os.WriteFile(target, []byte("nameserver 127.0.0.53\n"), 0o644))
	link := filepath.Join(f.base, "resolv.conf")
	must(t, os.Symlink(target, link))
	old := resolvConfPath
	resolvConfPath = link
	defer func() { resolvConfPath = old }()
	for _, egress := range []Egress{EgressFull, EgressNone} {
		req := f.request(Auto, WorkspaceWrite, "true")
		req.Egress = egress
		s, err := Compile(req)
		if err != nil {
			t.Fatal(err)
		}
		m, ok := mountAt(s, target)
		if want := egress == EgressFull; ok != want || (ok && (m.Source != target || !slices.Contains(m.Options, "ro"))) {
			t.Errorf("egress %s: resolver mount %+v (present %v, want %v)", egress, m, ok, want)
		}
	}
}

// TestResolvConfBoundByHandle: where /etc/resolv.conf leads (under
// systemd-resolved a directory root does not own) is opened and checked
// once, and bubblewrap binds that handle: the target swapped for a link to
// a host secret after the compile binds the file checked, not the secret.
// Bound by path, as it was, bubblewrap mounted whatever the path named at
// mount time.
func TestResolvConfBoundByHandle(t *testing.T) {
	f := newFixture(t)
	target := filepath.Join(f.base, "run", "stub-resolv.conf")
	must(t, os.MkdirAll(filepath.Dir(target), 0o755))
	must(t, os.WriteFile(target, []byte("nameserver 127.0.0.53\n"), 0o644))
	link := filepath.Join(f.base, "resolv.conf")
	must(t, os.Symlink(target, link))
	old := resolvConfPath
	resolvConfPath = link
	defer func() { resolvConfPath = old }()
	req := f.request(Bwrap, WorkspaceWrite, "cat", target)
	req.Egress = EgressFull
	t.Run("launch", func(t *testing.T) {
		// bubblewrap binds the file's handle where the link expects it.
		needBackend(t, Bwrap)
		if r := run(t, req); r.code != 0 || r.out != "nameserver 127.0.0.53\n" {
			t.Fatalf("exit %d, read %q\n%s", r.code, r.out, r.errOut)
		}
	})
	s, h, err := compile(req)
	if err != nil {
		t.Fatal(err)
	}
	defer h.close()
	checked, ok := h[target]
	if !ok {
		t.Fatalf("no handle for %s: it would be bound by path", target)
	}
	var before unix.Stat_t
	must(t, unix.Fstat(int(checked.Fd()), &before))

	// The swap, after the check.
	must(t, os.Rename(target, target+".checked"))
	must(t, os.Symlink(f.hostSecret, target))

	pass, fds, err := bwrapPass(s, h)
	if err != nil {
		t.Fatal(err)
	}
	defer pass[0].Close()
	args, err := bwrapArgs(s, fds)
	if err != nil {
		t.Fatal(err)
	}
	want := "--ro-bind-fd " + strconv.Itoa(fds.binds[target]) + " " + target
	if line := strings.Join(args, " "); !strings.Contains(line, want) {
		t.Errorf("bwrap arguments lack %q:\n%s", want, line)
	}
	var now unix.Stat_t
	must(t, unix.Fstat(int(checked.Fd()), &now))
	if now.Ino != before.Ino || now.Dev != before.Dev {
		t.Error("the handle no longer names the file checked")
	}
	if p, err := realPath(checked); err != nil || p != target+".checked" {
		t.Errorf("the handle names %q (%v), want the checked file, renamed", p, err)
	}
}

// TestImageRootFS runs in a minimal image root (a shell and its libraries
// copied from the host): the host's system directories are not there, the
// workspace and the credential home are, and the root is read-only.
func TestImageRootFS(t *testing.T) {
	f := newFixture(t)
	root := filepath.Join(f.base, "image")
	sh, err := exec.LookPath("dash")
	if err != nil {
		t.Skip("no dash to build an image from")
	}
	out, err := exec.Command("ldd", sh).Output()
	if err != nil {
		t.Skipf("ldd %s: %v", sh, err)
	}
	files := map[string]string{sh: filepath.Join(root, "bin", "sh")}
	for _, f := range regexp.MustCompile(`(/\S+)`).FindAllString(string(out), -1) {
		files[f] = filepath.Join(root, f)
	}
	for src, dst := range files {
		data, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		must(t, os.MkdirAll(filepath.Dir(dst), 0o755))
		must(t, os.WriteFile(dst, data, 0o755))
	}
	must(t, PrepareRootFS(root))
	script := `test -e /usr/bin/bwrap && echo HOST-VISIBLE; read l < /workspace/README; echo "ws=$l"; ` +
		`read c < ` + CredentialPath + `/token; echo "cred=$c"; (echo x > /image-file) 2>/dev/null && echo ROOT-WRITABLE; echo done`
	for _, b := range backends {
		t.Run(string(b), func(t *testing.T) {
			needBackend(t, b)
			req := f.request(b, WorkspaceWrite, "/bin/sh", "-c", script)
			req.RootFS = root
			r := run(t, req)
			for _, w := range []string{"ws=alpha", "cred=" + aliceSecret, "done"} {
				if !strings.Contains(r.out, w) {
					t.Errorf("output lacks %q: %q (stderr %q)", w, r.out, r.errOut)
				}
			}
			for _, n := range []string{"HOST-VISIBLE", "ROOT-WRITABLE"} {
				if strings.Contains(r.out, n) {
					t.Errorf("output holds %q: %q", n, r.out)
				}
			}
		})
	}
}
