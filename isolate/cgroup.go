package isolate

import (
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
	"github.com/containerd/cgroups/v3/cgroup1"
	"github.com/containerd/cgroups/v3/cgroup2"
	"github.com/nlx-dev/nlx/internal/reason"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// The cgroup layer is containerd's cgroups: cgroups.Mode tells the host's
// layout, cgroup1 drives the v1 hierarchies (legacy hosts and the v1 half
// of hybrid ones) and cgroup2 the unified one, so that nlx, containerd and
// runc agree on what a host offers and how a cgroup is laid out. A few
// things the library does not do are done by hand, each with its reason
// where it happens: claiming a launch's directory exclusively, dropping v1
// subsystems that are not mounted, bounding a freeze, and (in spawn.go and
// stop.go) creating a process inside the cgroup and signalling through
// pidfds.

// DefaultCgroupParent is where every launch's cgroup lives, in every
// hierarchy: /sys/fs/cgroup/<controller>/nlx/<launch id> on v1,
// /sys/fs/cgroup/nlx/<launch id> on v2.
const DefaultCgroupParent = "/nlx"

// Where cgroups.Mode looks for the unified hierarchy; the library has the
// same paths, unexported.
const (
	unifiedMount = "/sys/fs/cgroup"
	hybridMount  = "/sys/fs/cgroup/unified"
)

// pather is the part of a cgroup1 subsystem that names its directories.
// Every subsystem cgroup1.Default returns has it; the library's own
// interface for it is unexported.
type pather interface {
	cgroup1.Subsystem
	Path(path string) string
}

// cgroupHost is what the host's cgroups offer.
type cgroupHost struct {
	mode cgroups.CGMode
	// v1 are the mounted v1 subsystems.
	v1 []cgroup1.Subsystem
	// memsw: the v1 memory controller accounts swap
	// (memory.memsw.limit_in_bytes exists).
	memsw bool
	// unified is where the cgroup2 hierarchy is mounted, "" when it is
	// not; v2 the controllers its root offers.
	unified string
	v2      []string
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
// mountinfo and stat every hierarchy again. (Doctor reads it afresh.)
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
	h := &cgroupHost{mode: cgroups.Mode()}
	switch h.mode {
	case cgroups.Unified:
		h.unified = unifiedMount
	case cgroups.Hybrid:
		h.unified = hybridMount
	}
	if h.mode == cgroups.Legacy || h.mode == cgroups.Hybrid {
		subs, err := cgroup1.Default()
		if err != nil && !errors.Is(err, cgroup1.ErrMountPointNotExist) {
			return nil, fmt.Errorf("cgroups: %w", err)
		}
		for _, s := range subs {
			// cgroup1.Default keeps every subsystem whose directory
			// exists. A directory that is not a cgroup mount (left on
			// the tmpfs by a kernel booted without the controller)
			// would take limits as plain files: fail closed instead.
			var st unix.Statfs_t
			if p, ok := s.(pather); ok && unix.Statfs(p.Path("/"), &st) == nil && st.Type == unix.CGROUP_SUPER_MAGIC {
				h.v1 = append(h.v1, s)
			}
		}
		if m := h.subsystem(cgroup1.Memory); m != nil {
			_, err := os.Stat(filepath.Join(m.Path("/"), "memory.memsw.limit_in_bytes"))
			h.memsw = err == nil
		}
	}
	if h.unified != "" {
		// Unreadable means no controllers, as for a host without them.
		if root, err := cgroup2.Load("/", cgroup2.WithMountpoint(h.unified)); err == nil {
			h.v2, _ = root.RootControllers()
		}
	}
	return h, nil
}

// subsystem returns the mounted v1 subsystem n, or nil.
func (h *cgroupHost) subsystem(n cgroup1.Name) pather {
	for _, s := range h.v1 {
		if s.Name() == n {
			return s.(pather)
		}
	}
	return nil
}

// find says where ctrl is: a v1 subsystem, or (v2) the unified hierarchy;
// neither when the host lacks it. v1 wins: on a hybrid host a controller
// bound to v1 is listed nowhere on v2 anyway.
func (h *cgroupHost) find(ctrl string) (s pather, v2 bool) {
	if s := h.subsystem(cgroup1.Name(ctrl)); s != nil {
		return s, false
	}
	return nil, slices.Contains(h.v2, ctrl)
}

func (h *cgroupHost) has(ctrl string) bool {
	s, v2 := h.find(ctrl)
	return s != nil || v2
}

// dir is cgroup path p's directory in the hierarchy holding ctrl ("" when
// none does), and whether that is the unified one.
func (h *cgroupHost) dir(ctrl, p string) (dir string, v2 bool) {
	switch s, v2 := h.find(ctrl); {
	case s != nil:
		return s.Path(p), false
	case v2:
		return filepath.Join(h.unified, p), true
	}
	return "", false
}

// dirs is cgroup path p's directory in every hierarchy, existing or not.
func (h *cgroupHost) dirs(p string) []string {
	var out []string
	for _, s := range h.v1 {
		if d := s.(pather).Path(p); !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	if h.unified != "" {
		out = append(out, filepath.Join(h.unified, p))
	}
	return out
}

// require refuses a launch the host cannot limit.
func (h *cgroupHost) require(needCPU bool) error {
	if !h.has("memory") {
		return refuse(reason.CgroupMemory, "no cgroup memory controller (cgroup mode %s): %s", modeName(h.mode), piMemoryHint)
	}
	if !h.has("pids") {
		return refuse(reason.CgroupPids, "no cgroup pids controller (cgroup mode %s): use a kernel with CONFIG_CGROUP_PIDS", modeName(h.mode))
	}
	if needCPU && !h.has("cpu") {
		return refuse(reason.CgroupCPU, "no cgroup cpu controller (cgroup mode %s): use a kernel with CONFIG_CFS_BANDWIDTH or drop the workspace's cpu limit", modeName(h.mode))
	}
	return nil
}

// cgroup is one launch's cgroup: the same path in every hierarchy that
// holds it.
type cgroup struct {
	host *cgroupHost
	path string           // such as /nlx/ID
	v1   cgroup1.Cgroup   // its v1 subsystems; nil when it has none
	v2   *cgroup2.Manager // nil when the unified hierarchy does not hold it
	// opened: found by openCgroup in every hierarchy, rather than
	// created in those the launch limits.
	opened bool
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
func createCgroup(h *cgroupHost, parent, id string, res *specs.LinuxResources, delegate bool) (*cgroup, error) {
	needCPU := res != nil && res.CPU != nil
	if err := h.require(needCPU); err != nil {
		return nil, err
	}
	want := []string{"memory", "pids"}
	if needCPU {
		want = append(want, "cpu")
	}
	return h.create(filepath.Join("/", parent, id), want, res, true, delegate)
}

// hierarchy is a cgroup1.Hierarchy of exactly subs: cgroup1.Default would
// create the cgroup in every mounted subsystem, most of which nlx does not
// use, and parse mountinfo again each time.
func hierarchy(subs []cgroup1.Subsystem) cgroup1.Hierarchy {
	return func() ([]cgroup1.Subsystem, error) { return subs, nil }
}

// create creates the cgroup path in the hierarchies holding ctrls (and the
// v1 freezer with freezer) and writes res into it.
func (h *cgroupHost) create(path string, ctrls []string, res *specs.LinuxResources, freezer, delegate bool) (_ *cgroup, err error) {
	var subs []cgroup1.Subsystem
	var v2ctrls []string
	for _, ctrl := range ctrls {
		switch s, v2 := h.find(ctrl); {
		case s != nil:
			subs = append(subs, s)
		case v2:
			v2ctrls = append(v2ctrls, ctrl)
		default:
			return nil, fmt.Errorf("no %s controller is mounted or enabled", ctrl)
		}
	}
	if fr := h.subsystem(cgroup1.Freezer); freezer && fr != nil {
		subs = append(subs, fr)
	}

	// cgroup1.New and cgroup2.NewManager create with MkdirAll, which
	// adopts an existing cgroup: a launch id in use would have its
	// limits rewritten and, on failure, its processes killed. So each
	// directory is claimed with an exclusive mkdir first, and only what
	// was claimed is deleted again on failure.
	var claimed []cgroup1.Subsystem
	claimedV2 := false
	defer func() {
		if err == nil {
			return
		}
		if len(claimed) > 0 {
			if cg, lerr := cgroup1.Load(cgroup1.StaticPath(path), cgroup1.WithHierarchy(hierarchy(claimed))); lerr == nil {
				cg.Delete()
			}
		}
		if claimedV2 {
			if m, lerr := cgroup2.Load(path, cgroup2.WithMountpoint(h.unified)); lerr == nil {
				m.Delete()
			}
		}
	}()
	for _, s := range subs {
		if err := claim(s.(pather).Path(path)); err != nil {
			return nil, err
		}
		claimed = append(claimed, s)
	}
	if len(v2ctrls) > 0 {
		if err := claim(filepath.Join(h.unified, path)); err != nil {
			return nil, err
		}
		claimedV2 = true
	}

	c := &cgroup{host: h, path: path}
	if len(subs) > 0 {
		c.v1, err = cgroup1.New(cgroup1.StaticPath(path), h.v1Resources(res), cgroup1.WithHierarchy(hierarchy(subs)))
		if err != nil {
			return nil, fmt.Errorf("cgroup %s: %w", path, err)
		}
	}
	if len(v2ctrls) > 0 {
		r := v2Resources(res, v2ctrls)
		// NewManager enables r's controllers in every ancestor's
		// subtree_control, from the mount down.
		if c.v2, err = cgroup2.NewManager(h.unified, path, r); err != nil {
			return nil, fmt.Errorf("cgroup %s: %w", path, err)
		}
		if r.Memory != nil && r.Memory.Max != nil {
			// Swap is never granted. memory.swap.max is absent where
			// the kernel does not account swap, and there is none to
			// grant.
			none := int64(0)
			if err := c.v2.Update(&cgroup2.Resources{Memory: &cgroup2.Memory{Swap: &none}}); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return nil, fmt.Errorf("cgroup %s: %w", path, err)
			}
		}
		if delegate {
			// Toggling the controllers of the (not yet existing)
			// container leaf enables them in its ancestors, the launch
			// cgroup last; before any process joins, since a v2 cgroup
			// with processes cannot delegate.
			leaf, err := cgroup2.Load(path+"/"+containerLeaf, cgroup2.WithMountpoint(h.unified))
			if err == nil {
				err = leaf.ToggleControllers(r.EnabledControllers(), cgroup2.Enable)
			}
			if err != nil {
				return nil, fmt.Errorf("cgroup %s: delegate to %s: %w", path, containerLeaf, err)
			}
		}
	}
	return c, nil
}

// claim creates dir, which must not exist yet.
func claim(dir string) error {
	err := os.Mkdir(dir, 0o755)
	if errors.Is(err, fs.ErrNotExist) {
		// The parent, once per hierarchy.
		if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
			return cgroupWriteError(dir, err)
		}
		err = os.Mkdir(dir, 0o755)
	}
	if err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("cgroup %s already exists: launch id in use", dir)
		}
		return cgroupWriteError(dir, err)
	}
	return nil
}

func cgroupWriteError(dir string, err error) error {
	if errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.EROFS) {
		return fmt.Errorf("cgroup %s: %w (nlx needs root, or a cgroup subtree delegated to its user)", dir, err)
	}
	return fmt.Errorf("cgroup %s: %w", dir, err)
}

// v1Resources is res for cgroup1, which never changes its argument (the
// spec runc gets stays Compile's). Swap is never granted: memory+swap
// equal to memory means none, written only where the kernel accounts
// swap (cgroup1 fails on a file that is not there).
func (h *cgroupHost) v1Resources(res *specs.LinuxResources) *specs.LinuxResources {
	var r specs.LinuxResources
	if res != nil {
		r = *res
	}
	if r.Memory != nil && r.Memory.Limit != nil && h.memsw {
		m := *r.Memory
		m.Swap = m.Limit
		r.Memory = &m
	}
	return &r
}

// v2Resources is res for cgroup2, limited to ctrls (the controllers the
// unified hierarchy holds for this cgroup; on a hybrid host the others
// are on v1). memory and pids get an empty entry even without a limit, so
// that cgroup2 enables them: the tree is accounted for either way.
func v2Resources(res *specs.LinuxResources, ctrls []string) *cgroup2.Resources {
	if res == nil {
		res = &specs.LinuxResources{}
	}
	all := cgroup2.ToResources(res)
	r := &cgroup2.Resources{}
	if slices.Contains(ctrls, "memory") {
		r.Memory = all.Memory
		if r.Memory == nil {
			r.Memory = &cgroup2.Memory{}
		}
	}
	if slices.Contains(ctrls, "pids") {
		r.Pids = all.Pids
		if r.Pids == nil {
			r.Pids = &cgroup2.Pids{}
		}
	}
	if slices.Contains(ctrls, "cpu") {
		r.CPU = all.CPU
	}
	return r
}

// v1Dir is the cgroup's directory in its v1 subsystem n, "" when it has
// none there.
func (c *cgroup) v1Dir(n cgroup1.Name) string {
	if c.v1 == nil {
		return ""
	}
	for _, s := range c.v1.Subsystems() {
		if s.Name() == n {
			return s.(pather).Path(c.path)
		}
	}
	return ""
}

func (c *cgroup) v2Dir() string { return filepath.Join(c.host.unified, c.path) }

// enter moves process pid into the launch cgroup in every hierarchy it
// uses. Every child pid forks afterwards starts there.
func (c *cgroup) enter(pid int) error {
	if c.v1 != nil {
		if err := c.v1.Add(cgroup1.Process{Pid: pid}); err != nil {
			return fmt.Errorf("cgroup: move %d into %s: %w", pid, c.path, err)
		}
	}
	if c.v2 != nil {
		if err := c.v2.AddProc(uint64(pid)); err != nil {
			return fmt.Errorf("cgroup: move %d into %s: %w", pid, c.v2Dir(), err)
		}
	}
	return nil
}

// openCgroup names an existing launch cgroup, as Stop finds it from a
// record. Every hierarchy is searched: runc creates the path in all of
// them, not only in those the launch used.
func openCgroup(h *cgroupHost, path string) (*cgroup, error) {
	c := &cgroup{host: h, path: path, opened: true}
	if len(h.v1) > 0 {
		cg, err := cgroup1.Load(cgroup1.StaticPath(path), cgroup1.WithHierarchy(hierarchy(h.v1)))
		switch {
		case err == nil:
			c.v1 = cg
		case !errors.Is(err, cgroup1.ErrCgroupDeleted):
			return nil, fmt.Errorf("cgroup %s: %w", path, err)
		}
	}
	if h.unified != "" {
		if _, err := os.Stat(filepath.Join(h.unified, path)); err == nil {
			if c.v2, err = cgroup2.Load(path, cgroup2.WithMountpoint(h.unified)); err != nil {
				return nil, fmt.Errorf("cgroup %s: %w", path, err)
			}
		}
	}
	return c, nil
}

// members lists every pid in the launch cgroup's subtree.
func (c *cgroup) members() ([]int, error) {
	var err error
	for range 10 {
		var pids []int
		if pids, err = c.list(); err == nil || !vanished(err) {
			return pids, err
		}
		// A directory went away while the subtree was read (runc
		// removing its container's): read it again.
	}
	return nil, err
}

func vanished(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENODEV)
}

func (c *cgroup) list() ([]int, error) {
	// Every process is in exactly one pids cgroup, and in one unified
	// cgroup, and nothing inside can move itself out (cgroupfs is not
	// mounted in the sandbox): the pids hierarchy alone holds the whole
	// tree, else the unified one. Without either, the union of all.
	if c.v1Dir(cgroup1.Pids) != "" {
		return c.v1Procs(cgroup1.Pids)
	}
	if c.v2 != nil {
		procs, err := c.v2.Procs(true)
		if err != nil {
			if _, serr := os.Stat(c.v2Dir()); vanished(err) && errors.Is(serr, fs.ErrNotExist) {
				return nil, nil // removed
			}
			return nil, fmt.Errorf("cgroup %s: %w", c.v2Dir(), err)
		}
		pids := make([]int, len(procs))
		for i, p := range procs {
			pids[i] = int(p)
		}
		return pids, nil
	}
	var pids []int
	if c.v1 != nil {
		for _, s := range c.v1.Subsystems() {
			ps, err := c.v1Procs(s.Name())
			if err != nil {
				return nil, err
			}
			for _, p := range ps {
				if !slices.Contains(pids, p) {
					pids = append(pids, p)
				}
			}
		}
	}
	return pids, nil
}

func (c *cgroup) v1Procs(n cgroup1.Name) ([]int, error) {
	procs, err := c.v1.Processes(n, true)
	if err != nil {
		if _, serr := os.Stat(c.v1Dir(n)); vanished(err) && errors.Is(serr, fs.ErrNotExist) {
			return nil, nil // removed
		}
		return nil, fmt.Errorf("cgroup %s: %w", c.v1Dir(n), err)
	}
	pids := make([]int, len(procs))
	for i, p := range procs {
		pids[i] = p.Pid
	}
	return pids, nil
}

// contains reports whether pid is in the launch cgroup, read from
// /proc/PID/cgroup: a pid listed a moment ago may have been recycled.
func (c *cgroup) contains(pid int) bool {
	v1, unified, err := cgroups.ParseCgroupFileUnified("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return false
	}
	in := func(p string) bool { return p == c.path || strings.HasPrefix(p, c.path+"/") }
	if in(unified) {
		return true
	}
	for _, p := range v1 {
		if in(p) {
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

// killAll is kill sparing no one; on v2 cgroup2's Kill does it at once.
func (c *cgroup) killAll(ctx context.Context) (int, error) {
	if c.v2 != nil {
		// Only with cgroup.kill (Linux 5.14): without it Kill falls back
		// to signalling pids unchecked and waiting for them, which would
		// reap the backend from under its exec.Cmd. kill below does the
		// same, checked, and confirms.
		if _, err := os.Stat(filepath.Join(c.v2Dir(), "cgroup.kill")); err == nil {
			c.v2.Kill()
		}
	}
	return c.kill(ctx, 0)
}

// freeze freezes the subtree where a freezer exists (v1 freezer, v2
// cgroup.freeze) and returns the thaw. A tree that does not settle within
// a short while is killed anyway: SIGKILL reaches frozen tasks on thaw.
func (c *cgroup) freeze(ctx context.Context) (thaw func()) {
	var undo []func()
	if dir := c.v1Dir(cgroup1.Freezer); dir != "" {
		// By hand, bounded: cgroup1's Freeze retries until the whole
		// tree is frozen, without a deadline and holding the cgroup's
		// lock, and one task in uninterruptible sleep (on FUSE, NFS)
		// keeps a v1 tree FREEZING for good. (Nor is the state read
		// through cgroup1's State: it marks the cgroup deleted for good
		// when any of its directories is missing.) The thaw is cgroup1's.
		state := filepath.Join(dir, "freezer.state")
		if os.WriteFile(state, []byte("FROZEN"), 0o644) == nil {
			undo = append(undo, func() { c.v1.Thaw() })
			waitFor(ctx, func() bool {
				b, err := os.ReadFile(state)
				return err != nil || strings.TrimSpace(string(b)) == "FROZEN"
			})
		}
	}
	if c.v2 != nil && c.v2.Freeze() == nil {
		undo = append(undo, func() { c.v2.Thaw() })
		// cgroup2's Freeze returns once the request is recorded; the
		// tree is frozen when cgroup.events says so.
		events := filepath.Join(c.v2Dir(), "cgroup.events")
		waitFor(ctx, func() bool {
			b, err := os.ReadFile(events)
			return err != nil || bytes.Contains(b, []byte("frozen 1"))
		})
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

// removeGrace bounds remove. cgroup1 and cgroup2 report a cgroup they
// could not remove without saying why, so every failure is retried; the
// one expected is a cgroup still busy with a process its parent (bwrap,
// runc) has not reaped yet.
const removeGrace = 10 * time.Second

// remove deletes the launch cgroup, its subtree included, from every
// hierarchy holding it: runc creates it in all of them, not only in those
// the launch limits.
func (c *cgroup) remove(ctx context.Context) error {
	all := c
	if !c.opened {
		var err error
		if all, err = openCgroup(c.host, c.path); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, removeGrace)
	defer cancel()
	step := 100 * time.Microsecond
	for {
		err := all.delete()
		if err == nil {
			return nil
		}
		if perr := pause(ctx, step); perr != nil {
			return fmt.Errorf("%w (%v)", err, perr)
		}
		step = min(2*step, 10*time.Millisecond)
	}
}

// delete removes the launch cgroup (and runc's container leaf below it).
//
// On v1 it removes the directories itself, deepest first: cgroup1's Delete
// lstat's every file below the cgroup first (33 in a v1 memory cgroup,
// about 10µs each on cgroupfs), which measured +0.4 ms per launch, pushing
// an isolated bwrap launch past 1.5x a raw one. rmdir is what the kernel
// needs anyway, and it refuses (EBUSY) while a process is inside, so
// nothing is removed under a live task; remove retries that. v2 keeps
// cgroup2's Delete.
func (c *cgroup) delete() error {
	var jobs []func() error
	if c.v1 != nil {
		for _, s := range c.v1.Subsystems() {
			p, ok := s.(interface{ Path(string) string })
			if !ok {
				continue
			}
			dir := p.Path(c.path)
			jobs = append(jobs, func() error { return rmdirTree(dir) })
		}
	}
	if c.v2 != nil {
		jobs = append(jobs, func() error {
			if _, err := os.Stat(c.v2Dir()); errors.Is(err, fs.ErrNotExist) {
				return nil // by an earlier call
			}
			return c.v2.Delete()
		})
	}
	errs := make([]error, len(jobs))
	var wg sync.WaitGroup
	for i, job := range jobs {
		wg.Go(func() { errs[i] = job() })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// rmdirTree removes a cgroup directory and the cgroup directories below
// it, children first; one already gone is fine. It reads directory
// entries' types from getdents, never lstat'ing the control files.
func rmdirTree(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.IsDir() {
			if err := rmdirTree(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove cgroup %s: %w", dir, err)
	}
	return nil
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
