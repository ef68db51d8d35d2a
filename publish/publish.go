// Package publish puts nlx's small OCI artifacts in a registry and reads
// them back: a state snapshot, a plan, and the approval signatures attached
// to a plan as its referrers. An artifact is an OCI image manifest whose
// artifactType says what it holds, with the empty config and its blobs as
// layers. go-containerregistry does all the talking to the registry; this
// package adds the artifact's shape, the checks on what is read back, and a
// guard around the referrers tag of registries without the referrers API.
package publish

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// manifestLimit is the largest manifest Pull reads. nlx's manifests are a
// few hundred bytes; a registry serving megabytes is not serving one.
const manifestLimit = 4 << 20

var (
	// ErrNotFound is wrapped by the errors of Pull, Resolve, Tag (for its
	// source) when the registry has no manifest at the reference, or not
	// even the repository. A manifest whose blob is missing is damaged, not
	// absent, and does not give ErrNotFound.
	ErrNotFound = errors.New("not found")

	// ErrWrongType is wrapped by Pull's error when the manifest is not an
	// OCI image manifest shaped as an artifact (empty config) or its
	// artifactType is not the one asked for.
	ErrWrongType = errors.New("wrong artifact type")

	// ErrTooLarge is wrapped by Pull's error when the manifest is over
	// 4 MiB or a blob is over the caller's limit; nothing over the limit is
	// read.
	ErrTooLarge = errors.New("too large")
)

// Blob is one layer of an artifact.
type Blob struct {
	MediaType   string
	Data        []byte
	Annotations map[string]string
}

// Artifact is an OCI image manifest (schemaVersion 2, mediaType
// application/vnd.oci.image.manifest.v1+json) with artifactType set, the
// empty config (application/vnd.oci.empty.v1+json, the 2-byte "{}" blob),
// its blobs as layers, annotations, and optionally a subject (for
// referrers).
type Artifact struct {
	// ArtifactType names what the artifact holds; it is required.
	ArtifactType string
	// Blobs are the layers, in order; there is at least one.
	Blobs []Blob
	// Annotations of the manifest.
	Annotations map[string]string
	// Subject, when set, makes the artifact a referrer of that manifest,
	// which must be in the same repository. Only its media type, digest
	// and size are written, so the artifact's digest does not depend on
	// how the caller came by the descriptor.
	Subject *v1.Descriptor
}

// Pulled is an artifact as Pull read it.
type Pulled struct {
	// Descriptor of the manifest: digest, size, media type, artifactType.
	Descriptor v1.Descriptor
	// Ref is the digest reference it was read at: repo@sha256:...
	Ref         string
	Annotations map[string]string
	Blobs       []Blob
	Subject     *v1.Descriptor
}

// emptyConfig is the OCI empty descriptor's content.
var emptyConfig = []byte("{}")

// emptyDescriptor is the config of every artifact.
var emptyDescriptor = func() v1.Descriptor {
	h, n, err := v1.SHA256(bytes.NewReader(emptyConfig))
	if err != nil {
		panic(err)
	}
	return v1.Descriptor{MediaType: types.OCIEmptyJSON, Digest: h, Size: n}
}()

// remoteOptions are those of images: the docker config keychain and the
// context.
func remoteOptions(ctx context.Context) []remote.Option {
	return []remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)}
}

// parseRef parses a registry reference. bare reports a repository named
// without tag or digest, which go-containerregistry would silently read as
// ":latest": Push takes it to mean "by digest, untagged", the others refuse
// it.
func parseRef(ref string) (r name.Reference, bare bool, err error) {
	r, err = name.ParseReference(ref)
	if err != nil {
		return nil, false, fmt.Errorf("reference %s: %w", ref, err)
	}
	if t, ok := r.(name.Tag); ok && !strings.HasSuffix(ref, ":"+t.TagStr()) {
		return r, true, nil
	}
	return r, false, nil
}

// parseNamed is parseRef for a reference that must name a tag or digest.
// Repository is the repository ref names (registry and path), as
// go-containerregistry reads it; ref itself when it does not parse.
func Repository(ref string) string {
	r, err := name.ParseReference(ref)
	if err != nil {
		return ref
	}
	return r.Context().Name()
}

// IsReference reports whether s reads as a registry reference with a path
// and an explicit tag or digest (REGISTRY/NAME:TAG, REGISTRY/NAME@sha256:...).
func IsReference(s string) bool {
	if !strings.Contains(s, "/") {
		return false
	}
	_, err := name.ParseReference(s, name.StrictValidation)
	return err == nil
}

func parseNamed(ref string) (name.Reference, error) {
	r, bare, err := parseRef(ref)
	if err != nil {
		return nil, err
	}
	if bare {
		return nil, fmt.Errorf("reference %s names no tag or digest", ref)
	}
	return r, nil
}

// wrap adds op and ref to a registry error, and ErrNotFound when the
// registry said the manifest or repository does not exist.
func wrap(op, ref string, err error) error {
	if notFound(err) {
		return fmt.Errorf("%s %s: %w: %w", op, ref, ErrNotFound, err)
	}
	return fmt.Errorf("%s %s: %w", op, ref, err)
}

// notFound reports a registry's "no such manifest or repository". A HEAD
// answer has no body, hence the status code alone.
func notFound(err error) bool {
	var te *transport.Error
	if !errors.As(err, &te) {
		return false
	}
	if te.StatusCode == http.StatusNotFound {
		return true
	}
	for _, d := range te.Errors {
		if d.Code == transport.ManifestUnknownErrorCode || d.Code == transport.NameUnknownErrorCode {
			return true
		}
	}
	return false
}

// Push writes a to ref, blobs first, then the manifest, and proves the
// registry now serves exactly it: the digest the registry reports for ref
// must be a's. ref is a tag or digest reference, or a bare repository to
// push by digest without a tag (how referrers are usually pushed). The same
// Artifact always has the same digest. When a has a Subject, Push also
// makes sure the subject's referrers list names a (see attach).
func Push(ctx context.Context, ref string, a Artifact) (v1.Descriptor, error) {
	r, bare, err := parseRef(ref)
	if err != nil {
		return v1.Descriptor{}, err
	}
	img, err := newArtifactImage(a)
	if err != nil {
		return v1.Descriptor{}, fmt.Errorf("push %s: %w", ref, err)
	}
	desc := img.desc
	v1img, err := img.image()
	if err != nil {
		return v1.Descriptor{}, fmt.Errorf("push %s: %w", ref, err)
	}
	if bare {
		r = r.Context().Digest(desc.Digest.String())
	}
	if d, ok := r.(name.Digest); ok && d.DigestStr() != desc.Digest.String() {
		return v1.Descriptor{}, fmt.Errorf("push %s: the artifact's digest is %s", ref, desc.Digest)
	}
	push := func() error {
		if err := remote.Write(r, v1img, remoteOptions(ctx)...); err != nil {
			return wrap("push", ref, err)
		}
		got, err := remote.Head(r, remoteOptions(ctx)...)
		if err != nil {
			return wrap("verify push", ref, err)
		}
		if got.Digest != desc.Digest {
			return fmt.Errorf("verify push %s: the registry serves %s, not the pushed %s", ref, got.Digest, desc.Digest)
		}
		return nil
	}
	if a.Subject == nil {
		err = push()
	} else {
		err = attach(ctx, r.Context(), img, a.Subject.Digest, push)
	}
	if err != nil {
		return v1.Descriptor{}, err
	}
	return desc, nil
}

// Pull reads the artifact at ref: the manifest, which must be an OCI image
// manifest with the empty config and this artifactType, and each blob,
// whose digest and size are checked. A blob over limit bytes, or a
// manifest over 4 MiB, is refused (ErrTooLarge) before it is read. The
// manifest is read by the digest the registry reports for ref, so a tag
// that moves meanwhile cannot mix two artifacts.
func Pull(ctx context.Context, ref string, artifactType string, limit int64) (*Pulled, error) {
	r, err := parseNamed(ref)
	if err != nil {
		return nil, err
	}
	if artifactType == "" {
		return nil, fmt.Errorf("pull %s: no artifactType asked for", ref)
	}
	if limit < 0 {
		return nil, fmt.Errorf("pull %s: negative limit %d", ref, limit)
	}
	p, err := remote.NewPuller(remoteOptions(ctx)...)
	if err != nil {
		return nil, fmt.Errorf("pull %s: %w", ref, err)
	}
	head, err := p.Head(ctx, r)
	if err != nil {
		return nil, wrap("pull", ref, err)
	}
	if head.Size > manifestLimit {
		return nil, fmt.Errorf("pull %s: %w: the manifest has %d bytes, over %d", ref, ErrTooLarge, head.Size, manifestLimit)
	}
	if head.MediaType != types.OCIManifestSchema1 {
		return nil, fmt.Errorf("pull %s: %w: media type %s, not an OCI image manifest", ref, ErrWrongType, head.MediaType)
	}
	at := r.Context().Digest(head.Digest.String())
	// Get checks that what it read has the digest it asked for.
	got, err := p.Get(ctx, at)
	if err != nil {
		return nil, wrap("pull", at.String(), err)
	}
	if len(got.Manifest) > manifestLimit {
		return nil, fmt.Errorf("pull %s: %w: the manifest has %d bytes, over %d", ref, ErrTooLarge, len(got.Manifest), manifestLimit)
	}
	m, err := parseArtifact(got.Manifest, artifactType)
	if err != nil {
		return nil, fmt.Errorf("pull %s: %w", ref, err)
	}
	out := &Pulled{
		Descriptor: v1.Descriptor{
			MediaType:    types.OCIManifestSchema1,
			Size:         int64(len(got.Manifest)),
			Digest:       head.Digest,
			ArtifactType: m.ArtifactType,
		},
		Ref:         at.String(),
		Annotations: m.Annotations,
		Subject:     m.Subject,
	}
	for i, l := range m.Layers {
		if l.Size > limit {
			return nil, fmt.Errorf("pull %s: %w: blob %d (%s) has %d bytes, over the limit %d", ref, ErrTooLarge, i, l.Digest, l.Size, limit)
		}
		data, err := readBlob(ctx, p, r.Context(), l)
		if err != nil {
			return nil, fmt.Errorf("pull %s: blob %d: %w", ref, i, err)
		}
		out.Blobs = append(out.Blobs, Blob{MediaType: string(l.MediaType), Data: data, Annotations: l.Annotations})
	}
	return out, nil
}

// parseArtifact checks that raw is an artifact manifest of artifactType.
func parseArtifact(raw []byte, artifactType string) (*v1.Manifest, error) {
	var m v1.Manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("%w: the manifest is not JSON: %v", ErrWrongType, err)
	}
	if m.SchemaVersion != 2 || m.MediaType != types.OCIManifestSchema1 {
		return nil, fmt.Errorf("%w: schemaVersion %d, mediaType %q: not an OCI image manifest", ErrWrongType, m.SchemaVersion, m.MediaType)
	}
	if m.ArtifactType != artifactType {
		return nil, fmt.Errorf("%w: artifactType %q, want %q", ErrWrongType, m.ArtifactType, artifactType)
	}
	if m.Config.MediaType != emptyDescriptor.MediaType || m.Config.Digest != emptyDescriptor.Digest || m.Config.Size != emptyDescriptor.Size {
		return nil, fmt.Errorf("%w: config %s %s, not the empty config", ErrWrongType, m.Config.MediaType, m.Config.Digest)
	}
	for i, l := range m.Layers {
		if l.Size < 0 || l.Digest.Algorithm != "sha256" || len(l.Digest.Hex) != 64 {
			return nil, fmt.Errorf("blob %d: bad descriptor: size %d, digest %s", i, l.Size, l.Digest)
		}
	}
	return &m, nil
}

// readBlob reads the blob d describes from repo, no more than d.Size+1
// bytes, and checks its size and digest.
func readBlob(ctx context.Context, p *remote.Puller, repo name.Repository, d v1.Descriptor) ([]byte, error) {
	ref := repo.Digest(d.Digest.String())
	l, err := p.Layer(ctx, ref)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ref, err)
	}
	rc, err := l.Compressed()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ref, err)
	}
	defer rc.Close()
	data, err := io.ReadAll(io.LimitReader(rc, d.Size+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ref, err)
	}
	if int64(len(data)) != d.Size {
		return nil, fmt.Errorf("%s: the registry served more or fewer than the manifest's %d bytes", ref, d.Size)
	}
	if h, _, _ := v1.SHA256(bytes.NewReader(data)); h != d.Digest {
		return nil, fmt.Errorf("%s: the registry served content with digest %s", ref, h)
	}
	return data, nil
}

// Resolve returns the descriptor (media type, size, digest) of what ref
// points at now, by a HEAD request.
func Resolve(ctx context.Context, ref string) (v1.Descriptor, error) {
	r, err := parseNamed(ref)
	if err != nil {
		return v1.Descriptor{}, err
	}
	d, err := remote.Head(r, remoteOptions(ctx)...)
	if err != nil {
		return v1.Descriptor{}, wrap("resolve", ref, err)
	}
	return *d, nil
}

// Tag points tag, a full reference repo:tag in src's repository, at the
// manifest src refers to, without uploading anything else (the registry
// already has its blobs), and checks that the registry now serves it
// there. It is how a tag moves, say on merge.
func Tag(ctx context.Context, src string, tag string) error {
	s, err := parseNamed(src)
	if err != nil {
		return err
	}
	t, err := name.NewTag(tag)
	if err != nil {
		return fmt.Errorf("tag %s: %w", tag, err)
	}
	if !strings.HasSuffix(tag, ":"+t.TagStr()) {
		return fmt.Errorf("tag %s names no tag", tag)
	}
	if t.Context().String() != s.Context().String() {
		return fmt.Errorf("tag %s: not in the repository of %s", tag, src)
	}
	d, err := remote.Get(s, remoteOptions(ctx)...)
	if err != nil {
		return wrap("tag from", src, err)
	}
	if err := remote.Tag(t, d, remoteOptions(ctx)...); err != nil {
		return wrap("tag", tag, err)
	}
	got, err := remote.Head(t, remoteOptions(ctx)...)
	if err != nil {
		return wrap("verify tag", tag, err)
	}
	if got.Digest != d.Digest {
		return fmt.Errorf("verify tag %s: the registry serves %s, not %s", tag, got.Digest, d.Digest)
	}
	return nil
}
