package images

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/google/go-containerregistry/pkg/v1/validate"

	"github.com/nlx-dev/nlx"
	"github.com/nlx-dev/nlx/internal/reason"
	"github.com/nlx-dev/nlx/internal/testgen"
	"github.com/nlx-dev/nlx/internal/testtool"
	"github.com/nlx-dev/nlx/schema"
)

var update = flag.Bool("update", false, "rewrite golden files")

// sharedCache is one layer cache for the package's tests: the example's Go
// layers are built once per test run.
var sharedCache string

func TestMain(m *testing.M) {
	flag.Parse()
	dir, err := os.MkdirTemp("", "nlx-images-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	sharedCache = filepath.Join(dir, "cache")
	// Copies of the example live outside the module, and need nothing
	// around them: the example's image carries nlx by an nlx layer.
	os.Setenv("GOWORK", "off")
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func loadExample(t *testing.T, dir string) *schema.Config {
	t.Helper()
	cfg, err := schema.Load(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func buildExample(t *testing.T, dir, cache string) *Result {
	t.Helper()
	cfg := loadExample(t, dir)
	res, err := Build(context.Background(), Input{Name: "pi-runtime", Image: cfg.Images["pi-runtime"], ConfigDir: dir,
		Skills: cfg.Skills, Cache: &Cache{Dir: cache}, Self: nlx.Source, SelfEmbedded: true, Epoch: time.Unix(0, 0).UTC()})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// TestReproducible builds the example image twice, from two copies in
// different directories, with fresh layer caches, different TZ, umask,
// working directory and file mtimes: the index digests are equal.
func TestReproducible(t *testing.T) {
	example, err := filepath.Abs("../examples/pi-team") // before the test changes directory
	if err != nil {
		t.Fatal(err)
	}
	if testing.Short() {
		t.Skip("cross-compiles nlx twice")
	}
	var digests []string
	for i, env := range []struct {
		tz    string
		umask int
		mtime time.Time
	}{
		{"UTC", 0o022, time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)},
		{"Pacific/Auckland", 0o077, time.Date(2031, 6, 7, 8, 9, 10, 0, time.UTC)},
	} {
		dir := filepath.Join(t.TempDir(), fmt.Sprintf("checkout-%d", i), "cfg")
		if err := testgen.CopyTree(example, dir); err != nil {
			t.Fatal(err)
		}
		filepath.Walk(dir, func(p string, _ os.FileInfo, _ error) error { return os.Chtimes(p, env.mtime, env.mtime) })
		t.Setenv("TZ", env.tz)
		// t.Chdir puts the working directory back even when the build
		// fails the test, so that the package's later tests find theirs.
		old := syscall.Umask(env.umask)
		t.Cleanup(func() { syscall.Umask(old) })
		t.Chdir(filepath.Dir(dir))
		res := buildExample(t, "cfg", filepath.Join(t.TempDir(), "cache"))
		syscall.Umask(old)
		digests = append(digests, res.Digest.String())
	}
	if digests[0] != digests[1] {
		t.Fatalf("two builds of the same inputs differ: %s and %s", digests[0], digests[1])
	}
}

// TestGoldenDigest pins the digest of a small fixed input: a change of gzip
// level, tar encoding, media type or config shape shows here (-update).
func TestGoldenDigest(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"etc/motd":          "welcome to the pi\n",
		"etc/nlx/host.conf": "name = pi\n",
		"bin/hello":         "#!/bin/sh\necho hello\n",
	}
	for name, content := range files {
		p := filepath.Join(dir, "root", name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		mode := os.FileMode(0o644)
		if strings.HasPrefix(name, "bin/") {
			mode = 0o700 // normalised to 0755
		}
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("../etc/motd", filepath.Join(dir, "root", "bin", "motd")); err != nil {
		t.Fatal(err)
	}
	im := &schema.Image{Platforms: []string{"linux/arm64", "linux/amd64"}, Base: "scratch",
		Layers:     []schema.Layer{{Files: "root", Dest: "/"}},
		Entrypoint: []string{"/bin/hello"}, Env: map[string]string{"TZ": "UTC"}, Labels: map[string]string{"a": "b"}}
	res, err := Build(context.Background(), Input{Name: "golden", Image: im, ConfigDir: dir, Cache: &Cache{Dir: filepath.Join(dir, "cache")},
		Epoch: time.Unix(1700000000, 0).UTC()})
	if err != nil {
		t.Fatal(err)
	}
	golden := "testdata/golden-digest.txt"
	if *update {
		os.MkdirAll("testdata", 0o755)
		os.WriteFile(golden, []byte(res.Digest.String()+"\n"), 0o644)
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Digest.String(); got != strings.TrimSpace(string(want)) {
		t.Errorf("digest of the fixed input: got %s, want %s (run go test ./images -update after a deliberate change)", got, want)
	}
}

// TestStructure checks the example's index: exactly linux/amd64 and
// linux/arm64/v8, OCI media types throughout, valid by go-containerregistry's
// validate.Index; then two other implementations read it back.
func TestStructure(t *testing.T) {
	if testing.Short() {
		t.Skip("cross-compiles nlx")
	}
	res := buildExample(t, "../examples/pi-team", sharedCache)
	idx := res.Index
	if err := validate.Index(idx); err != nil {
		t.Fatalf("validate.Index: %v", err)
	}
	mt, _ := idx.MediaType()
	if mt != types.OCIImageIndex {
		t.Errorf("index media type %s", mt)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var platforms []string
	for _, d := range m.Manifests {
		platforms = append(platforms, d.Platform.String())
		if d.MediaType != types.OCIManifestSchema1 {
			t.Errorf("%s: manifest media type %s", d.Platform, d.MediaType)
		}
		img, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		man, _ := img.Manifest()
		if man.Config.MediaType != types.OCIConfigJSON {
			t.Errorf("%s: config media type %s", d.Platform, man.Config.MediaType)
		}
		for _, l := range man.Layers {
			if l.MediaType != types.OCILayer {
				t.Errorf("%s: layer media type %s", d.Platform, l.MediaType)
			}
		}
		cfg, _ := img.ConfigFile()
		if got := cfg.OS + "/" + cfg.Architecture; !strings.HasPrefix(d.Platform.String(), got) || cfg.Variant != d.Platform.Variant {
			t.Errorf("config platform %s/%s, descriptor %s", got, cfg.Variant, d.Platform)
		}
		if cfg.Created.Unix() != 0 || len(cfg.Config.Entrypoint) == 0 || cfg.Config.WorkingDir != "/workspace" || cfg.Config.User != "1000:1000" {
			t.Errorf("%s: config %+v", d.Platform, cfg.Config)
		}
	}
	if strings.Join(platforms, " ") != "linux/amd64 linux/arm64/v8" {
		t.Errorf("platforms %v, want exactly linux/amd64 and linux/arm64/v8 in that order", platforms)
	}

	layoutDir := filepath.Join(t.TempDir(), "layout")
	if err := WriteLayout(layoutDir, idx, "pi-runtime"); err != nil {
		t.Fatal(err)
	}
	t.Run("skopeo", func(t *testing.T) {
		testtool.Need(t, "skopeo")
		for _, arch := range []string{"amd64", "arm64"} {
			out, err := exec.Command("skopeo", "inspect", "--override-os", "linux", "--override-arch", arch, "oci:"+layoutDir+":pi-runtime").CombinedOutput()
			if err != nil {
				t.Fatalf("skopeo inspect %s: %v\n%s", arch, err, out)
			}
			if !strings.Contains(string(out), `"Architecture": "`+arch+`"`) || !strings.Contains(string(out), `"org.opencontainers.image.title": "pi-runtime"`) {
				t.Errorf("skopeo inspect %s:\n%s", arch, out)
			}
		}
	})
	testtool.Need(t, "umoci")
	// umoci unpacks a tag naming one manifest; it cannot pick a platform
	// out of an index ("tag is ambiguous"). docs/images.md has operators
	// copy one platform out with skopeo first: these are its commands.
	amd := filepath.Join(t.TempDir(), "pi-runtime-amd64")
	if _, err := exec.LookPath("skopeo"); err == nil {
		out, err := exec.Command("skopeo", "copy", "--override-os", "linux", "--override-arch", "amd64",
			"oci:"+layoutDir+":pi-runtime", "oci:"+amd+":amd64").CombinedOutput()
		if err != nil {
			t.Fatalf("skopeo copy: %v\n%s", err, out)
		}
	} else {
		img, err := PlatformImage(idx, v1.Platform{OS: "linux", Architecture: "amd64"})
		if err != nil {
			t.Fatal(err)
		}
		if err := writeImageLayout(amd, img, "amd64"); err != nil {
			t.Fatal(err)
		}
	}
	// The copy is the very manifest nlx built, not a re-encoding.
	want, err := PlatformImage(idx, v1.Platform{OS: "linux", Architecture: "amd64"})
	if err != nil {
		t.Fatal(err)
	}
	wantDigest, _ := want.Digest()
	copied, err := layout.FromPath(amd)
	if err != nil {
		t.Fatal(err)
	}
	if cm, err := copied.ImageIndex(); err != nil {
		t.Fatal(err)
	} else if m, err := cm.IndexManifest(); err != nil || len(m.Manifests) != 1 || m.Manifests[0].Digest != wantDigest {
		t.Errorf("the one-platform layout holds %+v (%v), want only manifest %s", m, err, wantDigest)
	}
	bundle := filepath.Join(t.TempDir(), "bundle")
	out, err := exec.Command("umoci", "unpack", "--rootless", "--image", amd+":amd64", bundle).CombinedOutput()
	if err != nil {
		t.Fatalf("umoci unpack: %v\n%s", err, out)
	}
	nlx := filepath.Join(bundle, "rootfs", "usr", "local", "bin", "nlx")
	out, err = exec.Command(nlx, "version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "nlx version") {
		t.Fatalf("the nlx that umoci unpacked does not run: %v\n%s", err, out)
	}
	if data, err := os.ReadFile(filepath.Join(bundle, "rootfs", "opt", "nlx", "skills", "pr-review", "SKILL.md")); err != nil || !strings.Contains(string(data), "name: pr-review") {
		t.Errorf("skill package not in the umoci rootfs: %v", err)
	}
}

// TestRebuildFromCache: a second build with no input change takes every
// layer from the cache and gives the same digest.
func TestRebuildFromCache(t *testing.T) {
	if testing.Short() {
		t.Skip("cross-compiles nlx")
	}
	first := buildExample(t, "../examples/pi-team", sharedCache)
	second := buildExample(t, "../examples/pi-team", sharedCache)
	if first.Digest != second.Digest {
		t.Fatalf("rebuild changed the digest: %s -> %s", first.Digest, second.Digest)
	}
	for _, p := range second.Platforms {
		for _, l := range p.Layers {
			if !l.Cached {
				t.Errorf("%s: layer %s was rebuilt", p.Platform, l.Source)
			}
		}
	}
}

func TestEscapingSymlinkRefused(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "root"), 0o755)
	if err := os.Symlink("/etc/shadow", filepath.Join(dir, "root", "shadow")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../outside", filepath.Join(dir, "root", "up")); err != nil {
		t.Fatal(err)
	}
	im := &schema.Image{Platforms: []string{"linux/amd64"}, Base: "scratch", Layers: []schema.Layer{{Files: "root", Dest: "/"}}}
	_, err := Build(context.Background(), Input{Name: "x", Image: im, ConfigDir: dir, Cache: &Cache{Dir: filepath.Join(dir, "cache")}})
	if err == nil || !strings.Contains(err.Error(), string(reason.EscapingSymlink)) {
		t.Fatalf("got %v, want %s", err, reason.EscapingSymlink)
	}
}

func TestUnpinnedBaseRefused(t *testing.T) {
	im := &schema.Image{Platforms: []string{"linux/amd64"}, Base: "debian:12", Layers: []schema.Layer{}}
	_, err := Build(context.Background(), Input{Name: "x", Image: im, ConfigDir: t.TempDir(), Cache: &Cache{Dir: t.TempDir()}})
	if err == nil || !strings.Contains(err.Error(), string(reason.UnpinnedBase)) {
		t.Fatalf("got %v, want %s", err, reason.UnpinnedBase)
	}
}

// writeImageLayout writes one image (not an index) into a new layout.
func writeImageLayout(dir string, img v1.Image, refName string) error {
	p, err := layoutWrite(dir)
	if err != nil {
		return err
	}
	return p.AppendImage(img, layoutAnnotations(refName))
}

// TestPiBinaryUnderQemu unpacks the example's linux/arm64 image with Unpack
// and runs the nlx binary it holds under qemu-aarch64-static: the Pi's
// binary, from the Pi's image, prints its version.
func TestPiBinaryUnderQemu(t *testing.T) {
	if testing.Short() {
		t.Skip("cross-compiles nlx")
	}
	qemu := testtool.Need(t, "qemu-aarch64-static")
	res := buildExample(t, "../examples/pi-team", sharedCache)
	img, err := PlatformImage(res.Index, v1.Platform{OS: "linux", Architecture: "arm64", Variant: "v8"})
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(t.TempDir(), "rootfs")
	if err := Unpack(context.Background(), img, root); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(root, "usr", "local", "bin", "nlx")
	out, err := exec.Command(qemu, bin, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("qemu-aarch64-static %s version: %v\n%s", bin, err, out)
	}
	if !strings.Contains(string(out), "nlx version") || !strings.Contains(string(out), "linux/arm64") {
		t.Errorf("the arm64 binary printed %q", out)
	}
}
