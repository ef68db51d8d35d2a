package images

import (
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// IndexInfo describes an image index for people and scripts.
type IndexInfo struct {
	Digest    string         `json:"digest"`
	MediaType string         `json:"media_type"`
	Platforms []PlatformInfo `json:"platforms"`
}

// PlatformInfo describes one platform's image.
type PlatformInfo struct {
	Platform string      `json:"platform"`
	Manifest string      `json:"manifest"`
	Config   string      `json:"config"`
	Layers   []LayerDesc `json:"layers"`
}

// LayerDesc is one layer as its manifest names it.
type LayerDesc struct {
	Digest    string `json:"digest"`
	Size      int64  `json:"size"`
	MediaType string `json:"media_type"`
}

// Inspect reads an index and its images' manifests.
func Inspect(idx v1.ImageIndex) (*IndexInfo, error) {
	d, err := idx.Digest()
	if err != nil {
		return nil, err
	}
	mt, err := idx.MediaType()
	if err != nil {
		return nil, err
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	info := &IndexInfo{Digest: d.String(), MediaType: string(mt), Platforms: []PlatformInfo{}}
	for _, desc := range m.Manifests {
		img, err := idx.Image(desc.Digest)
		if err != nil {
			return nil, err
		}
		man, err := img.Manifest()
		if err != nil {
			return nil, err
		}
		p := PlatformInfo{Manifest: desc.Digest.String(), Config: man.Config.Digest.String(), Layers: []LayerDesc{}}
		if desc.Platform != nil {
			p.Platform = desc.Platform.String()
		}
		for _, l := range man.Layers {
			p.Layers = append(p.Layers, LayerDesc{Digest: l.Digest.String(), Size: l.Size, MediaType: string(l.MediaType)})
		}
		info.Platforms = append(info.Platforms, p)
	}
	return info, nil
}

// PlatformImage returns p's image of an index.
func PlatformImage(idx v1.ImageIndex, p v1.Platform) (v1.Image, error) {
	return platformOf(idx, p)
}
