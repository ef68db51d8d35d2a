package isolate

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
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
	if err := writeBundle(bundle, s); err != nil {
		return err
	}
	return probe(ctx, path, runcRunArgs(filepath.Join(dir, "state"), bundle, id)...)
}
