package isolate

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/containerd/cgroups/v3"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// The cgroup layer writes cgroupfs itself rather than through
// containerd/cgroups' cgroup1 and cgroup2 packages: those pull in dbus,
// go-systemd, cilium/ebpf and logrus, none of which nlx needs to create a
// directory, write four limits and list pids. containerd/cgroups still
// decides the host's mode (cgroups.Mode), so nlx and containerd agree on it.

// DefaultCgroupParent is where every launch's cgroup lives, in every
// hierarchy: /sys/fs/cgroup/<controller>/nlx/<launch id> on v1,
// /sys/fs/cgroup/nlx/<launch id> on v2.
const DefaultCgroupParent = "/nlx"

// hierarchy is one mounted cgroup hierarchy.
type hierarchy struct {
	mount       string   // where it is mounted
	v2          bool     // cgroup2
	controllers []string // v1: from the mount options; v2: cgroup.controllers
}

func (h *hierarchy) has(ctrl string) bool { return slices.Contains(h.controllers, ctrl) }

// dir is where cgroup path p (such as /nlx/ID) lives in this hierarchy.
func (h *hierarchy) dir(p string) string { return filepath.Join(h.mount, p) }

// cgroupHost is the host's cgroup layout, read from /proc/self/mountinfo.
type cgroupHost struct {
	mode        cgroups.CGMode
	hierarchies []*hierarchy
}

func modeName(m cgroups.CGMode) string {
	switch m {
	case cgroups.Legacy:
		return "v1"
	case cgroups.Hybrid:
		return "hybrid"
	case cgroups.Unified:
		return "v2"
	}
	return "unavailable"
}

var (
	hostMu     sync.Mutex
	hostCached *cgroupHost
)

// cgroupHostCached is loadCgroupHost, read once per process: cgroup
// mounts do not move under a running nlx, and a launch should not parse
// mountinfo twice. (Doctor reads it afresh.)
func cgroupHostCached() (*cgroupHost, error) {
	hostMu.Lock()
	defer hostMu.Unlock()
	if hostCached != nil {
		return hostCached, nil
	}
	h, err := loadCgroupHost()
	if err != nil {
		return nil, err
	}
	hostCached = h
	return h, nil
}

func loadCgroupHost() (*cgroupHost, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("cgroups: %w", err)
	}
	defer f.Close()
	h := &cgroupHost{mode: cgroups.Mode()}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent major:minor root mountpoint options [optional...] - fstype source superoptions
		fields := strings.Fields(sc.Text())
		sep := slices.Index(fields, "-")
		if sep < 5 || len(fields) < sep+4 {
			continue
		}
		fstype, super := fields[sep+1], fields[sep+3]
		mount := unescapeMount(fields[4])
		switch fstype {
		case "cgroup":
			var ctrls []string
			for _, o := range strings.Split(super, ",") {
				switch o {
				case "rw", "ro", "relatime", "noexec", "nosuid", "nodev", "clone_children", "xattr":
				default:
					if !strings.HasPrefix(o, "release_agent=") {
						ctrls = append(ctrls, o)
					}
				}
			}
			h.hierarchies = append(h.hierarchies, &hierarchy{mount: mount, controllers: ctrls})
		case "cgroup2":
			data, err := os.ReadFile(filepath.Join(mount, "cgroup.controllers"))
			if err != nil {
				continue
			}
			h.hierarchies = append(h.hierarchies, &hierarchy{mount: mount, v2: true, controllers: strings.Fields(string(data))})
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("cgroups: read mountinfo: %w", err)
	}
	return h, nil
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// find returns the hierarchy holding ctrl. A v1 hierarchy wins: on a
// hybrid host a controller bound to v1 is listed nowhere on v2 anyway.
func (h *cgroupHost) find(ctrl string) *hierarchy {
	for _, x := range h.hierarchies {
		if !x.v2 && x.has(ctrl) {
			return x
		}
	}
	for _, x := range h.hierarchies {
		if x.v2 && x.has(ctrl) {
			return x
		}
	}
	return nil
}

// require refuses a launch the host cannot limit.
func (h *cgroupHost) require(needCPU bool) error {
	if h.find("memory") == nil {
		return refuse(CodeCgroupMemoryUnavailable, "no cgroup memory controller (cgroup mode %s): %s", modeName(h.mode), piMemoryHint)
	}
	if h.find("pids") == nil {
		return refuse(CodeCgroupPidsUnavailable, "no cgroup pids controller (cgroup mode %s): use a kernel with CONFIG_CGROUP_PIDS", modeName(h.mode))
	}
	if needCPU && h.find("cpu") == nil {
		return refuse(CodeCgroupCPUUnavailable, "no cgroup cpu controller (cgroup mode %s): use a kernel with CONFIG_CFS_BANDWIDTH or drop the workspace's cpu limit", modeName(h.mode))
	}
	return nil
}

// cgroup is one launch's cgroup: the same path in every hierarchy that
// holds a controller it uses.
type cgroup struct {
	host *cgroupHost
	path string       // such as /nlx/ID
	used []*hierarchy // hierarchies it was created in, limits first
}

// containerLeaf is where runc puts the container: below the launch
// cgroup, so that the launch's limits hold for it whatever runc does. runc
// itself stays outside: it is the runtime, not the provider, and it moves
// the container's first process into containerLeaf before that process
// executes the provider.
const containerLeaf = "container"

// createCgroup creates parent/id with res's limits in every hierarchy
// holding memory, pids, cpu (when limited) and, on v1, freezer (to stop a
// tree that forks while it is being killed). With delegate, a v2 cgroup
// hands its controllers to children (runc's container cgroup).
func createCgroup(h *cgroupHost, parent, id string, res *specs.LinuxResources, delegate bool) (_ *cgroup, err error) {
	needCPU := res != nil && res.CPU != nil
	if err := h.require(needCPU); err != nil {
		return nil, err
	}
	c := &cgroup{host: h, path: filepath.Join("/", parent, id)}
	want := []string{"memory", "pids"}
	if needCPU {
		want = append(want, "cpu")
	}
	v2ctrls := map[*hierarchy][]string{}
	for _, ctrl := range want {
		x := h.find(ctrl)
		if !slices.Contains(c.used, x) {
			c.used = append(c.used, x)
		}
		if x.v2 {
			v2ctrls[x] = append(v2ctrls[x], ctrl)
		}
	}
	if fr := h.find("freezer"); fr != nil && !fr.v2 && !slices.Contains(c.used, fr) {
		c.used = append(c.used, fr)
	}
	var created []string
	defer func() {
		// Only what this call created: an existing directory of the same
		// name belongs to another launch.
		for i := len(created) - 1; err != nil && i >= 0; i-- {
			unix.Rmdir(created[i])
		}
	}()
	for _, x := range c.used {
		if err := c.mkdirs(x, parent, v2ctrls[x], delegate); err != nil {
			return nil, err
		}
		created = append(created, x.dir(c.path))
	}
	if err := c.setLimits(res); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *cgroup) mkdirs(x *hierarchy, parent string, v2ctrls []string, delegate bool) error {
	if x.v2 {
		// Every level from the mount down must hand the controllers to
		// its children.
		enable := strings.Join(prefixed(v2ctrls), " ")
		if err := enableControllers(x.mount, v2ctrls, enable); err != nil {
			return err
		}
		p := x.mount
		for _, part := range strings.Split(strings.Trim(parent, "/"), "/") {
			if part == "" {
				continue
			}
			p = filepath.Join(p, part)
			if err := os.Mkdir(p, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
				return cgroupWriteError(x, err)
			}
			if err := enableControllers(p, v2ctrls, enable); err != nil {
				return err
			}
		}
	} else if err := os.MkdirAll(x.dir(parent), 0o755); err != nil {
		return cgroupWriteError(x, err)
	}
	dir := x.dir(c.path)
	if err := os.Mkdir(dir, 0o755); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("cgroup %s already exists: launch id in use", dir)
		}
		return cgroupWriteError(x, err)
	}
	if delegate && x.v2 {
		// Before any process joins: a v2 cgroup with processes cannot
		// delegate.
		if err := enableControllers(dir, v2ctrls, strings.Join(prefixed(v2ctrls), " ")); err != nil {
			unix.Rmdir(dir)
			return err
		}
	}
	return nil
}

func prefixed(ctrls []string) []string {
	out := make([]string, len(ctrls))
	for i, c := range ctrls {
		out[i] = "+" + c
	}
	return out
}

// enableControllers delegates ctrls to dir's children unless already done
// (writing subtree_control of a cgroup with processes fails, and the root's
// is usually set up by the init system).
func enableControllers(dir string, ctrls []string, enable string) error {
	if len(ctrls) == 0 {
		return nil
	}
	data, err := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control"))
	if err != nil {
		return fmt.Errorf("cgroup %s: %w", dir, err)
	}
	have := strings.Fields(string(data))
	missing := false
	for _, c := range ctrls {
		missing = missing || !slices.Contains(have, c)
	}
	if !missing {
		return nil
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte(enable), 0o644); err != nil {
		return fmt.Errorf("cgroup %s: enable %s: %w", dir, enable, err)
	}
	return nil
}

func cgroupWriteError(x *hierarchy, err error) error {
	if errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.EROFS) {
		return fmt.Errorf("cgroup %s: %w (nlx needs root, or a cgroup subtree delegated to its user)", x.mount, err)
	}
	return fmt.Errorf("cgroup %s: %w", x.mount, err)
}

// setLimits writes res into the launch cgroup. Swap is never granted.
func (c *cgroup) setLimits(res *specs.LinuxResources) error {
	if res == nil {
		return nil
	}
	type write struct {
		ctrl, v1file, v2file, value string
		optional                    bool // absent when the kernel does not account it
	}
	var ws []write
	if res.Memory != nil && res.Memory.Limit != nil {
		v := strconv.FormatInt(*res.Memory.Limit, 10)
		ws = append(ws,
			write{"memory", "memory.limit_in_bytes", "memory.max", v, false},
			// v1: memory+swap equal to memory means no swap; v2 counts
			// swap on its own.
			write{"memory", "memory.memsw.limit_in_bytes", "memory.swap.max", v, true},
		)
	}
	if res.Pids != nil && res.Pids.Limit != nil {
		ws = append(ws, write{"pids", "pids.max", "pids.max", strconv.FormatInt(*res.Pids.Limit, 10), false})
	}
	if res.CPU != nil && res.CPU.Quota != nil && res.CPU.Period != nil {
		q, p := strconv.FormatInt(*res.CPU.Quota, 10), strconv.FormatUint(*res.CPU.Period, 10)
		ws = append(ws,
			write{"cpu", "cpu.cfs_period_us", "", p, false},
			write{"cpu", "cpu.cfs_quota_us", "cpu.max", q, false},
		)
	}
	for _, w := range ws {
		x := c.host.find(w.ctrl)
		file, value := w.v1file, w.value
		if x.v2 {
			file = w.v2file
			switch file {
			case "":
				continue
			case "memory.swap.max":
				value = "0"
			case "cpu.max":
				value = w.value + " " + strconv.FormatUint(*res.CPU.Period, 10)
			}
		}
		p := filepath.Join(x.dir(c.path), file)
		if err := os.WriteFile(p, []byte(value), 0o644); err != nil {
			if w.optional && errors.Is(err, fs.ErrNotExist) {
				continue
			}
			return fmt.Errorf("cgroup limit %s=%s: %w", p, value, err)
		}
	}
	return nil
}

// enter moves pid into the launch cgroup in every hierarchy it uses. Every
// child pid forks afterwards starts there.
func (c *cgroup) enter(pid int) error {
	b := []byte(strconv.Itoa(pid))
	for _, x := range c.used {
		p := filepath.Join(x.dir(c.path), "cgroup.procs")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			return fmt.Errorf("cgroup: move %d into %s: %w", pid, p, err)
		}
	}
	return nil
}

// openCgroup names an existing launch cgroup, as Stop finds it from a
// record. Every hierarchy is searched: runc creates the path in all of
// them, not only in those the launch used.
func openCgroup(h *cgroupHost, path string) *cgroup {
	c := &cgroup{host: h, path: path}
	for _, x := range h.hierarchies {
		if _, err := os.Stat(x.dir(path)); err == nil {
			c.used = append(c.used, x)
		}
	}
	return c
}

// dirs lists the launch cgroup's directories in hierarchy x, deepest first.
func (c *cgroup) dirs(x *hierarchy) []string {
	var out []string
	filepath.WalkDir(x.dir(c.path), func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			out = append(out, p)
		}
		return nil
	})
	slices.Reverse(out)
	return out
}

// members lists every pid in the launch cgroup's subtree.
func (c *cgroup) members() ([]int, error) {
	// Every process is in exactly one pids cgroup, and nothing inside can
	// move itself out (cgroupfs is not mounted in the sandbox): the pids
	// hierarchy alone holds the whole tree. Without it, the union of all.
	hs := c.host.hierarchies
	if x := c.host.find("pids"); x != nil {
		if _, err := os.Stat(x.dir(c.path)); err == nil {
			hs = []*hierarchy{x}
		}
	}
	var pids []int
	for _, x := range hs {
		for _, d := range c.dirs(x) {
			data, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENODEV) {
				continue // removed under us
			}
			if err != nil {
				return nil, fmt.Errorf("cgroup %s: %w", d, err)
			}
			for _, f := range bytes.Fields(data) {
				if pid, err := strconv.Atoi(string(f)); err == nil && !slices.Contains(pids, pid) {
					pids = append(pids, pid)
				}
			}
		}
	}
	return pids, nil
}

// contains reports whether pid is in the launch cgroup, read from
// /proc/PID/cgroup: a pid listed a moment ago may have been recycled.
func (c *cgroup) contains(pid int) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(data), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) == 3 && (parts[2] == c.path || strings.HasPrefix(parts[2], c.path+"/")) {
			return true
		}
	}
	return false
}

// signal sends sig to every member but skip, each through a pidfd opened
// and then checked to be in the cgroup, so that a recycled pid is never
// signalled. It returns how many were signalled.
func (c *cgroup) signal(sig unix.Signal, skip int) (int, error) {
	pids, err := c.members()
	if err != nil {
		return 0, err
	}
	n := 0
	for _, pid := range pids {
		if pid == skip {
			continue
		}
		if signalIf(pid, sig, c.contains) {
			n++
		}
	}
	return n, nil
}

// kill SIGKILLs the subtree, all but spare, until nothing else is left.
// The tree is frozen first, so that nothing forks between listing and
// killing. Sparing the backend process lets it reap the sandbox and clean
// up after it (runc removes its container) instead of leaving zombies to
// the host's init.
func (c *cgroup) kill(ctx context.Context, spare int) (int, error) {
	killed := 0
	for {
		thaw := c.freeze(ctx)
		n, err := c.signal(unix.SIGKILL, spare)
		thaw()
		killed += n
		if err != nil {
			return killed, err
		}
		pids, err := c.members()
		if err != nil || len(pids) == 0 || (len(pids) == 1 && pids[0] == spare) {
			return killed, err
		}
		if err := pause(ctx, 2*time.Millisecond); err != nil {
			return killed, fmt.Errorf("cgroup %s still holds processes: %w", c.path, err)
		}
	}
}

// killAll is kill sparing no one; on v2 cgroup.kill does it at once.
func (c *cgroup) killAll(ctx context.Context) (int, error) {
	for _, x := range c.host.hierarchies {
		if x.v2 {
			// Best effort: absent before Linux 5.14.
			os.WriteFile(filepath.Join(x.dir(c.path), "cgroup.kill"), []byte("1"), 0o644)
		}
	}
	return c.kill(ctx, 0)
}

// freeze freezes the subtree where a freezer exists (v1 freezer, v2
// cgroup.freeze) and returns the thaw. A tree that does not settle within
// a short while is killed anyway: SIGKILL reaches frozen tasks on thaw.
func (c *cgroup) freeze(ctx context.Context) (thaw func()) {
	var undo []func()
	for _, x := range c.host.hierarchies {
		dir := x.dir(c.path)
		switch {
		case !x.v2 && x.has("freezer"):
			state := filepath.Join(dir, "freezer.state")
			if os.WriteFile(state, []byte("FROZEN"), 0o644) != nil {
				continue
			}
			undo = append(undo, func() { os.WriteFile(state, []byte("THAWED"), 0o644) })
			waitFor(ctx, func() bool {
				b, err := os.ReadFile(state)
				return err != nil || strings.TrimSpace(string(b)) == "FROZEN"
			})
		case x.v2:
			f := filepath.Join(dir, "cgroup.freeze")
			if os.WriteFile(f, []byte("1"), 0o644) != nil {
				continue
			}
			undo = append(undo, func() { os.WriteFile(f, []byte("0"), 0o644) })
			waitFor(ctx, func() bool {
				b, err := os.ReadFile(filepath.Join(dir, "cgroup.events"))
				return err != nil || bytes.Contains(b, []byte("frozen 1"))
			})
		}
	}
	return func() {
		for _, u := range undo {
			u()
		}
	}
}

// waitFor polls cond for up to 100ms.
func waitFor(ctx context.Context, cond func() bool) {
	ctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	for !cond() && pause(ctx, time.Millisecond) == nil {
	}
}

func (c *cgroup) empty() (bool, error) {
	pids, err := c.members()
	return len(pids) == 0, err
}

// remove deletes the launch cgroup from every hierarchy, deepest first. A
// cgroup stays busy until its last process has been reaped, which its
// parent (bwrap, runc) may be doing right now.
func (c *cgroup) remove(ctx context.Context) error {
	step := 100 * time.Microsecond
	for {
		err := c.removeDirs()
		if err == nil {
			return nil
		}
		if !errors.Is(err, syscall.EBUSY) {
			return err
		}
		if perr := pause(ctx, step); perr != nil {
			return fmt.Errorf("%w (%v)", err, perr)
		}
		step = min(2*step, 10*time.Millisecond)
	}
}

func (c *cgroup) removeDirs() error {
	var errs []error
	for _, x := range c.host.hierarchies {
		base := x.dir(c.path)
		// The layout nlx and runc create, without listing directories
		// (a v1 memory cgroup lists some thirty files).
		for _, d := range []string{filepath.Join(base, containerLeaf), base} {
			err := unix.Rmdir(d)
			if err == nil || errors.Is(err, syscall.ENOENT) {
				continue
			}
			if d == base && errors.Is(err, syscall.EBUSY) {
				// Busy with processes, or with children of its own.
				for _, sub := range c.dirs(x) {
					if err = unix.Rmdir(sub); err != nil && !errors.Is(err, syscall.ENOENT) {
						break
					}
				}
				if err == nil || errors.Is(err, syscall.ENOENT) {
					continue
				}
			}
			errs = append(errs, &fs.PathError{Op: "rmdir", Path: d, Err: err})
		}
	}
	return errors.Join(errs...)
}

// pause waits d or until ctx is done.
func pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
