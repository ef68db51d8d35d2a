package isolate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// DefaultStateDir holds runc bundles (bundles/ID) and runc's own state
// (runc/), both private to root.
const DefaultStateDir = "/run/nlx"

// writeBundle writes an OCI bundle: dir/config.json is s exactly, and a
// relative root names an empty directory inside the bundle.
func writeBundle(dir string, s *specs.Spec) error {
	if s.Root == nil {
		return fmt.Errorf("runc bundle: spec without root")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("runc bundle: %w", err)
	}
	if !filepath.IsAbs(s.Root.Path) {
		rel := filepath.Clean(s.Root.Path)
		if rel == "." || rel == ".." || strings.HasPrefix(rel, "../") {
			return fmt.Errorf("runc bundle: root %q leaves the bundle", s.Root.Path)
		}
		if err := os.MkdirAll(filepath.Join(dir, rel), 0o755); err != nil {
			return fmt.Errorf("runc bundle: %w", err)
		}
	}
	data, err := json.Marshal(s)
	if err != nil {
		return fmt.Errorf("runc bundle: encode spec: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), data, 0o600); err != nil {
		return fmt.Errorf("runc bundle: %w", err)
	}
	return nil
}

// The start gate. `runc run` creates the container and starts the provider
// in one go; nothing in it waits for nlx. So a launch's bundle carries one
// createRuntime hook, which runc runs on the host once the container's
// namespaces and cgroup exist and before anything of the provider runs,
// and which blocks until nlx has recorded the launch:
//
//	/bin/sh -c 'read -r go < "$1" && [ "$go" = go ]' nlx-gate BUNDLE/gate
//
// nlx makes the FIFO BUNDLE/gate and holds it open for reading and writing
// from before runc starts until runc exits, so the hook's open never waits
// and its read waits for data. nlx writes "go" once the identity is
// recorded. To abort nlx closes it unwritten: the hook reads EOF and
// fails, and runc removes the container unstarted. When nlx dies, runc
// dies with it (Pdeathsig), the container's first process, its parent
// gone, exits unstarted, and the hook reads EOF. runc kills a hook still
// waiting after gateTimeout seconds. A shell, not the nlx binary: a
// hook's start is on every launch's path, and dash starts in a millisecond
// where nlx's runtime and package initialisation take several.
const (
	gateFIFO    = "gate"
	gateShell   = "/bin/sh"
	gateScript  = `read -r go < "$1" && [ "$go" = go ]`
	gateTimeout = 120
)

// addGate adds the start gate's hook to s, for the bundle at dir.
func addGate(s *specs.Spec, dir string) {
	if s.Hooks == nil {
		s.Hooks = &specs.Hooks{}
	}
	timeout := gateTimeout
	s.Hooks.CreateRuntime = append(s.Hooks.CreateRuntime, specs.Hook{
		Path:    gateShell,
		Args:    []string{"sh", "-c", gateScript, "nlx-gate", filepath.Join(dir, gateFIFO)},
		Timeout: &timeout,
	})
}

// openGate makes the gate's FIFO in the bundle at dir and opens it; the
// caller writes "go\n" to release the hook and closes it once runc exited.
func openGate(dir string) (*os.File, error) {
	if _, err := os.Stat(gateShell); err != nil {
		return nil, refuse(CodeNoBackend, "runc's start gate needs %s on the host: %v", gateShell, err)
	}
	path := filepath.Join(dir, gateFIFO)
	if err := unix.Mkfifo(path, 0o600); err != nil {
		return nil, fmt.Errorf("runc gate: mkfifo %s: %w", path, err)
	}
	// Read-write: opening a FIFO so never blocks, and keeps a writer
	// (nlx) for as long as the file is open.
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("runc gate: open %s: %w", path, err)
	}
	return os.NewFile(uintptr(fd), path), nil
}

// releaseGate lets the hook, and with it the provider, go.
func releaseGate(gate *os.File) error {
	if _, err := gate.Write([]byte("go\n")); err != nil {
		return fmt.Errorf("release runc gate: %w", err)
	}
	return nil
}

// gateConsumed reports whether the hook read what releaseGate wrote: after
// a successful run, unread bytes mean this runc ignored the hook.
func gateConsumed(gate *os.File) (bool, error) {
	n, err := unix.IoctlGetInt(int(gate.Fd()), unix.TIOCINQ) // FIONREAD
	if err != nil {
		return false, fmt.Errorf("runc gate: %w", err)
	}
	return n == 0, nil
}

// runcRunArgs runs the bundle in the foreground: runc passes its stdio
// (fds 0-2 only) to the container, forwards signals to it, and deletes the
// container when it exits.
func runcRunArgs(stateRoot, bundle, id string) []string {
	return []string{"--root", stateRoot, "run", "--bundle", bundle, id}
}

// runcProbe runs /bin/true in a minimal bundle with the namespaces and the
// cgroup handling a launch uses.
func runcProbe(ctx context.Context, path string) error {
	dir, err := os.MkdirTemp("", "nlx-runc-probe-")
	if err != nil {
		return fmt.Errorf("runc probe: %w", err)
	}
	defer os.RemoveAll(dir)
	id := "probe-" + newID()
	s := &specs.Spec{
		Version: specs.Version,
		Root:    &specs.Root{Path: emptyRoot, Readonly: true},
		Process: &specs.Process{
			User:            specs.User{UID: uint32(os.Getuid()), GID: uint32(os.Getgid())},
			Args:            []string{"true"},
			Env:             []string{"PATH=" + sandboxPATH},
			Cwd:             "/",
			Capabilities:    &specs.LinuxCapabilities{},
			NoNewPrivileges: true,
		},
		Mounts: []specs.Mount{{Destination: "/proc", Type: "proc", Source: "proc"}},
		Linux: &specs.Linux{
			CgroupsPath: DefaultCgroupParent + "/" + id,
			Namespaces: []specs.LinuxNamespace{
				{Type: specs.PIDNamespace}, {Type: specs.IPCNamespace}, {Type: specs.UTSNamespace},
				{Type: specs.MountNamespace}, {Type: specs.NetworkNamespace},
			},
			Resources: &specs.LinuxResources{Devices: []specs.LinuxDeviceCgroup{{Allow: false, Access: "rwm"}}},
		},
	}
	for _, d := range systemDirs {
		if _, err := os.Stat(d); err == nil {
			s.Mounts = append(s.Mounts, bind(d, d, true))
		}
	}
	bundle := filepath.Join(dir, "bundle")
	addGate(s, bundle)
	if err := writeBundle(bundle, s); err != nil {
		return err
	}
	// Released ahead: the probe checks that runc runs the hook at all (a
	// runc before 1.0 ignores createRuntime hooks, and its launches would
	// start ungated).
	gate, err := openGate(bundle)
	if err != nil {
		return err
	}
	defer gate.Close()
	if err := releaseGate(gate); err != nil {
		return err
	}
	if err := probe(ctx, path, runcRunArgs(filepath.Join(dir, "state"), bundle, id)...); err != nil {
		return err
	}
	ok, err := gateConsumed(gate)
	if err != nil {
		return err
	}
	if !ok {
		return errors.New("runc did not run the createRuntime hook that holds a provider until its launch is recorded (runc 1.0 or later does)")
	}
	return nil
}
