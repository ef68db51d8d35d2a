package images

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/match"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// RefNameAnnotation names an index in an OCI layout.
const RefNameAnnotation = "org.opencontainers.image.ref.name"

// Store is an OCI image layout holding built and pulled image indexes,
// each named by the annotation org.opencontainers.image.ref.name.
type Store struct {
	Dir string
}

// DefaultStoreDir is "images" beside the state file.
func DefaultStoreDir(statePath string) string {
	return filepath.Join(filepath.Dir(statePath), "images")
}

// Cache is the layer cache that goes with the store.
func (s *Store) Cache() *Cache {
	if d := os.Getenv("NLX_IMAGE_CACHE"); d != "" {
		return &Cache{Dir: d}
	}
	return &Cache{Dir: filepath.Join(s.Dir, "cache")}
}

func (s *Store) path() (layout.Path, error) {
	if _, err := os.Stat(filepath.Join(s.Dir, "index.json")); errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(s.Dir, 0o755); err != nil {
			return "", err
		}
		return layout.Write(s.Dir, empty.Index)
	}
	return layout.FromPath(s.Dir)
}

// Put writes idx into the store under refName, replacing what had that name.
func (s *Store) Put(idx v1.ImageIndex, refName string) error {
	p, err := s.path()
	if err != nil {
		return fmt.Errorf("image store %s: %w", s.Dir, err)
	}
	err = p.ReplaceIndex(idx, match.Annotation(RefNameAnnotation, refName),
		layout.WithAnnotations(map[string]string{RefNameAnnotation: refName}))
	if err != nil {
		return fmt.Errorf("image store %s: %w", s.Dir, err)
	}
	return nil
}

// Has reports whether the store holds the index with this digest, whole:
// the index and every manifest, config and layer it names.
func (s *Store) Has(digest v1.Hash) bool {
	idx, err := s.Index(digest)
	if err != nil {
		return false
	}
	return complete(idx) == nil
}

// complete checks that every blob of idx can be read.
func complete(idx v1.ImageIndex) error {
	m, err := idx.IndexManifest()
	if err != nil {
		return err
	}
	for _, d := range m.Manifests {
		img, err := idx.Image(d.Digest)
		if err != nil {
			return err
		}
		layers, err := img.Layers()
		if err != nil {
			return err
		}
		if _, err := img.ConfigFile(); err != nil {
			return err
		}
		for _, l := range layers {
			rc, err := l.Compressed()
			if err != nil {
				return err
			}
			rc.Close()
		}
	}
	return nil
}

// Index returns the stored index with this digest.
func (s *Store) Index(digest v1.Hash) (v1.ImageIndex, error) {
	if _, err := os.Stat(filepath.Join(s.Dir, "index.json")); err != nil {
		return nil, fmt.Errorf("image store %s: %w", s.Dir, err)
	}
	p, err := layout.FromPath(s.Dir)
	if err != nil {
		return nil, err
	}
	top, err := p.ImageIndex()
	if err != nil {
		return nil, err
	}
	return top.ImageIndex(digest)
}

// Named returns the digest stored under refName.
func (s *Store) Named(refName string) (v1.Hash, error) {
	p, err := layout.FromPath(s.Dir)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("image store %s: %w", s.Dir, err)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		return v1.Hash{}, err
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return v1.Hash{}, err
	}
	for _, d := range m.Manifests {
		if d.Annotations[RefNameAnnotation] == refName {
			return d.Digest, nil
		}
	}
	return v1.Hash{}, fmt.Errorf("no image %q in the store %s; build it with nlx image build", refName, s.Dir)
}

// Names lists the named indexes of the store.
func (s *Store) Names() (map[string]v1.Hash, error) {
	out := map[string]v1.Hash{}
	p, err := layout.FromPath(s.Dir)
	if err != nil {
		return out, nil
	}
	idx, err := p.ImageIndex()
	if err != nil {
		return nil, err
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	for _, d := range m.Manifests {
		if n := d.Annotations[RefNameAnnotation]; n != "" {
			out[n] = d.Digest
		}
	}
	return out, nil
}

// WriteLayout writes idx as the only index of a new OCI layout at dir.
func WriteLayout(dir string, idx v1.ImageIndex, refName string) error {
	p, err := layoutWrite(dir)
	if err != nil {
		return fmt.Errorf("write layout %s: %w", dir, err)
	}
	return p.AppendIndex(idx, layoutAnnotations(refName))
}

// ReadLayout returns the index a layout holds: the one named refName, or,
// when refName is empty, the only one.
func ReadLayout(dir, refName string) (v1.ImageIndex, error) {
	p, err := layout.FromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("read layout %s: %w", dir, err)
	}
	top, err := p.ImageIndex()
	if err != nil {
		return nil, err
	}
	m, err := top.IndexManifest()
	if err != nil {
		return nil, err
	}
	var found []v1.Descriptor
	for _, d := range m.Manifests {
		if d.MediaType.IsIndex() && (refName == "" || d.Annotations[RefNameAnnotation] == refName) {
			found = append(found, d)
		}
	}
	if len(found) != 1 {
		names := []string{}
		for _, d := range m.Manifests {
			names = append(names, d.Annotations[RefNameAnnotation])
		}
		sort.Strings(names)
		return nil, fmt.Errorf("layout %s holds %d matching indexes (names %v); name one", dir, len(found), names)
	}
	return top.ImageIndex(found[0].Digest)
}

// Remote options: the usual docker config keychain, the context and, when
// set, a progress channel.
func remoteOptions(ctx context.Context, progress chan<- v1.Update) []remote.Option {
	opts := []remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)}
	if progress != nil {
		opts = append(opts, remote.WithProgress(progress))
	}
	return opts
}

// closeProgress closes a progress channel the registry client never got
// (it closes the ones it gets when the write ends).
func closeProgress(ch chan<- v1.Update) {
	if ch != nil {
		close(ch)
	}
}

// Push writes idx to ref and proves the registry now serves exactly it: the
// digest the registry reports for ref must be idx's.
func Push(ctx context.Context, idx v1.ImageIndex, ref string, progress chan<- v1.Update) (v1.Hash, error) {
	r, err := name.ParseReference(ref)
	if err != nil {
		closeProgress(progress)
		return v1.Hash{}, fmt.Errorf("reference %s: %w", ref, err)
	}
	want, err := idx.Digest()
	if err != nil {
		closeProgress(progress)
		return v1.Hash{}, err
	}
	if err := remote.WriteIndex(r, idx, remoteOptions(ctx, progress)...); err != nil {
		return v1.Hash{}, fmt.Errorf("push %s: %w", ref, err)
	}
	desc, err := remote.Head(r, remoteOptions(ctx, nil)...)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("verify push %s: %w", ref, err)
	}
	if desc.Digest != want {
		return v1.Hash{}, fmt.Errorf("verify push %s: the registry serves %s, not the pushed %s", ref, desc.Digest, want)
	}
	return want, nil
}

// Pull reads the index at ref from its registry.
func Pull(ctx context.Context, ref string) (v1.ImageIndex, error) {
	r, err := name.ParseReference(ref)
	if err != nil {
		return nil, fmt.Errorf("reference %s: %w", ref, err)
	}
	idx, err := remote.Index(r, remoteOptions(ctx, nil)...)
	if err != nil {
		return nil, fmt.Errorf("pull %s: %w", ref, err)
	}
	return idx, nil
}

// Resolve returns the digest a registry reference points at now.
func Resolve(ctx context.Context, ref string) (v1.Hash, error) {
	r, err := name.ParseReference(ref)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("reference %s: %w", ref, err)
	}
	desc, err := remote.Head(r, remoteOptions(ctx, nil)...)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("resolve %s: %w", ref, err)
	}
	return desc.Digest, nil
}

// layoutWrite starts an empty OCI layout at dir.
func layoutWrite(dir string) (layout.Path, error) {
	if err := os.RemoveAll(dir); err != nil {
		return "", err
	}
	return layout.Write(dir, empty.Index)
}

// layoutAnnotations names a descriptor of a layout.
func layoutAnnotations(refName string) layout.Option {
	return layout.WithAnnotations(map[string]string{RefNameAnnotation: refName})
}
