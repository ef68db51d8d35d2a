package vmtest_test

import (
	"archive/tar"
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/mutate"

	nlx "github.com/nlx-dev/nlx"
	"github.com/nlx-dev/nlx/images"
	"github.com/nlx-dev/nlx/internal/vmtest"
	"github.com/nlx-dev/nlx/schema"
)

// exampleNLX is the nlx binary the example image (examples/pi-team's
// pi-runtime) carries for linux/arm64: that image's own nlx layer, built
// for that platform alone (the layer is the same whatever other platforms
// the image has: builds are reproducible), read out of the image.
func exampleNLX(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("../../examples/pi-team")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := schema.Load(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	im := *cfg.Images["pi-runtime"]
	im.Platforms = []string{"linux/arm64"}
	res, err := images.Build(context.Background(), images.Input{Name: "pi-runtime", Image: &im, ConfigDir: dir, Skills: cfg.Skills,
		Cache: &images.Cache{Dir: filepath.Join(t.TempDir(), "cache")}, Self: nlx.Source, SelfEmbedded: true, Epoch: time.Unix(0, 0).UTC()})
	if err != nil {
		t.Fatal(err)
	}
	idx, err := res.Index.IndexManifest()
	if err != nil || len(idx.Manifests) != 1 || idx.Manifests[0].Platform.Architecture != "arm64" {
		t.Fatalf("the example image for linux/arm64: %v %+v", err, idx)
	}
	img, err := res.Index.Image(idx.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err != nil {
			t.Fatalf("the example image has no usr/local/bin/nlx: %v", err)
		}
		if h.Name == "usr/local/bin/nlx" {
			out := filepath.Join(t.TempDir(), "nlx")
			f, err := os.OpenFile(out, os.O_CREATE|os.O_WRONLY, 0o755)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.Copy(f, tr); err != nil {
				t.Fatal(err)
			}
			f.Close()
			return out
		}
	}
}

// TestArm64 runs, in an emulated arm64 guest on cgroup v2 as the Pi has
// it, the nlx binary the example image carries for linux/arm64 (version,
// doctor) and isolate's arm64 test binary for the v2 limits and sandboxed
// launches through bubblewrap (Debian's arm64 package).
func TestArm64(t *testing.T) {
	g := vmtest.NewGuest(t, vmtest.ARM64)
	g.AddTree(t, vmtest.Userland(t, vmtest.ARM64))
	if err := g.Initramfs.HostFile("nlx", exampleNLX(t)); err != nil {
		t.Fatal(err)
	}
	if err := g.Initramfs.HostFile("isolate.test", vmtest.Build(t, vmtest.ARM64, "./isolate", true)); err != nil {
		t.Fatal(err)
	}
	g.Env["CI"] = "true"
	g.Env["NLX_PROVIDER_USER"] = "61234:61234"
	d, r := doctor(t, g)
	if r.Code != 0 || !d.CanLaunch || d.Report.Arch != "arm64" || d.Report.CgroupMode != "v2" {
		t.Fatalf("the example image's nlx on arm64: exit %d, can_launch %v, arch %q, mode %q\n%s", r.Code, d.CanLaunch, d.Report.Arch, d.Report.CgroupMode, r.Console)
	}
	for _, c := range []string{"cgroup.memory", "cgroup.pids", "cgroup.cpu", "backend.bwrap"} {
		if ok, detail, found := finding(d, c); !ok || !found {
			t.Errorf("%s: ok %v (%s)", c, ok, detail)
		}
	}
	r = g.Run(t, 4*time.Minute, "/isolate.test", "-test.v", "-test.count=1",
		"-test.run", "^(TestMemoryBalloon|TestForkBomb|TestLimitsApplied)$/^bwrap$")
	t.Logf("arm64 guest ran isolate's tests in %s", r.Took)
	if r.Code != 0 || skipped(r.Console) {
		t.Fatalf("isolate tests in the arm64 guest: exit %d\n%s", r.Code, r.Console)
	}
	requirePassed(t, r.Console, "TestMemoryBalloon/bwrap/shell", "TestMemoryBalloon/bwrap/grandchild", "TestForkBomb/bwrap/shell",
		"TestLimitsApplied/bwrap")
}
