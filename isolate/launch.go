package isolate

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/nlx-dev/nlx/internal/procid"
	"github.com/nlx-dev/nlx/internal/reason"

	"github.com/nlx-dev/nlx/isolate/seccomp"
)

// Identity is what the state records about a running launch, before the
// provider runs: enough to find the process tree again after nlx restarts,
// and to prove that a pid still names the process that was launched.
type Identity struct {
	LaunchID string `json:"launch_id"`
	// The backend process (bwrap, or runc run, which stays outside the
	// launch cgroup): pid, start time (field 22 of /proc/PID/stat), pid
	// namespace, boot id, host, user.
	procid.Identity
	PGID       int       `json:"pgid"`
	Backend    Backend   `json:"backend"`
	Cgroup     string    `json:"cgroup"`      // the path in every hierarchy, such as /nlx/ID
	CgroupMode string    `json:"cgroup_mode"` // v1, hybrid or v2
	Workspace  string    `json:"workspace"`
	Policy     Policy    `json:"policy"`
	Boundary   string    `json:"boundary"` // BoundaryFilesystem or BoundaryNone
	Bundle     string    `json:"bundle,omitempty"`
	RuncRoot   string    `json:"runc_root,omitempty"`
	Started    time.Time `json:"started"`
}

// Recorder keeps identities and stop receipts in the state. Record must
// be durable before it returns. With either backend the provider runs only
// after it: bwrap waits on --block-fd, runc is held stopped at its exec
// (see startHeld). Launch returns only after Record, and kills the tree if
// Record fails.
type Recorder interface {
	Record(ctx context.Context, id Identity) error
	// Receipt records how the launch ended and releases its identity.
	Receipt(ctx context.Context, launchID string, r Receipt) error
}

// Options are how to launch, as opposed to what (the Request).
type Options struct {
	// Recorder is required.
	Recorder Recorder
	// LaunchID names the launch, its cgroup and its runc container;
	// generated when empty. 1-64 of [a-z0-9_.-], starting alphanumeric.
	LaunchID string
	// Stdin, Stdout and Stderr become the provider's fds 0-2; nil is
	// /dev/null.
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// CgroupParent defaults to DefaultCgroupParent.
	CgroupParent string
	// StateDir defaults to DefaultStateDir.
	StateDir string
}

var launchIDPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,63}$`)

// Process is a running launch.
type Process struct {
	Identity Identity
	// Spec is the spec the backend ran: Compile's, plus the cgroup path
	// for runc.
	Spec *specs.Spec

	done  chan struct{}
	state *os.ProcessState
	err   error
}

// Wait waits for the backend process to exit and returns its state. Both
// backends exit with the provider's status (128+n when a signal killed
// it). Wait neither stops the tree nor writes a receipt; Stop does.
func (p *Process) Wait(ctx context.Context) (*os.ProcessState, error) {
	select {
	case <-p.done:
		return p.state, p.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// LaunchPiped launches req (as Launch) with its stdin and stdout on two
// new pipes, whatever opts says of them, and returns nlx's ends: the
// process's stdin to write and its stdout to read. A failure closes both.
func LaunchPiped(ctx context.Context, req Request, opts Options) (_ *Process, stdin, stdout *os.File, err error) {
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, nil, nil, fmt.Errorf("launch: %w", err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, nil, nil, fmt.Errorf("launch: %w", err)
	}
	opts.Stdin, opts.Stdout = inR, outW
	proc, err := Launch(ctx, req, opts)
	inR.Close()
	outW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		return nil, nil, nil, err
	}
	return proc, inW, outR, nil
}

// Launch compiles req, creates the launch cgroup, starts the backend so
// that every process of the sandbox is in the cgroup before it executes
// anything of the provider, and has opts.Recorder record the identity
// before it returns, and before the provider runs at all. A refusal or a
// failure leaves nothing running and no cgroup behind. ctx bounds the launch only, not the process: Stop ends it.
//
// Launch marks the calling process's descriptors above 2 close-on-exec:
// whatever nlx inherited or a library opened without that flag would
// otherwise reach the provider.
func Launch(ctx context.Context, req Request, opts Options) (_ *Process, err error) {
	if opts.Recorder == nil {
		return nil, errors.New("launch: no recorder: nlx never starts a process it cannot account for")
	}
	id := opts.LaunchID
	if id == "" {
		id = newID()
	}
	if !launchIDPattern.MatchString(id) {
		return nil, fmt.Errorf("launch: id %q is not 1-64 of [a-z0-9_.-]", id)
	}
	parent := opts.CgroupParent
	if parent == "" {
		parent = DefaultCgroupParent
	}
	if !filepath.IsAbs(parent) || filepath.Clean(parent) != parent {
		return nil, fmt.Errorf("launch: cgroup parent %q must be a clean absolute path", parent)
	}
	stateDir := opts.StateDir
	if stateDir == "" {
		stateDir = DefaultStateDir
	}

	spec, h, err := compile(req)
	if err != nil {
		return nil, err
	}
	// bwrap holds its own copies once started; runc binds the paths,
	// checked on the handles (see checkAncestors).
	defer h.close()
	backend, bin, err := choose(ctx, req.Backend)
	if err != nil {
		return nil, err
	}
	if backend == Bwrap {
		if other, _ := bwrapAsOther(spec.Process.User); other {
			reachErr := rootFSPrepared(spec)
			if reachErr == nil {
				reachErr = checkReach(spec, spec.Process.User)
			}
			if reachErr != nil {
				// Auto takes runc (root resolves the sources) where it
				// works; an explicit bwrap is refused.
				if req.Backend != Auto {
					return nil, reachErr
				}
				if bin, err = Runc.usable(ctx); err != nil {
					return nil, errors.Join(reachErr, err)
				}
				backend = Runc
			}
		}
	}
	if err := seccompUsable(ctx, backend, bin); err != nil {
		return nil, err
	}
	host, err := cgroupHostCached()
	if err != nil {
		return nil, err
	}
	cg, err := createCgroup(host, parent, id, spec.Linux.Resources, backend == Runc)
	if err != nil {
		return nil, err
	}
	ident := Identity{
		LaunchID:   id,
		Backend:    backend,
		Cgroup:     cg.path,
		CgroupMode: modeName(host.mode),
		Workspace:  req.Workspace,
		Policy:     req.Policy,
		Boundary:   spec.Annotations[AnnotationBoundary],
	}
	defer func() {
		if err != nil {
			killTree(cg)
			cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			cg.remove(cctx)
			removeRuncState(ident)
		}
	}()

	var args []string
	var pass []*os.File
	switch backend {
	case Bwrap:
		var fds bwrapFDs
		if pass, fds, err = bwrapPass(spec, h); err != nil {
			return nil, err
		}
		defer pass[0].Close() // the seccomp pipe; the handles are h's
		if args, err = bwrapArgs(spec, fds); err != nil {
			return nil, err
		}
	case Runc:
		spec.Linux.CgroupsPath = cg.path + "/" + containerLeaf
		ident.Bundle = filepath.Join(stateDir, "bundles", id)
		ident.RuncRoot = filepath.Join(stateDir, "runc")
		// A bundle of this id can only be left by an nlx that died (its
		// launch cgroup, just created exclusively, did not exist): none of
		// it may be mixed into this launch's.
		if err := os.RemoveAll(ident.Bundle); err != nil {
			return nil, fmt.Errorf("launch %s: remove a dead launch's bundle: %w", id, err)
		}
		if err := writeBundle(ident.Bundle, spec); err != nil {
			return nil, err
		}
		args = runcRunArgs(ident.RuncRoot, ident.Bundle, id)
	}

	var cred *syscall.Credential
	if backend == Bwrap {
		cred = bwrapCredential(spec)
	}
	st, err := startBackend(cg, backend, bin, args, pass, cred, opts)
	if err != nil {
		return nil, fmt.Errorf("launch %s: start %s: %w", id, backend, err)
	}
	defer st.close()
	cmd := st.cmd
	pid := cmd.Process.Pid
	abort := func(cause error) error {
		// Everything dies before the gate is closed (st.close, deferred):
		// bwrap takes EOF on it as a go. The backend first, so that runc
		// starts nothing more in the cgroup, then the cgroup.
		cmd.Process.Kill()
		cmd.Wait()
		killTree(cg)
		return cause
	}
	pi, err := identify(pid)
	if err != nil {
		return nil, abort(fmt.Errorf("launch %s: identify pid %d: %w", id, pid, err))
	}
	ident.Identity, ident.PGID, ident.Started = pi, pid, time.Now().UTC()
	if err := ctx.Err(); err != nil {
		return nil, abort(fmt.Errorf("launch %s: %w", id, err))
	}
	// From here on a cancellation neither interrupts the record, a write
	// that may commit anyway, nor the stop that releases it: the launch is
	// recorded and running, or stopped with a receipt.
	bg := context.WithoutCancel(ctx)
	if err := opts.Recorder.Record(bg, ident); err != nil {
		return nil, abort(fmt.Errorf("launch %s: record identity: %w", id, err))
	}
	if err := st.release(); err != nil {
		err = fmt.Errorf("launch %s: %w", id, err)
		return nil, stopFailed(bg, ident, opts.Recorder, abort(err))
	}

	p := &Process{Identity: ident, Spec: spec, done: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			err = nil
		}
		p.state, p.err = cmd.ProcessState, err
		close(p.done)
	}()
	return p, nil
}

// seccompUsable refuses a launch whose filter cannot be installed: a kernel
// without seccomp filters, or a runc built without libseccomp (which would
// run the container unfiltered). Remembered for the life of the process.
func seccompUsable(ctx context.Context, b Backend, bin string) error {
	if err := seccompHost(); err != nil {
		return seccompRefusal(err)
	}
	if b != Runc {
		return nil
	}
	if _, ok := runcSeccomp.Load(bin); ok {
		return nil
	}
	if err := seccomp.RuncSupports(ctx, bin); err != nil {
		return seccompRefusal(err)
	}
	runcSeccomp.Store(bin, true)
	return nil
}

var (
	seccompHost = sync.OnceValue(seccomp.Available)
	runcSeccomp sync.Map // runc path -> true
)

func seccompRefusal(err error) *reason.Error {
	var se *reason.Error
	if errors.As(err, &se) {
		return &reason.Error{Code: se.Code, Msg: se.Msg}
	}
	return refuse(reason.SeccompUnavailable, "%v", err)
}

// stopFailed ends a launch whose identity is already recorded, so that the
// record is released with a receipt, and returns cause.
func stopFailed(ctx context.Context, id Identity, rec Recorder, cause error) error {
	if _, err := Stop(ctx, id, 0, rec); err != nil {
		return errors.Join(cause, fmt.Errorf("stop after failed launch: %w", err))
	}
	return cause
}

var self = sync.OnceValues(procid.Self)

// identify names the process pid as seen from this pid namespace.
func identify(pid int) (procid.Identity, error) {
	s, err := self()
	if err != nil {
		return procid.Identity{}, err
	}
	start, err := procid.StartTime(pid)
	if err != nil {
		return procid.Identity{}, err
	}
	return procid.Identity{PID: pid, Start: start, PidNS: s.PidNS, Boot: s.Boot, Host: s.Host, User: s.User}, nil
}

// NewLaunchID is a random launch id, the one Launch makes when
// Options.LaunchID is empty: for a caller that must name the launch before
// it is made (its egress records).
func NewLaunchID() string { return newID() }

func newID() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Available reports whether b can run a sandbox here, by running a trivial
// one with the namespaces a launch uses; an error is a *reason.Error with code
// no_backend.
func (b Backend) Available(ctx context.Context) error {
	path, err := b.lookPath()
	if err != nil {
		return err
	}
	switch b {
	case Bwrap:
		err = probe(ctx, path, bwrapProbeArgs()...)
	case Runc:
		err = runcProbe(ctx, path)
	}
	if err != nil {
		return refuse(reason.NoBackend, "%s does not work here: %v", b, err)
	}
	return nil
}

// lookPaths remembers where each backend was found, per PATH.
var lookPaths sync.Map // "name\x00PATH" -> path

func (b Backend) lookPath() (string, error) {
	switch b {
	case Bwrap, Runc:
		key := string(b) + "\x00" + os.Getenv("PATH")
		if p, ok := lookPaths.Load(key); ok {
			return p.(string), nil
		}
		p, err := exec.LookPath(string(b))
		if err != nil {
			return "", refuse(reason.NoBackend, "%s is not installed: %v", b, err)
		}
		lookPaths.Store(key, p)
		return p, nil
	}
	return "", refuse(reason.NoBackend, "unknown backend %q: want bwrap or runc", b)
}

// usable is Available, remembered per binary for the life of the process:
// a launch should not pay for a probe sandbox every time.
var usable sync.Map // path -> true

func (b Backend) usable(ctx context.Context) (string, error) {
	path, err := b.lookPath()
	if err != nil {
		return "", err
	}
	if _, ok := usable.Load(path); ok {
		return path, nil
	}
	if err := b.Available(ctx); err != nil {
		return "", err
	}
	usable.Store(path, true)
	return path, nil
}

// choose resolves the request's backend: an explicit one must work;
// Auto takes bwrap where it works, else runc.
func choose(ctx context.Context, b Backend) (Backend, string, error) {
	if b != Auto {
		path, err := b.usable(ctx)
		return b, path, err
	}
	var why []string
	for _, c := range []Backend{Bwrap, Runc} {
		path, err := c.usable(ctx)
		if err == nil {
			return c, path, nil
		}
		var r *reason.Error
		if errors.As(err, &r) {
			why = append(why, r.Msg)
		} else {
			why = append(why, err.Error())
		}
	}
	return "", "", refuse(reason.NoBackend, "no usable backend: %s", strings.Join(why, "; "))
}
