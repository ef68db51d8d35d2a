package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"math/rand"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/nlx-dev/nlx/internal/testgen"
)

// koVersion is the ko the image benchmark compares with.
const koVersion = "v0.19.1"

// imageBench builds the example image (both platforms, the cross-compiled
// nlx and a 20 MB directory) from a cold Go build cache and compares it
// with its floor (the two bare cross-compiles and a tar | gzip of the
// directory, same cold cache), with ko, and with a rebuild.
func imageBench(ctx context.Context, work, nlx string) error {
	repo, err := os.Getwd()
	if err != nil {
		return err
	}
	mod := filepath.Join(work, "module")
	if err := copyTracked(repo, mod); err != nil {
		return err
	}
	cfg := filepath.Join(mod, "examples", "pi-team")
	data := filepath.Join(cfg, "data")
	if err := writeData(data, 200, 100<<10); err != nil {
		return err
	}
	images := filepath.Join(cfg, "images.cue")
	src, err := os.ReadFile(images)
	if err != nil {
		return err
	}
	src = []byte(strings.Replace(string(src), "layers: [", "layers: [\n\t\t{files: \"data\", dest: \"/srv/data\"},", 1))
	if err := os.WriteFile(images, src, 0o644); err != nil {
		return err
	}
	env := func(extra ...string) []string {
		return append(os.Environ(), append([]string{"GOWORK=off", "GOFLAGS="}, extra...)...)
	}
	run := func(dir string, e []string, name string, args ...string) (sample, error) {
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Dir, cmd.Env = dir, e
		return measure(cmd)
	}

	// The floor: what any builder must do, on a cold cache.
	floorCache := filepath.Join(work, "gocache-floor")
	var floor time.Duration
	for _, arch := range []string{"amd64", "arm64"} {
		s, err := run(mod, env("GOCACHE="+floorCache, "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch),
			"go", "build", "-trimpath", "-o", filepath.Join(work, "floor-"+arch), "./cmd/nlx")
		if err != nil {
			return err
		}
		floor += s.wall
	}
	s, err := run(data, env(), "sh", "-c", "tar -cf - . | gzip -6 > "+filepath.Join(work, "data.tgz"))
	if err != nil {
		return err
	}
	floor += s.wall
	fmt.Fprintln(os.Stderr, "image bench: floor done")

	// nlx, cold, then again with nothing changed.
	nlxEnv := env("GOCACHE="+filepath.Join(work, "gocache-nlx"), "NLX_IMAGE_STORE="+filepath.Join(work, "store"),
		"NLX_IMAGE_CACHE="+filepath.Join(work, "layers"))
	cold, err := run(mod, nlxEnv, nlx, "image", "build", "pi-runtime", "examples/pi-team")
	if err != nil {
		return err
	}
	rebuild, err := run(mod, nlxEnv, nlx, "image", "build", "pi-runtime", "examples/pi-team")
	if err != nil {
		return err
	}
	fmt.Fprintln(os.Stderr, "image bench: nlx done")

	koLine := "ko: " + koBench(ctx, work, mod, data, env, run, cold)
	fmt.Printf("\nimage build of the example (nlx for 2 platforms + a 20 MB directory), cold Go cache:\n")
	fmt.Printf("  floor (2 bare go builds + tar|gzip): %.1f s\n", floor.Seconds())
	fmt.Printf("  nlx image build, cold:               %.1f s, ratio to floor %.2f (target <= 1.25) %s; peak RSS %.0f MiB\n",
		cold.wall.Seconds(), cold.wall.Seconds()/floor.Seconds(), verdict(cold.wall.Seconds()/floor.Seconds() <= 1.25, "image build, cold"), float64(cold.rss)/1024)
	fmt.Printf("  nlx image build, no change:          %.2f s, ratio to cold %.3f (target <= 0.1) %s\n",
		rebuild.wall.Seconds(), rebuild.wall.Seconds()/cold.wall.Seconds(), verdict(rebuild.wall.Seconds()/cold.wall.Seconds() <= 0.1, "image build, no change"))
	fmt.Printf("  %s\n", koLine)
	return nil
}

// warmPlanBench measures what an operator waits for most: a plan of the
// example, copied into a directory of its own outside any Go module, with
// nothing changed since it was applied, its image resolved from the layer
// cache's records without running the go command; against cue export of
// the same directory. The apply before it builds the image with the
// machine's Go cache.
func warmPlanBench(ctx context.Context, work, nlx, cue string, rounds int) error {
	repo, err := os.Getwd()
	if err != nil {
		return err
	}
	dir := filepath.Join(work, "pi-team")
	if err := testgen.CopyTree(filepath.Join(repo, "examples", "pi-team"), dir); err != nil {
		return err
	}
	state := filepath.Join(work, "warm", "state.db")
	env := append(os.Environ(), "GOWORK=off", "NLX_ACTOR=bench", "NLX_IMAGE_STORE="+filepath.Join(work, "warm", "images"),
		"NLX_IMAGE_CACHE=", "NLX_WORKSPACE_ROOT="+filepath.Join(work, "warm", "workspaces"))
	fmt.Fprintln(os.Stderr, "warm plan bench: applying the example (builds its image)")
	apply := exec.CommandContext(ctx, nlx, "--state", state, "apply", ".", "--yes")
	apply.Dir, apply.Env = dir, env
	if out, err := apply.CombinedOutput(); err != nil {
		return fmt.Errorf("nlx apply: %v\n%s", err, out)
	}
	n := 5 * rounds // 20 ms runs: more rounds against noise
	var cueExport, plan series
	for r := 0; r <= n; r++ {
		c := exec.CommandContext(ctx, cue, "export", ".")
		p := exec.CommandContext(ctx, nlx, "--state", state, "plan", ".", "--detailed-exitcode")
		c.Dir, p.Dir, p.Env = dir, dir, env
		cs, err := measure(c)
		if err != nil {
			return err
		}
		ps, err := measure(p)
		if err != nil {
			return err
		}
		if r == 0 {
			continue // the first plan after the apply writes nothing new, but warms the page cache
		}
		cueExport, plan = append(cueExport, cs), append(plan, ps)
	}
	c, p := cueExport.median(), plan.median()
	ratio := p.wall.Seconds() / c.wall.Seconds()
	fmt.Printf("\nplan of examples/pi-team, no changes, image cached (medians of %d): %.1f ms vs cue export %.1f ms, ratio %.2f (target <= 3.0) %s\n",
		n, p.wall.Seconds()*1000, c.wall.Seconds()*1000, ratio, verdict(ratio <= 3.0, "warm plan of the example"))
	return nil
}

// missed names every target this run missed: bench exits non-zero when
// there is one.
var missed []string

// verdict is "ok", or "MISSED" with what is recorded in missed.
func verdict(ok bool, what string) string {
	if ok {
		return "ok"
	}
	missed = append(missed, what)
	return "MISSED"
}

// koBench builds the same binary and directory with ko (kodata), pushing
// to an in-process registry on a base held there, from its own cold cache.
func koBench(ctx context.Context, work, mod, data string, env func(...string) []string,
	run func(string, []string, string, ...string) (sample, error), nlxCold sample) string {
	ko := filepath.Join(".bench", "ko-"+koVersion, "ko")
	if _, err := os.Stat(ko); err != nil {
		cmd := exec.CommandContext(ctx, "go", "install", "github.com/google/ko@"+koVersion)
		abs, _ := filepath.Abs(filepath.Dir(ko))
		cmd.Env = append(os.Environ(), "GOBIN="+abs)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Sprintf("not run: go install ko %s failed: %v: %s", koVersion, err, strings.TrimSpace(string(out)))
		}
	}
	ko, _ = filepath.Abs(ko)
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	if err := pushScratchBase(ctx, host+"/base:v1"); err != nil {
		return "not run: " + err.Error()
	}
	kodata := filepath.Join(mod, "cmd", "nlx", "kodata")
	if err := testgen.CopyTree(data, kodata); err != nil {
		return "not run: " + err.Error()
	}
	defer os.RemoveAll(kodata)
	s, err := run(mod, env("GOCACHE="+filepath.Join(work, "gocache-ko"), "KO_DOCKER_REPO="+host+"/ko",
		"KO_DEFAULTBASEIMAGE="+host+"/base:v1", "KOCACHE="+filepath.Join(work, "kocache")),
		ko, "build", "--bare", "--sbom=none", "--platform=linux/amd64,linux/arm64", "--insecure-registry", "./cmd/nlx")
	if err != nil {
		return "not run: " + err.Error()
	}
	r := nlxCold.wall.Seconds() / s.wall.Seconds()
	return fmt.Sprintf("ko build, cold:                      %.1f s; nlx/ko %.2f (target <= 1.0) %s", s.wall.Seconds(), r, verdict(r <= 1.0, "image build vs ko"))
}

// pushScratchBase pushes an empty two-platform index for ko to build on.
func pushScratchBase(ctx context.Context, ref string) error {
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, p := range []v1.Platform{{OS: "linux", Architecture: "amd64"}, {OS: "linux", Architecture: "arm64", Variant: "v8"}} {
		img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
		img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
		cfg, err := img.ConfigFile()
		if err != nil {
			return err
		}
		cfg = cfg.DeepCopy()
		cfg.OS, cfg.Architecture, cfg.Variant = p.OS, p.Architecture, p.Variant
		if img, err = mutate.ConfigFile(img, cfg); err != nil {
			return err
		}
		plat := p
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &plat}})
	}
	r, err := name.ParseReference(ref)
	if err != nil {
		return err
	}
	return remote.WriteIndex(r, idx, remote.WithContext(ctx))
}

// writeData writes n files of size bytes each of deterministic noise (as
// incompressible as real assets).
func writeData(dir string, n, size int) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	rng := rand.New(rand.NewSource(1))
	buf := make([]byte, size)
	for i := 0; i < n; i++ {
		rng.Read(buf)
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("asset-%03d.bin", i)), buf, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// copyTracked copies the files git tracks in repo to dst.
func copyTracked(repo, dst string) error {
	out, err := exec.Command("git", "-C", repo, "ls-files").Output()
	if err != nil {
		return fmt.Errorf("git ls-files: %w", err)
	}
	for _, f := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		data, err := os.ReadFile(filepath.Join(repo, f))
		if err != nil {
			return err
		}
		p := filepath.Join(dst, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			return err
		}
	}
	return nil
}
