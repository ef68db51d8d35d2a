// Package vmtest boots small virtual machines for tests: a pinned Debian
// kernel (internal/vmtest/fetch.sh, run by make vm), an initramfs written
// here (a static guest init, the test's own static binaries, busybox, and
// where a test needs them the sandboxes with their libraries), under qemu
// with TCG, and reads the guest's verdict off the serial console before a
// deadline. It is how nlx's cgroup v2 and arm64 code paths run for real on
// a v1/hybrid amd64 machine: the Raspberry Pi's world, in a few seconds.
//
// A test that needs qemu or a kernel skips, saying why, where they are
// missing; under CI=true, where .ci/run installs them, it fails.
package vmtest

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nlx-dev/nlx/internal/testtool"
)

// ExitMarker starts the console line that carries the guest command's exit
// code (guestinit prints it).
const ExitMarker = "NLXVM-EXIT "

// guestStarted is the line guestinit prints when it starts.
const guestStarted = "NLXVM-INIT"

// Arch is a guest architecture.
type Arch string

// The guest architectures.
const (
	AMD64 Arch = "amd64"
	ARM64 Arch = "arm64"
)

// qemu is each architecture's emulator and machine, and its console.
var qemu = map[Arch]struct {
	binary, console string
	machine         []string
}{
	// microvm without tsc_early_khz hung about one boot in 15.
	AMD64: {"qemu-system-x86_64", "ttyS0", []string{"-M", "microvm", "-accel", "tcg"}},
	ARM64: {"qemu-system-aarch64", "ttyAMA0", []string{"-M", "virt", "-cpu", "cortex-a72", "-accel", "tcg"}},
}

// Dir is where make vm put the kernels and userlands: $NLX_VM_DIR, else
// .vm at the module root.
func Dir(t testing.TB) string {
	if d := os.Getenv("NLX_VM_DIR"); d != "" {
		return d
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for d := wd; d != "/"; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return filepath.Join(d, ".vm")
		}
	}
	return filepath.Join(wd, ".vm")
}

// Guest is one machine to boot.
type Guest struct {
	Arch Arch
	// Initramfs is what the guest runs; NewGuest starts it with /init,
	// busybox and the directories a system has.
	Initramfs *Initramfs
	// Append are kernel parameters beyond nlx's (cgroup_disable=memory).
	Append []string
	// Env is passed to the command through the kernel command line
	// (NAME=value; values without spaces).
	Env map[string]string
	// Memory in MiB; 512 by default.
	Memory int
	dir    string
	kernel string
}

// NewGuest prepares a guest of arch: it skips t (fails it under CI) when
// qemu or the kernel is missing, and builds the guest's init.
func NewGuest(t testing.TB, arch Arch) *Guest {
	t.Helper()
	q := qemu[arch]
	testtool.Need(t, q.binary)
	dir := Dir(t)
	kernel := filepath.Join(dir, string(arch), "vmlinuz")
	if _, err := os.Stat(kernel); err != nil {
		if testtool.InCI() {
			t.Fatalf("the %s guest kernel is missing under CI=true (make vm fetches it; .ci/run runs it): %v", arch, err)
		}
		t.Skipf("the %s guest kernel is missing (make vm fetches it): %v", arch, err)
	}
	g := &Guest{Arch: arch, Initramfs: NewInitramfs(), Env: map[string]string{}, dir: dir, kernel: kernel}
	for _, d := range []string{"proc", "sys", "dev", "tmp", "run", "root", "srv", "etc", "usr/bin", "usr/sbin", "sbin", "var/tmp"} {
		g.Initramfs.Dir(d, 0o755)
	}
	g.Initramfs.File("etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"))
	g.Initramfs.File("etc/group", 0o644, []byte("root:x:0:\nnogroup:x:65534:\n"))
	g.Initramfs.File("etc/hosts", 0o644, []byte("127.0.0.1 localhost nlxvm\n"))
	if err := g.Initramfs.HostFile("init", Build(t, arch, "./internal/vmtest/guestinit", false)); err != nil {
		t.Fatal(err)
	}
	g.addBusybox(t)
	return g
}

// applets are the busybox commands the guest has (the tests' shell
// scripts use these).
var applets = []string{"sh", "ash", "cat", "echo", "head", "tail", "sleep", "ls", "mkdir", "rm", "true", "false",
	"env", "id", "kill", "ps", "grep", "sed", "dd", "printf", "wc", "yes", "chmod", "ln", "cp", "mv", "stat",
	"readlink", "seq", "test", "[", "touch", "uname", "nproc", "timeout", "pgrep", "pkill", "tr", "cut", "sort",
	"mount", "umount", "hostname", "whoami", "dirname", "basename", "expr", "sync", "xargs", "find", "awk", "od"}

func (g *Guest) addBusybox(t testing.TB) {
	t.Helper()
	bb := filepath.Join(g.dir, string(g.Arch), "root", "bin", "busybox")
	if err := g.Initramfs.HostFile("bin/busybox", bb); err != nil {
		if testtool.InCI() {
			t.Fatalf("the %s guest's busybox is missing under CI=true (make vm): %v", g.Arch, err)
		}
		t.Skipf("the %s guest's busybox is missing (make vm): %v", g.Arch, err)
	}
	for _, a := range applets {
		g.Initramfs.Symlink("bin/"+a, "busybox")
	}
}

// AddHostProgram adds a program of this (amd64) host with the shared
// libraries ldd says it loads, at their own paths.
func (g *Guest) AddHostProgram(t testing.TB, program string) {
	t.Helper()
	if g.Arch != AMD64 {
		t.Fatalf("AddHostProgram: the host's programs are amd64, the guest %s", g.Arch)
	}
	path := testtool.Need(t, program)
	if real, err := filepath.EvalSymlinks(path); err == nil {
		path = real
	}
	// At its own path only (the guest's PATH has the sbin directories):
	// tests compare the program a launch runs with the one PATH finds.
	if err := g.Initramfs.HostFile(path, path); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("ldd", path).Output()
	if err != nil {
		return // static
	}
	for _, m := range regexp.MustCompile(`(/[^ \t\n]+\.so[^ \t\n]*)`).FindAllString(string(out), -1) {
		g.addLib(t, m)
	}
}

// addLib adds a library at its path, following the symlinks to it.
func (g *Guest) addLib(t testing.TB, lib string) {
	for i := 0; i < 8 && !g.Initramfs.Has(lib); i++ {
		fi, err := os.Lstat(lib)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode()&os.ModeSymlink == 0 {
			if err := g.Initramfs.HostFile(lib, lib); err != nil {
				t.Fatal(err)
			}
			return
		}
		target, err := os.Readlink(lib)
		if err != nil {
			t.Fatal(err)
		}
		g.Initramfs.Symlink(lib, target)
		if !filepath.IsAbs(target) {
			target = filepath.Join(filepath.Dir(lib), target)
		}
		lib = target
	}
}

// Userland is the sysroot make vm unpacked for arch's guest (busybox,
// bubblewrap and their libraries, from Debian's packages of that
// architecture).
func Userland(t testing.TB, arch Arch) string {
	t.Helper()
	root := filepath.Join(Dir(t), string(arch), "root")
	if _, err := os.Stat(filepath.Join(root, "usr", "bin", "bwrap")); err != nil {
		if testtool.InCI() {
			t.Fatalf("the %s guest's userland is missing under CI=true (make vm): %v", arch, err)
		}
		t.Skipf("the %s guest's userland is missing (make vm): %v", arch, err)
	}
	return root
}

// AddTree adds every directory, file and symlink under root (a sysroot
// unpacked from Debian packages) at the same paths.
func (g *Guest) AddTree(t testing.TB, root string) {
	t.Helper()
	err := filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		switch {
		case rel == ".":
		case fi.Mode()&os.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			g.Initramfs.Symlink(rel, target)
		case fi.IsDir():
			g.Initramfs.Dir(rel, fi.Mode().Perm())
		case fi.Mode().IsRegular():
			return g.Initramfs.HostFile(rel, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

var (
	buildMu    sync.Mutex
	buildCache = map[string]string{}
	buildDir   string
)

// Build compiles pkg (a package path relative to the module root) for
// linux/arch, static (CGO_ENABLED=0): its test binary when test, else the
// command. Builds are shared by the tests of one process.
func Build(t testing.TB, arch Arch, pkg string, test bool) string {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	key := fmt.Sprintf("%s %s %v", arch, pkg, test)
	if p, ok := buildCache[key]; ok {
		return p
	}
	if buildDir == "" {
		d, err := os.MkdirTemp("", "nlx-vmtest-")
		if err != nil {
			t.Fatal(err)
		}
		buildDir = d
	}
	root := filepath.Dir(Dir(t)) // the module root (Dir is its .vm)
	out := filepath.Join(buildDir, fmt.Sprintf("%s-%d", arch, len(buildCache)))
	args := []string{"build", "-trimpath", "-o", out, pkg}
	if test {
		args = []string{"test", "-c", "-trimpath", "-o", out, pkg}
	}
	cmd := exec.Command("go", args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+string(arch))
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %s for linux/%s: %v\n%s", strings.Join(args, " "), arch, err, b)
	}
	buildCache[key] = out
	return out
}

// Result is what a boot printed and how its command exited.
type Result struct {
	Console string // everything the serial console printed
	Code    int    // the command's exit code; -1 if the guest never said
	Took    time.Duration
}

// Run boots the guest, runs argv in it (after guestinit's setup) and
// returns its console and exit code; it fails t when the guest does not
// power off before timeout.
func (g *Guest) Run(t testing.TB, timeout time.Duration, argv ...string) Result {
	t.Helper()
	img, err := g.Initramfs.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	initrd := filepath.Join(t.TempDir(), "initramfs.cpio")
	if err := os.WriteFile(initrd, img, 0o644); err != nil {
		t.Fatal(err)
	}
	q := qemu[g.Arch]
	cmdline := []string{"console=" + q.console, "quiet", "panic=-1", "cgroup_no_v1=all"}
	if g.Arch == AMD64 {
		cmdline = append(cmdline, "tsc_early_khz=2000000")
	}
	cmdline = append(cmdline, g.Append...)
	for k, v := range g.Env {
		cmdline = append(cmdline, k+"="+v)
	}
	cmdline = append(cmdline, "--")
	for _, a := range argv {
		// The kernel splits its command line at spaces outside double
		// quotes, and has no way to write a double quote inside them.
		if strings.ContainsAny(a, "\"\n") {
			t.Fatalf("guest argument %q: the kernel command line cannot hold a double quote or a newline", a)
		}
		if strings.ContainsAny(a, " \t") {
			a = `"` + a + `"`
		}
		cmdline = append(cmdline, a)
	}
	mem := g.Memory
	if mem == 0 {
		mem = 512
	}
	args := append(append([]string{}, q.machine...), "-m", strconv.Itoa(mem), "-smp", "1", "-nographic", "-no-reboot", "-nic", "none",
		"-kernel", g.kernel, "-initrd", initrd, "-append", strings.Join(cmdline, " "))
	var r Result
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		cmd := exec.CommandContext(ctx, q.binary, args...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		start := time.Now()
		err = cmd.Run()
		r = Result{Console: strings.ReplaceAll(out.String(), "\r", ""), Code: -1, Took: time.Since(start)}
		hung := ctx.Err() != nil
		cancel()
		if !hung {
			break
		}
		// A TCG guest that hangs before its init says anything (seen
		// rarely in early boot) is booted once more; one that hangs in
		// its command fails.
		if attempt == 1 && !strings.Contains(r.Console, guestStarted) {
			t.Logf("the %s guest hung in early boot; booting it again", g.Arch)
			continue
		}
		t.Fatalf("the %s guest did not power off within %s (%s %s):\n%s", g.Arch, timeout, q.binary, strings.Join(cmdline, " "), tail(r.Console, 60))
	}
	if err != nil {
		t.Fatalf("%s: %v\n%s", q.binary, err, tail(r.Console, 60))
	}
	sc := bufio.NewScanner(strings.NewReader(r.Console))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), ExitMarker); ok {
			if n, err := strconv.Atoi(rest); err == nil {
				r.Code = n
			}
		}
	}
	if r.Code < 0 {
		t.Fatalf("the %s guest powered off without its exit line:\n%s", g.Arch, tail(r.Console, 60))
	}
	return r
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
