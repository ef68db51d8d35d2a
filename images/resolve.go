package images

import (
	"context"
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/nlx-dev/nlx/internal/reason"
	"github.com/nlx-dev/nlx/plan"
	"github.com/nlx-dev/nlx/schema"
)

// Reason codes of apply refusals about images.
const ()

// Resolver turns the images a config's workspaces use into pinned digests:
// built ones are built (from the layer cache when unchanged) into the
// store, prebuilt ones (ref) are looked up in their registry.
type Resolver struct {
	Store     *Store
	ConfigDir string
	Self      fs.FS // the source nlx layers build from (Input.Self)
	// SelfEmbedded: Self is embedded in the running executable (Input.SelfEmbedded).
	SelfEmbedded bool
	Epoch        time.Time
	Progress     func(Step) // each build step, begun and ended
}

// Resolve returns a pin for every image a workspace of cfg uses.
func (r *Resolver) Resolve(ctx context.Context, cfg *schema.Config) (map[string]plan.ImagePin, error) {
	used := map[string]bool{}
	for _, w := range cfg.Workspaces {
		if w.Image != "" {
			used[w.Image] = true
		}
	}
	pins := map[string]plan.ImagePin{}
	for _, n := range slices.Sorted(maps.Keys(used)) {
		im := cfg.Images[n]
		if im == nil {
			return nil, reason.New(reason.UnknownImage, "no image %q", n)
		}
		pin, err := r.pin(ctx, cfg, n, im)
		if err != nil {
			return nil, err
		}
		pins[n] = pin
	}
	return pins, nil
}

func (r *Resolver) pin(ctx context.Context, cfg *schema.Config, n string, im *schema.Image) (plan.ImagePin, error) {
	if im.Ref != "" {
		d, err := Resolve(ctx, im.Ref)
		if err != nil {
			return plan.ImagePin{}, fmt.Errorf("image %s: %w", n, err)
		}
		return plan.ImagePin{Digest: d.String(), Ref: im.Ref}, nil
	}
	res, err := Build(ctx, Input{Name: n, Image: im, ConfigDir: r.ConfigDir, Skills: cfg.Skills,
		Cache: r.Store.Cache(), Self: r.Self, SelfEmbedded: r.SelfEmbedded, Epoch: r.Epoch, Progress: r.Progress})
	if err != nil {
		return plan.ImagePin{}, err
	}
	// A plan with nothing changed finds the store holding the index
	// already, whole: nothing to write.
	if cur, err := r.Store.Named(n); err != nil || cur != res.Digest || !r.Store.Has(res.Digest) {
		if err := r.Store.Put(res.Index, n); err != nil {
			return plan.ImagePin{}, err
		}
	}
	return plan.ImagePin{Digest: res.Digest.String(), Registry: im.Registry}, nil
}

// Checker proves at apply time that pinned images can be had.
type Checker struct {
	Store *Store
}

// Available implements reconcile.ImageChecker: a prebuilt image's tag must
// still point at the pinned digest; the digest must be in the local store,
// or in the image's registry.
func (c *Checker) Available(ctx context.Context, imageName string, pin plan.ImagePin) error {
	d, err := v1.NewHash(pin.Digest)
	if err != nil {
		return reason.New(reason.ImageNotAvailable, "image %s: bad digest %q", imageName, pin.Digest)
	}
	if pin.Ref != "" {
		if ref, err := name.ParseReference(pin.Ref); err == nil {
			if dr, pinned := ref.(name.Digest); pinned && dr.DigestStr() != d.String() {
				// A reference that names its digest names the pin.
				return reason.New(reason.ImageRefMoved, "image %s: %s names digest %s, but the plan pins %s", imageName, pin.Ref, dr.DigestStr(), d)
			}
			if _, pinned := ref.(name.Digest); !pinned {
				now, err := Resolve(ctx, pin.Ref)
				if err != nil {
					return reason.New(reason.ImageNotAvailable, "image %s: %v", imageName, err)
				}
				if now != d {
					return reason.New(reason.ImageRefMoved, "image %s: %s pointed at %s when planned and points at %s now; plan again",
						imageName, pin.Ref, d, now)
				}
			}
		}
	}
	if c.Store.Has(d) {
		return nil
	}
	for _, repo := range []string{pin.Registry, repository(pin.Ref)} {
		if repo == "" {
			continue
		}
		ref, err := name.NewDigest(repo + "@" + d.String())
		if err != nil {
			continue
		}
		if _, err := remote.Head(ref, remoteOptions(ctx, nil)...); err == nil {
			return nil
		}
	}
	where := "the local image store " + c.Store.Dir
	if pin.Registry != "" {
		where += " or " + pin.Registry
	}
	return reason.New(reason.ImageNotAvailable, "image %s %s is not in %s; build it here (nlx image build) or push it", imageName, d, where)
}

// repository strips a tag or digest from a reference.
func repository(ref string) string {
	if ref == "" {
		return ""
	}
	r, err := name.ParseReference(ref)
	if err != nil {
		return ""
	}
	return r.Context().Name()
}
