// Package images builds the native OCI images of a config reproducibly with
// go-containerregistry (never a Docker daemon), keeps them in a local store,
// pushes and pulls them, and unpacks a platform's root file system for the
// isolation runtime, refusing hostile layers.
package images

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/nlx-dev/nlx/internal/reason"
	"github.com/nlx-dev/nlx/schema"
)

// Reason codes of image refusals.
const ()

// ParsePlatform reads one of the platforms nlx builds for: "linux/arm64"
// (variant v8 implied, as the Pi needs) or "linux/amd64", each also with
// "/v8" (dropped for amd64). Anything else v1.ParsePlatform reads (other
// systems and architectures, OS versions, spaces) is refused.
func ParsePlatform(s string) (v1.Platform, error) {
	p, err := v1.ParsePlatform(s)
	if err == nil && p.OS == "linux" && (p.Variant == "" || p.Variant == "v8") && p.OSVersion == "" && p.String() == s {
		switch p.Architecture {
		case "arm64":
			p.Variant = "v8"
			return *p, nil
		case "amd64":
			p.Variant = ""
			return *p, nil
		}
	}
	return v1.Platform{}, fmt.Errorf("platform %q: want linux/arm64 or linux/amd64", s)
}

// Input is what one image is built from.
type Input struct {
	Name      string
	Image     *schema.Image
	ConfigDir string                   // layer sources are relative to it; go builds run in it
	Skills    map[string]*schema.Skill // the config's skills, for skills layers
	Cache     *Cache
	// Self is the source nlx layers build nlx from: a Go module's tree
	// holding the nlx command in Main (the root package's nlx.Source).
	Self fs.FS
	// SelfEmbedded says Self is embedded in the running executable (as
	// nlx.Source is): the executable's identity then stands for Self's
	// content in the records of nlx layers, so that a build with nothing
	// changed does not hash the source again.
	SelfEmbedded bool
	// Epoch is every mtime and created time (SOURCE_DATE_EPOCH, default 0).
	Epoch time.Time
	// Progress, if set, is told each step as it begins and ends: which
	// layer of which platform, built or from the cache, how large.
	Progress func(Step)
}

// Step is one step of an image build, as it begins (Done false) and as it
// ends (Done true, with Cached, Size or Err).
type Step struct {
	Image    string // the images entry
	Platform string // linux/arm64, ...
	Layer    string // what the layer holds: "go ./cmd/nlx -> /usr/local/bin/nlx", ...
	Done     bool
	Cached   bool  // ended: the layer came from the layer cache
	Size     int64 // ended: the layer's compressed size in bytes
	Err      error // ended: why it failed
}

// step reports a step to in.Progress.
func (in *Input) step(s Step) {
	if in.Progress != nil {
		s.Image = in.Name
		in.Progress(s)
	}
}

// LayerInfo describes one built layer.
type LayerInfo struct {
	Source string `json:"source"` // what it holds
	Digest string `json:"digest"`
	Size   int64  `json:"size"`
	Cached bool   `json:"cached"`
}

// PlatformResult is one platform's image.
type PlatformResult struct {
	Platform string      `json:"platform"`
	Manifest string      `json:"manifest"`
	Layers   []LayerInfo `json:"layers"`
}

// Result is a built image index.
type Result struct {
	Index     v1.ImageIndex    `json:"-"`
	Digest    v1.Hash          `json:"digest"`
	Platforms []PlatformResult `json:"platforms"`
	// GoRuns counts the go commands the build ran: none when every Go
	// and nlx layer was resolved from its record (gorecord.go).
	GoRuns int `json:"-"`
}

// EpochFromEnv reads SOURCE_DATE_EPOCH (seconds); unset means 0.
func EpochFromEnv() (time.Time, error) {
	s := os.Getenv("SOURCE_DATE_EPOCH")
	if s == "" {
		return time.Unix(0, 0).UTC(), nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH %q: want seconds since 1970", s)
	}
	return time.Unix(n, 0).UTC(), nil
}

// Build builds the image index of in: one image per platform, sorted,
// OCI media types throughout, every layer from the cache when its inputs
// are unchanged.
func Build(ctx context.Context, in Input) (*Result, error) {
	var platforms []v1.Platform
	for _, s := range in.Image.Platforms {
		p, err := ParsePlatform(s)
		if err != nil {
			return nil, err
		}
		platforms = append(platforms, p)
	}
	sort.Slice(platforms, func(i, j int) bool { return platforms[i].String() < platforms[j].String() })
	b := &builder{in: in}
	defer b.close()
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	res := &Result{}
	for _, p := range platforms {
		img, pr, err := b.platformImage(ctx, p)
		var cfgErrs schema.Errors
		if errors.As(err, &cfgErrs) {
			return nil, cfgErrs // positioned, naming the image and the platform
		}
		if err != nil {
			return nil, fmt.Errorf("image %s for %s: %w", in.Name, p, err)
		}
		d, err := img.Digest()
		if err != nil {
			return nil, err
		}
		pr.Manifest = d.String()
		res.Platforms = append(res.Platforms, *pr)
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add: img,
			Descriptor: v1.Descriptor{
				MediaType: types.OCIManifestSchema1,
				Platform:  &p,
			},
		})
	}
	d, err := idx.Digest()
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", in.Name, err)
	}
	res.Index, res.Digest, res.GoRuns = idx, d, b.goRuns
	return res, nil
}

type builder struct {
	in   Input
	root *os.Root // the config directory, once a layer reads from it

	goRuns int         // go commands run
	tool   *toolchain  // the go command's fingerprint, once a Go layer needs it
	self   *selfSource // in.Self listed and hashed, once an nlx layer needs it
	abs    string      // the config directory, absolute
}

// configRoot opens the config directory once: files and skills layers are
// listed and read through it, never by host path.
func (b *builder) configRoot() (*os.Root, error) {
	if b.root == nil {
		r, err := os.OpenRoot(b.in.ConfigDir)
		if err != nil {
			return nil, fmt.Errorf("config directory: %w", err)
		}
		b.root = r
	}
	return b.root, nil
}

func (b *builder) close() {
	if b.root != nil {
		b.root.Close()
	}
}

func (b *builder) platformImage(ctx context.Context, p v1.Platform) (v1.Image, *PlatformResult, error) {
	base, err := b.base(ctx, p)
	if err != nil {
		return nil, nil, err
	}
	created := v1.Time{Time: b.in.Epoch}
	pr := &PlatformResult{Platform: p.String()}
	var adds []mutate.Addendum
	for i, l := range b.in.Image.Layers {
		what := describeLayer(l)
		b.in.step(Step{Platform: p.String(), Layer: what})
		layer, source, cached, err := b.layer(ctx, l, p)
		if err != nil {
			err = b.positioned(i, l, err)
			b.in.step(Step{Platform: p.String(), Layer: what, Done: true, Err: err})
			var cfgErrs schema.Errors
			if errors.As(err, &cfgErrs) {
				return nil, nil, err
			}
			return nil, nil, fmt.Errorf("layer %d (%s): %w", i, source, err)
		}
		d, _ := layer.Digest()
		size, _ := layer.Size()
		b.in.step(Step{Platform: p.String(), Layer: what, Done: true, Cached: cached, Size: size})
		pr.Layers = append(pr.Layers, LayerInfo{Source: source, Digest: d.String(), Size: size, Cached: cached})
		adds = append(adds, mutate.Addendum{
			Layer:     layer,
			MediaType: types.OCILayer,
			History:   v1.History{Created: created, CreatedBy: "nlx: " + source},
		})
	}
	img, err := mutate.Append(base, adds...)
	if err != nil {
		return nil, nil, err
	}
	cfgFile, err := img.ConfigFile()
	if err != nil {
		return nil, nil, err
	}
	cfg := cfgFile.DeepCopy()
	im := b.in.Image
	cfg.OS, cfg.Architecture, cfg.Variant = p.OS, p.Architecture, p.Variant
	cfg.Created = created
	if im.Entrypoint != nil {
		cfg.Config.Entrypoint = im.Entrypoint
	}
	if im.Cmd != nil {
		cfg.Config.Cmd = im.Cmd
	}
	for _, k := range slices.Sorted(maps.Keys(im.Env)) {
		cfg.Config.Env = setEnv(cfg.Config.Env, k, im.Env[k])
	}
	if im.Workdir != "" {
		cfg.Config.WorkingDir = im.Workdir
	}
	if im.User != "" {
		cfg.Config.User = im.User
	}
	if len(im.Labels) > 0 {
		if cfg.Config.Labels == nil {
			cfg.Config.Labels = map[string]string{}
		}
		for k, v := range im.Labels {
			cfg.Config.Labels[k] = v
		}
	}
	img, err = mutate.ConfigFile(img, cfg)
	if err != nil {
		return nil, nil, err
	}
	return img, pr, nil
}

func setEnv(env []string, k, v string) []string {
	for i, e := range env {
		if strings.HasPrefix(e, k+"=") {
			env[i] = k + "=" + v
			return env
		}
	}
	return append(env, k+"="+v)
}

// base returns the base image for p with OCI manifest and config types.
func (b *builder) base(ctx context.Context, p v1.Platform) (v1.Image, error) {
	spec := b.in.Image.Base
	var img v1.Image
	switch {
	case spec == "scratch":
		img = empty.Image
	case strings.HasPrefix(spec, "oci-layout:"):
		dir := strings.TrimPrefix(spec, "oci-layout:")
		if !filepath.IsAbs(dir) {
			dir = filepath.Join(b.in.ConfigDir, dir)
		}
		lp, err := layout.FromPath(dir)
		if err != nil {
			return nil, fmt.Errorf("base %s: %w", spec, err)
		}
		idx, err := lp.ImageIndex()
		if err != nil {
			return nil, fmt.Errorf("base %s: %w", spec, err)
		}
		if img, err = platformOf(idx, p); err != nil {
			return nil, fmt.Errorf("base %s: %w", spec, err)
		}
	default:
		ref, err := name.ParseReference(spec)
		if err != nil {
			return nil, fmt.Errorf("base %s: %w", spec, err)
		}
		if _, ok := ref.(name.Digest); !ok {
			return nil, reason.New(reason.UnpinnedBase, "base %s names a tag; pin it by digest (name@sha256:...) so builds cannot drift", spec)
		}
		img, err = remote.Image(ref, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain),
			remote.WithPlatform(p))
		if err != nil {
			return nil, fmt.Errorf("base %s: %w", spec, err)
		}
	}
	img = mutate.MediaType(img, types.OCIManifestSchema1)
	return mutate.ConfigMediaType(img, types.OCIConfigJSON), nil
}

// platformOf picks p's image out of an index (nested indexes included). A
// descriptor without a variant matches too, which v1.Platform.Satisfies
// would not have: an arm64 descriptor may leave its v8 unsaid.
func platformOf(idx v1.ImageIndex, p v1.Platform) (v1.Image, error) {
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	for _, d := range m.Manifests {
		switch {
		case d.MediaType.IsIndex():
			child, err := idx.ImageIndex(d.Digest)
			if err != nil {
				return nil, err
			}
			if img, err := platformOf(child, p); err == nil {
				return img, nil
			}
		case d.MediaType.IsImage() && d.Platform != nil && d.Platform.OS == p.OS && d.Platform.Architecture == p.Architecture &&
			(p.Variant == "" || d.Platform.Variant == "" || d.Platform.Variant == p.Variant):
			return idx.Image(d.Digest)
		}
	}
	return nil, fmt.Errorf("no image for %s", p)
}

// layer builds (or takes from the cache) one layer for platform p.
func (b *builder) layer(ctx context.Context, l schema.Layer, p v1.Platform) (v1.Layer, string, bool, error) {
	switch {
	case l.Files != "":
		source := describeLayer(l)
		root, err := b.configRoot()
		if err != nil {
			return nil, source, false, err
		}
		content := newContent()
		if err := content.addTree(root, l.Files, l.Dest); err != nil {
			return nil, source, false, err
		}
		layer, cached, err := b.in.Cache.buildContent(newKey("files"), content, b.in.Epoch)
		return layer, source, cached, err
	case len(l.Skills) > 0:
		source := describeLayer(l)
		root, err := b.configRoot()
		if err != nil {
			return nil, source, false, err
		}
		content := newContent()
		for _, s := range l.Skills {
			sk := b.in.Skills[s]
			if sk == nil {
				return nil, source, false, fmt.Errorf("no skill %q", s)
			}
			if err := content.addTree(root, filepath.ToSlash(sk.Path), l.Dest+"/"+s); err != nil {
				return nil, source, false, err
			}
		}
		layer, cached, err := b.in.Cache.buildContent(newKey("skills"), content, b.in.Epoch)
		return layer, source, cached, err
	case l.Go != "":
		source := "go " + l.Go + " (" + p.String() + ") -> " + l.Dest
		layer, cached, err := b.goLayer(ctx, l, p)
		return layer, source, cached, err
	case l.Nlx != nil:
		source := "nlx (" + p.String() + ") -> " + l.Dest
		layer, cached, err := b.nlxLayer(ctx, l, p)
		return layer, source, cached, err
	}
	return nil, "?", false, fmt.Errorf("a layer needs files, go, skills or nlx")
}

// positioned turns a Go layer that cannot be built into a configuration
// error at the layer's source field (images.NAME.layers[i].go or .nlx):
// what to fix is that field, or the module around the config directory.
func (b *builder) positioned(i int, l schema.Layer, err error) error {
	var re *reason.Error
	if !errors.As(err, &re) || re.Code != reason.GoBuild || (l.Go == "" && l.Nlx == nil) {
		return err
	}
	return schema.Errors{{Pos: l.Pos, Path: fmt.Sprintf("images.%s.layers[%d].%s", b.in.Name, i, l.Source()),
		Code: reason.GoBuild, Msg: re.Msg}}
}

// describeLayer names what layer l holds, for progress.
func describeLayer(l schema.Layer) string {
	switch {
	case l.Files != "":
		return "files " + l.Files + " -> " + l.Dest
	case len(l.Skills) > 0:
		return "skills " + strings.Join(l.Skills, ",") + " -> " + l.Dest
	case l.Go != "":
		return "go " + l.Go + " -> " + l.Dest
	case l.Nlx != nil:
		return "nlx -> " + l.Dest
	}
	return "?"
}
