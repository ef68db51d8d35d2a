package images

import (
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/nlx-dev/nlx/internal/atomicfile"
	"github.com/nlx-dev/nlx/internal/reason"
)

// GzipLevel is the one compression level of every layer nlx writes. It is
// part of what makes a build reproducible: a change of level changes every
// digest (TestGoldenDigest).
const GzipLevel = 6

// layerFormat versions how nlx turns inputs into a layer; it is part of
// every cache key, so a change of tar or gzip encoding rebuilds.
const layerFormat = "nlx-layer-1"

// Cache holds built layers, content-addressed by their inputs: a layer
// whose inputs did not change is taken from here, not built again.
type Cache struct {
	Dir string
}

// cacheEntry records one built layer.
type cacheEntry struct {
	Digest string `json:"digest"`
	DiffID string `json:"diff_id"`
	Size   int64  `json:"size"`
}

func (c *Cache) blobPath(h v1.Hash) string {
	return filepath.Join(c.Dir, "blobs", h.Algorithm, h.Hex)
}

func (c *Cache) keyPath(key string) string {
	return filepath.Join(c.Dir, "keys", key+".json")
}

// lookup returns the layer built for key, if it is in the cache whole.
func (c *Cache) lookup(key string) (v1.Layer, bool) {
	data, err := os.ReadFile(c.keyPath(key))
	if err != nil {
		return nil, false
	}
	var e cacheEntry
	if json.Unmarshal(data, &e) != nil {
		return nil, false
	}
	l, err := newCachedLayer(c, e)
	if err != nil {
		return nil, false
	}
	if info, err := os.Stat(l.path); err != nil || info.Size() != e.Size {
		return nil, false
	}
	return l, true
}

// store writes a layer's tar (produced by write) compressed into the cache
// under key and returns it.
func (c *Cache) store(key string, write func(io.Writer) error) (v1.Layer, error) {
	if err := os.MkdirAll(filepath.Join(c.Dir, "blobs", "sha256"), 0o755); err != nil {
		return nil, fmt.Errorf("layer cache: %w", err)
	}
	if err := os.MkdirAll(filepath.Join(c.Dir, "keys"), 0o755); err != nil {
		return nil, fmt.Errorf("layer cache: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Join(c.Dir, "blobs"), "layer-*")
	if err != nil {
		return nil, fmt.Errorf("layer cache: %w", err)
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	compressed := sha256.New()
	counter := &countWriter{}
	zw, err := gzip.NewWriterLevel(io.MultiWriter(tmp, compressed, counter), GzipLevel)
	if err != nil {
		return nil, err
	}
	uncompressed := sha256.New()
	if err := write(io.MultiWriter(zw, uncompressed)); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, fmt.Errorf("compress layer: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return nil, fmt.Errorf("layer cache: %w", err)
	}
	e := cacheEntry{Digest: hexHash(compressed), DiffID: hexHash(uncompressed), Size: counter.n}
	l, err := newCachedLayer(c, e)
	if err != nil {
		return nil, err
	}
	if err := os.Rename(tmp.Name(), l.path); err != nil {
		return nil, fmt.Errorf("layer cache: %w", err)
	}
	data, _ := json.Marshal(e)
	if err := atomicfile.Write(c.keyPath(key), data, 0o600); err != nil {
		return nil, fmt.Errorf("layer cache: %w", err)
	}
	return l, nil
}

func hexHash(h hash.Hash) string { return "sha256:" + hex.EncodeToString(h.Sum(nil)) }

type countWriter struct{ n int64 }

func (w *countWriter) Write(p []byte) (int, error) { w.n += int64(len(p)); return len(p), nil }

// cachedLayer is a layer whose compressed blob is a file of the cache.
type cachedLayer struct {
	path           string
	digest, diffID v1.Hash
	size           int64
}

func newCachedLayer(c *Cache, e cacheEntry) (*cachedLayer, error) {
	d, err := v1.NewHash(e.Digest)
	if err != nil {
		return nil, err
	}
	diff, err := v1.NewHash(e.DiffID)
	if err != nil {
		return nil, err
	}
	return &cachedLayer{path: c.blobPath(d), digest: d, diffID: diff, size: e.Size}, nil
}

var _ v1.Layer = (*cachedLayer)(nil)

func (l *cachedLayer) Digest() (v1.Hash, error)            { return l.digest, nil }
func (l *cachedLayer) DiffID() (v1.Hash, error)            { return l.diffID, nil }
func (l *cachedLayer) Size() (int64, error)                { return l.size, nil }
func (l *cachedLayer) MediaType() (types.MediaType, error) { return types.OCILayer, nil }
func (l *cachedLayer) Compressed() (io.ReadCloser, error)  { return os.Open(l.path) }

func (l *cachedLayer) Uncompressed() (io.ReadCloser, error) {
	f, err := os.Open(l.path)
	if err != nil {
		return nil, err
	}
	zr, err := gzip.NewReader(f)
	if err != nil {
		f.Close()
		return nil, err
	}
	return readCloser{zr, f}, nil
}

type readCloser struct {
	io.Reader
	f *os.File
}

func (r readCloser) Close() error { return r.f.Close() }

// key hashes a layer's inputs into a cache key.
type key struct{ h hash.Hash }

func newKey(kind string) *key {
	k := &key{h: sha256.New()}
	k.add(layerFormat, kind, fmt.Sprint(GzipLevel))
	return k
}

func (k *key) add(parts ...string) {
	for _, p := range parts {
		fmt.Fprintf(k.h, "%d:%s\n", len(p), p)
	}
}

func (k *key) String() string { return hex.EncodeToString(k.h.Sum(nil)) }

// contentKey adds every entry of c to k: names, types, modes, links, and
// the content of each file.
func (k *key) content(c *layerContent) error {
	for _, e := range c.sorted() {
		k.add(e.name, string(e.typ), fmt.Sprint(e.mode), e.linkname)
		if e.typ != '0' {
			continue
		}
		h := sha256.New()
		if e.data != nil {
			h.Write(e.data)
		} else {
			f, err := e.open()
			if err != nil {
				return err
			}
			_, err = io.Copy(h, f)
			f.Close()
			if err != nil {
				return fmt.Errorf("layer file: %w", err)
			}
		}
		e.sum = h.Sum(nil)
		k.add(hex.EncodeToString(e.sum))
	}
	return nil
}

// buildContent returns the cached layer for content c, or builds it.
func (c *Cache) buildContent(k *key, content *layerContent, mtime time.Time) (v1.Layer, bool, error) {
	if err := k.content(content); err != nil {
		return nil, false, err
	}
	k.add(fmt.Sprint(mtime.Unix()))
	ks := k.String()
	if l, ok := c.lookup(ks); ok {
		return l, true, nil
	}
	l, err := c.store(ks, func(w io.Writer) error { return writeTar(w, content.sorted(), mtime) })
	if err != nil {
		var ie *reason.Error
		if errors.As(err, &ie) {
			return nil, false, ie
		}
		return nil, false, err
	}
	return l, false, nil
}
