package isolate

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"testing"
)

func TestDoctor(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: Doctor creates cgroups under /nlx")
	}
	r := Doctor(context.Background())
	var names []string
	for _, f := range r.Findings {
		names = append(names, f.Name)
		if !f.OK && f.Fix == "" {
			t.Errorf("%s failed without a fix: %s", f.Name, f.Detail)
		}
		if f.OK && f.Fix != "" {
			t.Errorf("%s is fine but has a fix %q", f.Name, f.Fix)
		}
	}
	want := []string{
		"namespace.user", "namespace.pid", "namespace.net", "namespace.mount",
		"backend.bwrap", "backend.runc", "seccomp.kernel", "seccomp.runc", "cgroup.mode", "cgroup.memory", "cgroup.pids", "cgroup.cpu",
	}
	if !reflect.DeepEqual(names, want) {
		t.Errorf("findings %v, want %v", names, want)
	}
	if r.Arch != runtime.GOARCH || r.FormatVersion != ReportVersion {
		t.Errorf("arch %q version %d", r.Arch, r.FormatVersion)
	}
	switch r.CgroupMode {
	case "v1", "hybrid", "v2":
	default:
		t.Errorf("cgroup mode %q", r.CgroupMode)
	}
	// A host with root, bubblewrap or runc, and memory and pids
	// controllers can launch; the launch tests depend on it anyway.
	_, errB := exec.LookPath("bwrap")
	_, errR := exec.LookPath("runc")
	if (errB == nil || errR == nil) && !r.CanLaunch() {
		out, _ := json.MarshalIndent(r, "", "  ")
		t.Errorf("CanLaunch false on the test host:\n%s", out)
	}
	data, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(data, &back); err != nil || !reflect.DeepEqual(back, r) {
		t.Errorf("report does not round-trip through JSON: %v", err)
	}
	// Doctor's trial cgroups are gone.
	host, err := loadCgroupHost()
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range host.dirs(DefaultCgroupParent) {
		left, _ := filepath.Glob(filepath.Join(dir, "doctor-*"))
		probes, _ := filepath.Glob(filepath.Join(dir, "probe-*"))
		if len(left)+len(probes) > 0 {
			t.Errorf("Doctor left cgroups behind: %v %v", left, probes)
		}
	}
}

func TestCanLaunch(t *testing.T) {
	all := func(ok map[string]bool) Report {
		var r Report
		for _, n := range []string{"backend.bwrap", "backend.runc", "seccomp.kernel", "seccomp.runc", "cgroup.memory", "cgroup.pids", "cgroup.cpu"} {
			r.Findings = append(r.Findings, Finding{Name: n, OK: ok[n]})
		}
		return r
	}
	cases := []struct {
		name string
		ok   map[string]bool
		want bool
	}{
		{"everything", map[string]bool{"backend.bwrap": true, "backend.runc": true, "seccomp.kernel": true, "seccomp.runc": true, "cgroup.memory": true, "cgroup.pids": true, "cgroup.cpu": true}, true},
		{"runc only", map[string]bool{"backend.runc": true, "seccomp.kernel": true, "seccomp.runc": true, "cgroup.memory": true, "cgroup.pids": true}, true},
		{"runc without seccomp", map[string]bool{"backend.runc": true, "seccomp.kernel": true, "cgroup.memory": true, "cgroup.pids": true}, false},
		{"bwrap, runc without seccomp", map[string]bool{"backend.bwrap": true, "backend.runc": true, "seccomp.kernel": true, "cgroup.memory": true, "cgroup.pids": true}, true},
		{"kernel without seccomp filters", map[string]bool{"backend.bwrap": true, "backend.runc": true, "seccomp.runc": true, "cgroup.memory": true, "cgroup.pids": true}, false},
		{"no backend", map[string]bool{"seccomp.kernel": true, "cgroup.memory": true, "cgroup.pids": true, "cgroup.cpu": true}, false},
		{"no memory controller", map[string]bool{"backend.bwrap": true, "seccomp.kernel": true, "cgroup.pids": true}, false},
		{"no pids controller", map[string]bool{"backend.bwrap": true, "seccomp.kernel": true, "cgroup.memory": true}, false},
		{"empty", nil, false},
	}
	for _, c := range cases {
		if got := all(c.ok).CanLaunch(); got != c.want {
			t.Errorf("%s: CanLaunch = %v, want %v", c.name, got, c.want)
		}
	}
}
