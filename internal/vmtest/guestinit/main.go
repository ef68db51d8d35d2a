// Command guestinit is /init of the VM tests' initramfs (internal/vmtest):
// it copies the initramfs into a tmpfs and switches root into it (bubblewrap's
// pivot_root fails on the initramfs root itself), mounts proc, sysfs,
// devtmpfs, devpts, tmpfs and cgroup2, enables +memory +pids +cpu where the
// kernel has them, runs the command the kernel command line gives after
// "--", reaps every orphan while it runs, prints its exit code on the
// console and powers the machine off.
package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// ExitMarker starts the console line that carries the command's exit code.
const ExitMarker = "NLXVM-EXIT "

func main() {
	code := run()
	fmt.Printf("\n%s%d\n", ExitMarker, code)
	unix.Sync()
	unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF)
	unix.Reboot(unix.LINUX_REBOOT_CMD_RESTART) // qemu -no-reboot exits on it
	select {}
}

func fail(format string, args ...any) int {
	fmt.Fprintf(os.Stderr, "guestinit: "+format+"\n", args...)
	return 125
}

func run() int {
	fmt.Println("NLXVM-INIT") // vmtest tells a hang of the boot from one of the command by it
	if os.Getpid() != 1 {
		return fail("not pid 1")
	}
	if err := switchRoot(); err != nil {
		return fail("switch root: %v", err)
	}
	for _, m := range []struct{ src, dst, fs, data string }{
		{"proc", "/proc", "proc", ""},
		{"sysfs", "/sys", "sysfs", ""},
		{"devtmpfs", "/dev", "devtmpfs", ""},
		{"devpts", "/dev/pts", "devpts", "newinstance,ptmxmode=0666"},
		{"tmpfs", "/dev/shm", "tmpfs", "mode=1777"},
		{"tmpfs", "/tmp", "tmpfs", "mode=1777"},
		{"tmpfs", "/run", "tmpfs", "mode=0755"},
		{"cgroup2", "/sys/fs/cgroup", "cgroup2", ""},
	} {
		os.MkdirAll(m.dst, 0o755)
		if err := unix.Mount(m.src, m.dst, m.fs, 0, m.data); err != nil {
			return fail("mount %s: %v", m.dst, err)
		}
	}
	// Each controller on its own: a kernel booted with
	// cgroup_disable=memory lacks one, and the tests see which.
	for _, c := range []string{"+memory", "+pids", "+cpu"} {
		os.WriteFile("/sys/fs/cgroup/cgroup.subtree_control", []byte(c), 0)
	}
	unix.Sethostname([]byte("nlxvm"))
	if len(os.Args) < 2 {
		return fail("no command after -- on the kernel command line")
	}
	cmd := exec.Command(os.Args[1], os.Args[2:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, os.Stdout, os.Stderr
	cmd.Dir = "/"
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "HOME=/root", "TMPDIR=/tmp", "LANG=C"}
	// The kernel hands init the name=value parameters it does not know:
	// the test's environment (vmtest.Guest.Env). Its own HOME and TERM
	// are replaced.
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); name != "HOME" && name != "TERM" && name != "PATH" {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	if err := cmd.Start(); err != nil {
		return fail("start %s: %v", os.Args[1], err)
	}
	// pid 1 reaps every orphan; the command's own status ends the run.
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, 0, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return fail("wait: %v", err)
		}
		if pid == cmd.Process.Pid {
			if ws.Signaled() {
				return 128 + int(ws.Signal())
			}
			return ws.ExitStatus()
		}
	}
}

// switchRoot copies the initramfs into a tmpfs and makes that the root.
func switchRoot() error {
	const nr = "/newroot"
	if err := os.MkdirAll(nr, 0o755); err != nil {
		return err
	}
	if err := unix.Mount("tmpfs", nr, "tmpfs", 0, "mode=0755"); err != nil {
		return err
	}
	err := filepath.Walk("/", func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if p == "/" {
			return nil
		}
		if p == nr || p == "/proc" || p == "/sys" || p == "/dev" {
			return filepath.SkipDir
		}
		dst := filepath.Join(nr, p)
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			t, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(t, dst)
		case fi.IsDir():
			return os.Mkdir(dst, fi.Mode().Perm())
		default:
			in, err := os.Open(p)
			if err != nil {
				return err
			}
			defer in.Close()
			out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_EXCL, fi.Mode().Perm())
			if err != nil {
				return err
			}
			if _, err := io.Copy(out, in); err != nil {
				out.Close()
				return err
			}
			return out.Close()
		}
	})
	if err != nil {
		return err
	}
	if err := os.Chdir(nr); err != nil {
		return err
	}
	if err := unix.Mount(".", "/", "", unix.MS_MOVE, ""); err != nil {
		return err
	}
	if err := unix.Chroot("."); err != nil {
		return err
	}
	return syscall.Chdir("/")
}
