package vmtest_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nlx-dev/nlx/internal/vmtest"
)

// doctorReport is what nlx doctor -o json says of a host.
type doctorReport struct {
	CanLaunch bool `json:"can_launch"`
	Report    struct {
		Arch       string `json:"arch"`
		CgroupMode string `json:"cgroup_mode"`
		Findings   []struct {
			Name   string `json:"name"`
			OK     bool   `json:"ok"`
			Detail string `json:"detail"`
			Fix    string `json:"fix"`
		} `json:"findings"`
	} `json:"report"`
}

// doctor boots g, runs nlx doctor -o json in it and decodes the report.
func doctor(t *testing.T, g *vmtest.Guest) (doctorReport, vmtest.Result) {
	t.Helper()
	g.Env["NLX_PROVIDER_USER"] = "61234:61234" // no useradd in the guest
	r := g.Run(t, 2*time.Minute, "/bin/sh", "-c", "/nlx doctor -o json > /tmp/doctor.json; code=$?; echo; echo DOCTOR-BEGIN; cat /tmp/doctor.json; echo DOCTOR-END; exit $code")
	_, rest, ok := strings.Cut(r.Console, "DOCTOR-BEGIN\n")
	body, _, ok2 := strings.Cut(rest, "DOCTOR-END")
	var d doctorReport
	if !ok || !ok2 || json.Unmarshal([]byte(body), &d) != nil {
		t.Fatalf("no doctor report on the console (exit %d):\n%s", r.Code, r.Console)
	}
	return d, r
}

func finding(d doctorReport, name string) (ok bool, detail string, found bool) {
	for _, f := range d.Report.Findings {
		if f.Name == name {
			return f.OK, f.Detail + "; " + f.Fix, true
		}
	}
	return false, "", false
}

// doctorGuest is a guest of arch with nlx and the sandboxes.
func doctorGuest(t *testing.T, arch vmtest.Arch) *vmtest.Guest {
	g := vmtest.NewGuest(t, arch)
	if err := g.Initramfs.HostFile("nlx", vmtest.Build(t, arch, "./cmd/nlx", false)); err != nil {
		t.Fatal(err)
	}
	if arch == vmtest.AMD64 {
		g.AddHostProgram(t, "bwrap")
		g.AddHostProgram(t, "runc")
	} else {
		g.AddTree(t, vmtest.Userland(t, arch))
	}
	return g
}

// TestDoctorOnCgroupV2: nlx doctor on a cgroup v2 host reports the mode and
// each controller; booted without the memory controller it refuses with
// the Raspberry Pi hint.
func TestDoctorOnCgroupV2(t *testing.T) {
	t.Run("controllers", func(t *testing.T) {
		d, r := doctor(t, doctorGuest(t, vmtest.AMD64))
		if r.Code != 0 || !d.CanLaunch || d.Report.CgroupMode != "v2" {
			t.Fatalf("doctor on v2: exit %d, can_launch %v, mode %q\n%s", r.Code, d.CanLaunch, d.Report.CgroupMode, r.Console)
		}
		for _, c := range []string{"cgroup.memory", "cgroup.pids", "cgroup.cpu", "backend.bwrap", "backend.runc"} {
			if ok, detail, found := finding(d, c); !ok || !found {
				t.Errorf("%s: ok %v (%s)", c, ok, detail)
			}
		}
	})
	t.Run("no memory controller", func(t *testing.T) {
		g := doctorGuest(t, vmtest.AMD64)
		g.Append = append(g.Append, "cgroup_disable=memory")
		d, r := doctor(t, g)
		ok, detail, found := finding(d, "cgroup.memory")
		if r.Code == 0 || d.CanLaunch || !found || ok || !strings.Contains(detail, "cgroup_enable=memory cgroup_memory=1") {
			t.Fatalf("doctor without memory: exit %d, can_launch %v, cgroup.memory %v %q\n%s", r.Code, d.CanLaunch, ok, detail, r.Console)
		}
		// A launch is refused with the code and the same hint (doctor's
		// egress check launches one).
		if !strings.Contains(r.Console, "cgroup_memory_unavailable: no cgroup memory controller (cgroup mode v2): enable the memory controller: on a Raspberry Pi") {
			t.Errorf("no launch refusal with the Raspberry Pi hint:\n%s", r.Console)
		}
	})
}
