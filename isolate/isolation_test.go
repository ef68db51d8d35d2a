package isolate

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestIsolation runs each check inside a real sandbox, through a shell and
// through a grandchild of it, with both backends. Every check prints
// "done" last, so that a check that never ran cannot pass.
func TestIsolation(t *testing.T) {
	f := newFixture(t)

	// A listener on the host's loopback: with egress none nothing inside
	// may reach it. Accepted connections are counted, not just attempted.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var accepted atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	connect := fmt.Sprintf(`bash -c 'echo hi >/dev/tcp/127.0.0.1/%d' 2>/dev/null && echo CONNECTED || echo blocked`, port)

	// An fd the test process leaves open without close-on-exec: the
	// provider must not inherit it.
	leak, err := unix.Open(f.hostSecret, unix.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(leak)

	bobDir := filepath.Dir(f.bobToken)
	checks := []struct {
		name   string
		policy Policy
		egress Egress
		reexec bool // also run with the reexec start mode
		script string
		want   []string // lines that must appear
		never  []string // substrings that must not appear
		after  func(t *testing.T, r result)
	}{
		{
			name:   "own credential home is readable",
			script: `cat ` + CredentialPath + `/token; echo; echo "CODEX_HOME=$CODEX_HOME"`,
			want:   []string{aliceSecret, "CODEX_HOME=" + CredentialPath},
		},
		{
			name:   "other owner's credential by host path",
			reexec: true,
			script: `cat ` + f.bobToken + `; ls ` + bobDir,
			never:  []string{bobSecret, "token"},
		},
		{
			name:   "other owner's credential via /proc/1/root",
			script: `cat /proc/1/root` + f.bobToken + `; ls /proc/1/root` + bobDir + `; cat /proc/*/root` + f.bobToken,
			never:  []string{bobSecret},
		},
		{
			name:   "other owner's credential via planted symlinks",
			script: `cat /workspace/link-abs /workspace/link-rel /workspace/link-dir/codex/token`,
			never:  []string{bobSecret},
		},
		{
			name: "other owner's credential via .. from the credential home",
			script: `cat ` + CredentialPath + `/../bob/codex/token ` + CredentialPath + `/../../bob/codex/token ` +
				CredentialPath + `/../../../bob/codex/token ` + CredentialPath + `/../../../../credentials/bob/codex/token; ` +
				`cd ` + CredentialPath + ` && cd .. && cd .. && ls -a . *`,
			never: []string{bobSecret, "bob"},
		},
		{
			name:   "credential root lists at most the selected home",
			script: `ls -a ` + f.credRoot + ` ` + filepath.Join(f.credRoot, "alice") + `; ls -a ` + CredentialPath + `/..`,
			want:   []string{".credentials"},
			never:  []string{"bob", "claude"},
		},
		{
			name: "no file outside the system directories holds another owner's secret",
			script: `find / \( -path /proc -o -path /sys -o -path /dev -o -path /usr -o -path /etc -o -path /bin -o -path /sbin -o -path /lib -o -path /lib64 \) -prune ` +
				`-o -type f -print | while read -r p; do grep -l "` + bobSecret + `\|` + hostSecret + `\|` + aliceSecret + `" "$p"; done; echo searched`,
			want:  []string{"searched", CredentialPath + "/token"},
			never: []string{bobSecret, hostSecret},
			after: func(t *testing.T, r result) {
				// The selected owner's token is the only secret in sight:
				// it proves the search looked.
				found := regexp.MustCompile(`(?m)^/.*$`).FindAllString(r.out, -1)
				if len(found) != 1 {
					t.Errorf("files holding a secret: %q, want only %s/token", found, CredentialPath)
				}
			},
		},
		{
			name:   "only the workspace's own skills",
			script: `ls /opt/nlx/skills; cat /opt/nlx/skills/lint/SKILL.md; echo; ls ` + f.skillRoot + `; cat /opt/nlx/skills/deploy/SKILL.md ` + filepath.Join(f.skillRoot, "team-b", "deploy", "SKILL.md"),
			want:   []string{"lint", teamASkill},
			never:  []string{teamBSkill, "deploy"},
		},
		{
			name:   "skills are read-only",
			script: `touch /opt/nlx/skills/lint/x 2>/dev/null && echo WROTE || echo skill-ro`,
			want:   []string{"skill-ro"},
			never:  []string{"WROTE"},
		},
		{
			name:   "workspace_write writes the workspace but not .git or .nlx",
			policy: WorkspaceWrite,
			script: `echo new >/workspace/new-file && echo ws-rw; ` +
				`touch /workspace/.git/x 2>/dev/null && echo GIT-WRITTEN || echo git-ro; ` +
				`touch /workspace/.nlx/x 2>/dev/null && echo NLX-WRITTEN || echo nlx-ro; ` +
				`echo x >>/workspace/.git/HEAD 2>/dev/null && echo GIT-WRITTEN || echo git-head-ro; ` +
				`mv /workspace/.git /workspace/git2 2>/dev/null && echo GIT-MOVED || echo git-fixed; ` +
				`rm -rf /workspace/.nlx 2>/dev/null; test -e /workspace/.nlx/state && echo nlx-kept; ` +
				`rm /workspace/new-file`,
			want:  []string{"ws-rw", "git-ro", "nlx-ro", "git-head-ro", "git-fixed", "nlx-kept"},
			never: []string{"WRITTEN", "MOVED"},
			after: func(t *testing.T, r result) {
				for _, p := range []string{".git/x", ".nlx/x", "git2"} {
					if _, err := os.Stat(filepath.Join(f.ws, p)); err == nil {
						t.Errorf("%s appeared on the host", p)
					}
				}
			},
		},
		{
			name:   "trusted_local writes like workspace_write",
			policy: TrustedLocal,
			script: `touch /workspace/t && echo ws-rw && rm /workspace/t; touch /workspace/.git/x 2>/dev/null && echo GIT-WRITTEN || echo git-ro`,
			want:   []string{"ws-rw", "git-ro"},
			never:  []string{"GIT-WRITTEN"},
		},
		{
			name:   "read_only cannot write the workspace",
			policy: ReadOnly,
			script: `touch /workspace/new 2>/dev/null && echo WROTE || echo ws-ro; cat /workspace/README`,
			want:   []string{"ws-ro", "alpha"},
			never:  []string{"WROTE"},
			after: func(t *testing.T, r result) {
				if _, err := os.Stat(filepath.Join(f.ws, "new")); err == nil {
					t.Error("read_only sandbox created a file in the workspace")
				}
			},
		},
		{
			name:   "host files outside the binds are absent",
			reexec: true,
			script: `for p in ` + strings.Join([]string{f.hostSecret, f.tmpSecret, f.other, f.wsRoot, f.base, "/srv", "/run/nlx", "/sys/fs/cgroup"}, " ") +
				`; do test -e "$p" && echo "VISIBLE $p"; done; ls / | tr '\n' ' '; echo`,
			never: []string{"VISIBLE", " srv ", " sys ", " run "},
		},
		{
			name:   "the root and system directories are read-only",
			script: `for p in / /usr /etc /bin; do touch $p/nlx-x 2>/dev/null && echo "WROTE $p"; done; echo tried`,
			want:   []string{"tried"},
			never:  []string{"WROTE"},
		},
		{
			name:   "only fds 0-2 are open",
			reexec: true,
			script: `ls -l /proc/self/fd | tail -n +2 | sed 's/.* \([0-9]*\) -> \(.*\)/fd \1 \2/'`,
			after: func(t *testing.T, r result) {
				fds := regexp.MustCompile(`(?m)^fd (\d+) (.*)$`).FindAllStringSubmatch(r.out, -1)
				var extra []string
				for _, m := range fds {
					if m[1] == "0" || m[1] == "1" || m[1] == "2" {
						continue
					}
					// ls's own directory fd.
					if regexp.MustCompile(`^/proc/\d+/fd$`).MatchString(m[2]) {
						continue
					}
					extra = append(extra, m[1]+" -> "+m[2])
				}
				if len(fds) < 3 || len(extra) > 0 {
					t.Errorf("open fds besides 0-2 and ls's own: %v (all: %q)", extra, r.out)
				}
			},
		},
		{
			name:   "egress none reaches nothing on the host's loopback",
			reexec: true,
			egress: EgressNone,
			script: connect + `; ip -o link 2>/dev/null | grep -v ' lo' ; cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' '`,
			want:   []string{"blocked", "lo"},
			never:  []string{"CONNECTED", "eth", "ens"},
		},
		{
			name:   "egress full reaches the host's loopback",
			egress: EgressFull,
			script: connect,
			want:   []string{"CONNECTED"},
		},
		{
			// bubblewrap running as root keeps the bounding set (so that
			// nested bubblewraps work); with no_new_privs set, an exec can
			// never raise the permitted set above the empty one, which is
			// what the freshly exec'd grep shows.
			name:   "no capabilities, no new privileges",
			reexec: true,
			script: `grep -E '^(CapEff|CapPrm|CapInh|CapAmb|NoNewPrivs)' /proc/self/status; mount -t tmpfs none /tmp 2>/dev/null && echo MOUNTED || echo no-mount`,
			want:   []string{"CapEff:\t0000000000000000", "CapPrm:\t0000000000000000", "CapInh:\t0000000000000000", "CapAmb:\t0000000000000000", "NoNewPrivs:\t1", "no-mount"},
			never:  []string{"MOUNTED"},
		},
		{
			name:   "environment is the allowlist plus the provider's",
			reexec: true,
			script: `env | sort`,
			want:   []string{"PATH=" + sandboxPATH, "HOME=" + HomePath, "LANG=C.UTF-8", "TERM=dumb", "CODEX_HOME=" + CredentialPath},
			never:  []string{bobSecret, "SECRET_TOKEN", "GOPATH", "GOFLAGS", "USER=root", reexecEnv},
		},
		{
			name:   "own pid, ipc and uts namespaces",
			script: `hostname; ps -e -o pid= 2>/dev/null | wc -l; ls /proc | grep -c '^[0-9]'; ipcs -m 2>/dev/null | grep -c 0x || true`,
			want:   []string{"nlx"},
			after: func(t *testing.T, r result) {
				// Only a handful of processes exist inside.
				for _, n := range regexp.MustCompile(`(?m)^\d+$`).FindAllString(r.out, -1) {
					if len(n) > 1 {
						t.Errorf("sandbox sees %s processes: %q", n, r.out)
					}
				}
			},
		},
	}

	for _, mode := range launchModes {
		for _, b := range backends {
			t.Run(mode.name+"/"+string(b), func(t *testing.T) {
				needBackend(t, b)
				setReexec(t, mode.reexec)
				for _, c := range checks {
					if mode.reexec && !c.reexec {
						continue
					}
					for _, sh := range shells {
						t.Run(c.name+"/"+sh.name, func(t *testing.T) {
							policy := c.policy
							if policy == "" {
								policy = WorkspaceWrite
							}
							req := f.request(b, policy, sh.cmd(c.script+"; echo done")...)
							if c.egress != "" {
								req.Egress = c.egress
							}
							before := accepted.Load()
							r := run(t, req)
							t.Logf("stdout:\n%s\nstderr:\n%s", r.out, r.errOut)
							if !strings.Contains(r.out, "done") {
								t.Fatalf("check did not run to its end (exit %d): %q, stderr %q", r.code, r.out, r.errOut)
							}
							for _, w := range c.want {
								if !strings.Contains(r.out, w) {
									t.Errorf("output lacks %q:\n%s", w, r.out)
								}
							}
							for _, n := range c.never {
								if strings.Contains(strings.ReplaceAll(r.out, "done", ""), n) {
									t.Errorf("output holds %q:\n%s", n, r.out)
								}
							}
							for _, secret := range []string{bobSecret, hostSecret, teamBSkill} {
								if strings.Contains(r.errOut, secret) {
									t.Errorf("stderr holds %q:\n%s", secret, r.errOut)
								}
							}
							if req.Egress == EgressNone && accepted.Load() != before {
								t.Errorf("the host listener accepted a connection from an egress-none sandbox")
							}
							if c.after != nil {
								c.after(t, r)
							}
						})
					}
				}
			})
		}
	}
}

// launchModes are the two ways a backend is started inside its cgroup.
var launchModes = []struct {
	name   string
	reexec bool
}{{"direct", false}, {"reexec", true}}

func setReexec(t testing.TB, on bool) {
	old := forceReexec
	forceReexec = on
	t.Cleanup(func() { forceReexec = old })
}

// TestCgroupBeforeExec proves the launch ordering with both start modes:
// when the identity is recorded, bwrap is already in the launch cgroup,
// and the provider has not run yet. It runs right after, inside the launch
// cgroup.
func TestCgroupBeforeExec(t *testing.T) {
	f := newFixture(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range launchModes {
		for _, b := range backends {
			t.Run(mode.name+"/"+string(b), func(t *testing.T) {
				needBackend(t, b)
				setReexec(t, mode.reexec)
				bin, _ := exec.LookPath(string(b))
				marker := "ran-" + newID()
				var checked bool
				rec := &fakeRecorder{RecordFunc: func(ctx context.Context, id Identity) error {
					exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", id.PID))
					if err != nil {
						return err
					}
					if want := map[bool]string{true: self, false: bin}[mode.reexec]; exe != want {
						t.Errorf("at record time the process runs %s, want %s", exe, want)
					}
					data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", id.PID))
					if err != nil {
						return err
					}
					// runc stays outside: it moves the container into
					// /nlx/ID/container itself, before the provider runs
					// (checked on the provider's own output below).
					for _, ctrl := range []string{"memory", "pids"} {
						if b == Bwrap && !regexp.MustCompile(`(?m)^\d+:[^:]*\b`+ctrl+`\b[^:]*:`+regexp.QuoteMeta(id.Cgroup)+`(/|$)`).Match(data) &&
							!strings.Contains(string(data), "0::"+id.Cgroup) {
							t.Errorf("at record time pid %d is not in %s for %s:\n%s", id.PID, id.Cgroup, ctrl, data)
						}
					}
					// The provider must not run while the record is
					// pending: watch for its marker a while.
					for i := 0; i < 20; i++ {
						if _, err := os.Stat(filepath.Join(f.ws, marker)); err == nil {
							t.Errorf("the provider ran before its identity was recorded")
							break
						}
						time.Sleep(5 * time.Millisecond)
					}
					checked = true
					return nil
				}}
				var out syncBuffer
				cmd := []string{"sh", "-c", "touch /workspace/" + marker + "; cat /proc/self/cgroup"}
				p, err := Launch(context.Background(), f.request(b, WorkspaceWrite, cmd...), Options{Recorder: rec, Stdout: &out, Stderr: &out})
				if err != nil {
					t.Fatal(err)
				}
				if _, err := p.Wait(context.Background()); err != nil {
					t.Fatal(err)
				}
				if _, err := Stop(context.Background(), p.Identity, 0, rec); err != nil {
					t.Fatal(err)
				}
				if !checked {
					t.Fatal("the recorder was not called")
				}
				if _, err := os.Stat(filepath.Join(f.ws, marker)); err != nil {
					t.Errorf("the provider did not run after release: %v", err)
				}
				if !strings.Contains(out.String(), ":"+p.Identity.Cgroup) {
					t.Errorf("the provider is not in %s:\n%s", p.Identity.Cgroup, out.String())
				}
			})
		}
	}
}

// TestDangerFullAccessSaysSo shows the one policy without a boundary does
// what it says, and says it in the spec and the identity.
func TestDangerFullAccessSaysSo(t *testing.T) {
	f := newFixture(t)
	for _, b := range backends {
		t.Run(string(b), func(t *testing.T) {
			needBackend(t, b)
			r := run(t, f.request(b, DangerFullAccess, "sh", "-c", `cat `+f.hostSecret+`; echo; pwd; echo "ws=$NLX_WORKSPACE"`))
			if !strings.Contains(r.out, hostSecret) || !strings.Contains(r.out, "ws="+f.ws) {
				t.Errorf("danger_full_access should see the host: %q", r.out)
			}
			if r.id.Boundary != BoundaryNone || r.id.Policy != DangerFullAccess {
				t.Errorf("identity boundary %q policy %q, want %q %q", r.id.Boundary, r.id.Policy, BoundaryNone, DangerFullAccess)
			}
		})
	}
}

// pidState reads the state letter of /proc/PID/stat.
func pidState(pid int) (byte, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	i := strings.LastIndexByte(string(data), ')')
	if i < 0 || i+2 >= len(data) {
		return 0, fmt.Errorf("bad stat %q", data)
	}
	return data[i+2], nil
}

// alive reports whether pid runs (a zombie does not).
func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	s, err := pidState(pid)
	return err == nil && s != 'Z' && s != 'X'
}
