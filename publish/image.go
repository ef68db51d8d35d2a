package publish

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// artifactImage is an Artifact as the v1.Image core remote.Write pushes:
// the manifest is made once, here, so its bytes (and digest) are exactly
// what was computed, and the layers are the blobs held in memory.
type artifactImage struct {
	raw    []byte
	desc   v1.Descriptor
	blobs  map[v1.Hash]v1.Layer
	config v1.Layer
}

var _ partial.CompressedImageCore = (*artifactImage)(nil)

// newArtifactImage checks a and makes its manifest. encoding/json writes
// map keys sorted, so the same Artifact always gives the same bytes.
func newArtifactImage(a Artifact) (*artifactImage, error) {
	if a.ArtifactType == "" {
		return nil, errors.New("the artifact has no artifactType")
	}
	if len(a.Blobs) == 0 {
		return nil, errors.New("the artifact has no blob")
	}
	img := &artifactImage{
		blobs:  map[v1.Hash]v1.Layer{},
		config: static.NewLayer(emptyConfig, types.OCIEmptyJSON),
	}
	m := v1.Manifest{
		SchemaVersion: 2,
		MediaType:     types.OCIManifestSchema1,
		ArtifactType:  a.ArtifactType,
		Config:        emptyDescriptor,
		Annotations:   a.Annotations,
	}
	for i, b := range a.Blobs {
		if b.MediaType == "" {
			return nil, fmt.Errorf("blob %d has no media type", i)
		}
		h, n, err := v1.SHA256(bytes.NewReader(b.Data))
		if err != nil {
			return nil, err
		}
		m.Layers = append(m.Layers, v1.Descriptor{MediaType: types.MediaType(b.MediaType), Size: n, Digest: h, Annotations: b.Annotations})
		img.blobs[h] = static.NewLayer(b.Data, types.MediaType(b.MediaType))
	}
	if s := a.Subject; s != nil {
		if s.MediaType == "" || s.Digest.Hex == "" || s.Size <= 0 {
			return nil, fmt.Errorf("the subject descriptor is incomplete: media type %q, digest %q, size %d", s.MediaType, s.Digest, s.Size)
		}
		m.Subject = &v1.Descriptor{MediaType: s.MediaType, Size: s.Size, Digest: s.Digest}
	}
	raw, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	h, n, err := v1.SHA256(bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	img.raw = raw
	img.desc = v1.Descriptor{MediaType: types.OCIManifestSchema1, Size: n, Digest: h, ArtifactType: a.ArtifactType}
	return img, nil
}

// image is img as the v1.Image remote.Write takes.
func (img *artifactImage) image() (v1.Image, error) {
	return partial.CompressedToImage(img)
}

// RawManifest implements partial.CompressedImageCore.
func (img *artifactImage) RawManifest() ([]byte, error) { return img.raw, nil }

// MediaType implements partial.CompressedImageCore.
func (img *artifactImage) MediaType() (types.MediaType, error) {
	return types.OCIManifestSchema1, nil
}

// RawConfigFile implements partial.CompressedImageCore.
func (img *artifactImage) RawConfigFile() ([]byte, error) { return emptyConfig, nil }

// ConfigLayer gives the config its media type (partial's default would
// call it an image config).
func (img *artifactImage) ConfigLayer() (v1.Layer, error) { return img.config, nil }

// LayerByDigest implements partial.CompressedImageCore.
func (img *artifactImage) LayerByDigest(h v1.Hash) (partial.CompressedLayer, error) {
	if l, ok := img.blobs[h]; ok {
		return l, nil
	}
	if h == emptyDescriptor.Digest {
		return img.config, nil
	}
	return nil, fmt.Errorf("the artifact has no blob %s", h)
}
