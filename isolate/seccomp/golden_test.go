package seccomp

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	moby "github.com/moby/profiles/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

var update = flag.Bool("update", false, "rewrite zsysnum.go and the golden profiles in testdata")

// TestProfileGolden keeps each architecture's profile in testdata, so a
// bump of github.com/moby/profiles/seccomp that changes it shows in
// review. Refresh with -update.
func TestProfileGolden(t *testing.T) {
	k, err := hostKernel()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range []*arch{archAMD64, archARM64} {
		t.Run(a.goarch, func(t *testing.T) {
			p, err := profileFor(a, k)
			if err != nil {
				t.Fatal(err)
			}
			got, err := json.MarshalIndent(p, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, '\n')
			golden := filepath.Join("testdata", "profile_"+a.goarch+".json")
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("profile differs from %s (run with -update after checking)", golden)
			}
		})
	}
}

// TestProfileNative: Profile is the native architecture's, on this
// kernel, and hands out copies.
func TestProfileNative(t *testing.T) {
	a, err := archFor(runtime.GOARCH)
	if err != nil {
		t.Skip(err)
	}
	k, err := hostKernel()
	if err != nil {
		t.Fatal(err)
	}
	want, err := profileFor(a, k)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Profile()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Profile() is not profileFor(%s, %v)", a.goarch, k)
	}
	got.Syscalls[0].Names[0] = "changed"
	*got.DefaultErrnoRet = 99
	again, _ := Profile()
	if !reflect.DeepEqual(again, want) {
		t.Errorf("changing Profile()'s result changed the next one")
	}
}

// TestDockerResolution: nlx's resolution of Docker's profile is Docker's
// own (GetDefaultProfile) for a process with no capabilities, so the
// deviations are the only differences.
func TestDockerResolution(t *testing.T) {
	a, err := archFor(runtime.GOARCH)
	if err != nil {
		t.Skip(err)
	}
	k, err := hostKernel()
	if err != nil {
		t.Fatal(err)
	}
	want, err := moby.GetDefaultProfile(&specs.Spec{Process: &specs.Process{Capabilities: &specs.LinuxCapabilities{}}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := dockerProfile(a, k)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		g, _ := json.MarshalIndent(got, "", " ")
		w, _ := json.MarshalIndent(want, "", " ")
		t.Errorf("resolution differs from moby's GetDefaultProfile:\ngot  %s\nwant %s", g, w)
	}
}

// TestDeviations: against Docker's profile on the same kernel, nlx's
// allows exactly the same calls but the deviations, and only the native
// architecture.
func TestDeviations(t *testing.T) {
	allowed := func(p *specs.LinuxSeccomp) map[string]bool {
		m := map[string]bool{}
		for _, s := range p.Syscalls {
			if s.Action == specs.ActAllow {
				for _, n := range s.Names {
					m[n] = true
				}
			}
		}
		return m
	}
	var dev []string
	for _, d := range deviations {
		dev = append(dev, d.names...)
	}
	slices.Sort(dev)
	for _, a := range []*arch{archAMD64, archARM64} {
		for _, k := range []kernelVersion{{4, 7}, {4, 8}, {6, 18}} {
			docker, err := dockerProfile(a, k)
			if err != nil {
				t.Fatal(err)
			}
			nlx, err := profileFor(a, k)
			if err != nil {
				t.Fatal(err)
			}
			d, n := allowed(docker), allowed(nlx)
			var lost, gained []string
			for name := range d {
				if !n[name] {
					lost = append(lost, name)
				}
			}
			for name := range n {
				if !d[name] {
					gained = append(gained, name)
				}
			}
			slices.Sort(lost)
			var want []string
			if k.major > 4 || k.minor >= 8 {
				want = dev // Docker allows them from 4.8
			}
			if !slices.Equal(lost, want) || len(gained) > 0 {
				t.Errorf("%s on %v: nlx denies %v and allows %v beyond Docker, want only %v denied", a.goarch, k, lost, gained, want)
			}
			if !slices.Equal(nlx.Architectures, []specs.Arch{a.scmp}) {
				t.Errorf("%s: architectures %v, want only %s", a.goarch, nlx.Architectures, a.scmp)
			}
			if len(docker.Architectures) < 2 {
				t.Errorf("%s: Docker's profile has architectures %v, expected the native one and its 32-bit ABIs", a.goarch, docker.Architectures)
			}
		}
	}
}

// TestCheckProfile: profiles that allow what the issue names are refused,
// whatever Docker's profile becomes.
func TestCheckProfile(t *testing.T) {
	k, _ := hostKernel()
	u := func(v uint) *uint { return &v }
	allow := func(name string, args ...specs.LinuxSeccompArg) func(p *specs.LinuxSeccomp) {
		return func(p *specs.LinuxSeccomp) {
			p.Syscalls = append(p.Syscalls, specs.LinuxSyscall{Names: []string{name}, Action: specs.ActAllow, Args: args})
		}
	}
	dropClone3 := func(p *specs.LinuxSeccomp) {
		p.Syscalls = slices.DeleteFunc(p.Syscalls, func(s specs.LinuxSyscall) bool { return slices.Contains(s.Names, "clone3") })
	}
	for name, mutate := range map[string]func(*specs.LinuxSeccomp){
		"keyctl":         allow("keyctl"),
		"ptrace":         allow("ptrace"),
		"mount":          allow("mount"),
		"unshare":        allow("unshare"),
		"bpf":            allow("bpf"),
		"io_uring_setup": allow("io_uring_setup"),
		"userfaultfd":    allow("userfaultfd"),
		"init_module logged": func(p *specs.LinuxSeccomp) {
			allow("init_module")(p)
			p.Syscalls[len(p.Syscalls)-1].Action = specs.ActLog
		},
		"clone unconditionally":      allow("clone"),
		"clone without NEWUSER":      allow("clone", specs.LinuxSeccompArg{Index: 0, Op: specs.OpMaskedEqual, Value: nsFlags &^ unix.CLONE_NEWUSER}),
		"clone, flags as argument 1": allow("clone", specs.LinuxSeccompArg{Index: 1, Op: specs.OpMaskedEqual, Value: nsFlags}),
		"personality no-ASLR":        allow("personality", specs.LinuxSeccompArg{Index: 0, Op: specs.OpEqualTo, Value: 0x40000}),
		"personality any":            allow("personality"),
		"no clone3 rule":             dropClone3,
		"clone3 EPERM": func(p *specs.LinuxSeccomp) {
			dropClone3(p)
			p.Syscalls = append(p.Syscalls, specs.LinuxSyscall{Names: []string{"clone3"}, Action: specs.ActErrno, ErrnoRet: u(1)})
		},
		"default allow": func(p *specs.LinuxSeccomp) { p.DefaultAction = specs.ActAllow },
	} {
		t.Run(name, func(t *testing.T) {
			p, err := profileFor(archAMD64, k)
			if err != nil {
				t.Fatal(err)
			}
			mutate(p)
			if err := checkProfile(p); err == nil {
				t.Errorf("checkProfile accepted it")
			}
		})
	}
}

func TestParseRelease(t *testing.T) {
	for _, c := range []struct {
		in   string
		want kernelVersion
		ok   bool
	}{
		{"6.18.44-fc-v1045", kernelVersion{6, 18}, true},
		{"6.12.25+rpt-rpi-2712", kernelVersion{6, 12}, true},
		{"3.12-1-amd64", kernelVersion{3, 12}, true},
		{"4.8", kernelVersion{4, 8}, true},
		{"garbage", kernelVersion{}, false},
	} {
		got, err := parseRelease(c.in)
		if (err == nil) != c.ok || c.ok && got != c.want {
			t.Errorf("parseRelease(%q) = %v, %v; want %v (ok %v)", c.in, got, err, c.want, c.ok)
		}
	}
}

// TestCompileRefuses: what the program cannot express is an error.
func TestCompileRefuses(t *testing.T) {
	k, _ := hostKernel()
	u := func(v uint) *uint { return &v }
	rule := func(s specs.LinuxSyscall) func(*specs.LinuxSeccomp) {
		return func(p *specs.LinuxSeccomp) { p.Syscalls = append(p.Syscalls, s) }
	}
	docker, err := dockerProfile(archAMD64, k)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, want string
		mutate     func(*specs.LinuxSeccomp)
	}{
		{"Docker's i386 and x32", "architecture SCMP_ARCH_X86", func(p *specs.LinuxSeccomp) { p.Architectures = docker.Architectures }},
		{"arm64's architecture", "architecture SCMP_ARCH_AARCH64", func(p *specs.LinuxSeccomp) { p.Architectures = []specs.Arch{specs.ArchAARCH64} }},
		{"flags", "flags", func(p *specs.LinuxSeccomp) { p.Flags = []specs.LinuxSeccompFlag{specs.LinuxSeccompFlagLog} }},
		{"listener", "listener", func(p *specs.LinuxSeccomp) { p.ListenerPath = "/run/agent.sock" }},
		{"notify", "cannot be compiled", rule(specs.LinuxSyscall{Names: []string{"getcwd"}, Action: specs.ActNotify})},
		{"trace", "cannot be compiled", rule(specs.LinuxSyscall{Names: []string{"getcwd"}, Action: specs.ActTrace})},
		{"trace default", "default action", func(p *specs.LinuxSeccomp) { p.DefaultAction = specs.ActTrace }},
		{"two actions", "two actions", rule(specs.LinuxSyscall{Names: []string{"read"}, Action: specs.ActKillProcess})},
		{"argument twice", "compared twice", rule(specs.LinuxSyscall{Names: []string{"getcwd"}, Action: specs.ActAllow, Args: []specs.LinuxSeccompArg{
			{Index: 0, Op: specs.OpGreaterThan, Value: 1}, {Index: 0, Op: specs.OpLessThan, Value: 9}}})},
		{"argument 6", "index 6", rule(specs.LinuxSyscall{Names: []string{"getcwd"}, Action: specs.ActAllow, Args: []specs.LinuxSeccompArg{{Index: 6, Op: specs.OpEqualTo}}})},
		{"operator", "operator", rule(specs.LinuxSyscall{Names: []string{"getcwd"}, Action: specs.ActAllow, Args: []specs.LinuxSeccompArg{{Index: 0, Op: "SCMP_CMP_BITS"}}})},
		{"errno 5000", "errno 5000", rule(specs.LinuxSyscall{Names: []string{"getcwd"}, Action: specs.ActErrno, ErrnoRet: u(5000)})},
		{"unknown name under allow", "no syscall", func(p *specs.LinuxSeccomp) {
			p.DefaultAction = specs.ActAllow
			p.Syscalls = []specs.LinuxSyscall{{Names: []string{"keyctl", "chown32"}, Action: specs.ActErrno}}
		}},
		{"too long", "instructions", func(p *specs.LinuxSeccomp) {
			for v := range uint64(1000) {
				p.Syscalls = append(p.Syscalls, specs.LinuxSyscall{Names: []string{"keyctl"}, Action: specs.ActLog,
					Args: []specs.LinuxSeccompArg{{Index: 1, Op: specs.OpEqualTo, Value: v}}})
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, err := profileFor(archAMD64, k)
			if err != nil {
				t.Fatal(err)
			}
			c.mutate(p)
			_, err = compile(p, archAMD64)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("compile: %v, want an error with %q", err, c.want)
			}
		})
	}
}

// TestProgram: the native program is whole struct sock_filter records,
// within the kernel's limit, the same on every call and not shared.
func TestProgram(t *testing.T) {
	if _, err := archFor(runtime.GOARCH); err != nil {
		t.Skip(err)
	}
	if _, err := Program(nil); err == nil {
		t.Errorf("Program(nil) succeeded")
	}
	p, err := Profile()
	if err != nil {
		t.Fatal(err)
	}
	b1, err := Program(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(b1)%8 != 0 || len(b1)/8 > unix.BPF_MAXINSNS || len(b1) == 0 {
		t.Fatalf("program of %d bytes: not 1 to %d records of 8", len(b1), unix.BPF_MAXINSNS)
	}
	b1[0] ^= 0xff
	b2, err := Program(p)
	if err != nil {
		t.Fatal(err)
	}
	if b1[0] == b2[0] {
		t.Errorf("changing Program()'s result changed the cached program")
	}
	b1[0] ^= 0xff
	if !bytes.Equal(b1, b2) {
		t.Errorf("two calls gave different programs")
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if b, err := Program(p); err != nil || !bytes.Equal(b, b2) {
				t.Errorf("concurrent Program: %v, or a different program", err)
			}
		})
	}
	wg.Wait()
	q, _ := Profile()
	q.Syscalls = q.Syscalls[1:]
	b3, err := Program(q)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(b3, b2) {
		t.Errorf("a different profile gave the cached program")
	}
}
