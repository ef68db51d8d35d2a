//go:build linux

package images

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nlx-dev/nlx/internal/reason"
	"github.com/nlx-dev/nlx/internal/testtool"
	"github.com/nlx-dev/nlx/schema"
)

// TestLayerFileSwapRace: while a files layer is built, another process
// keeps exchanging one of its files for a symbolic link to a secret outside
// the config directory (renameat2 RENAME_EXCHANGE). The file is listed as a
// regular file, then read: by host path, the read followed the link and
// baked the secret into the layer. Through the config directory's root it
// never leaves the directory, and a file that is no longer the one listed
// is refused.
func TestLayerFileSwapRace(t *testing.T) {
	base := t.TempDir()
	cfg := filepath.Join(base, "config")
	secret := filepath.Join(base, "host-secret")
	must(t, os.MkdirAll(filepath.Join(cfg, "root"), 0o755))
	must(t, os.WriteFile(secret, []byte("HOST-SECRET"), 0o600))
	must(t, os.WriteFile(filepath.Join(cfg, "root", "f"), []byte("harmless"), 0o644))
	// The link waits outside the layer's tree, so the tree never lists it.
	must(t, os.Symlink(secret, filepath.Join(cfg, "spare")))

	defer testtool.Exchange(t, filepath.Join(cfg, "root", "f"), filepath.Join(cfg, "spare"))()

	im := &schema.Image{Platforms: []string{"linux/amd64"}, Base: "scratch", Layers: []schema.Layer{{Files: "root", Dest: "/srv"}}}
	built, refused := 0, 0
	deadline := time.Now().Add(3 * time.Second)
	for attempt := 0; attempt < 2000 && time.Now().Before(deadline); attempt++ {
		res, err := Build(context.Background(), Input{Name: "x", Image: im, ConfigDir: cfg, Cache: &Cache{Dir: filepath.Join(base, "cache", fmt.Sprint(attempt))}})
		if err != nil {
			refused++
			continue
		}
		built++
		if bytes.Contains(layerBytes(t, res), []byte("HOST-SECRET")) {
			t.Fatalf("attempt %d: the layer holds the secret the swapped link points at", attempt)
		}
	}
	t.Logf("%d builds refused, %d built", refused, built)
}

// layerBytes is the uncompressed content of every layer of res's images.
func layerBytes(t *testing.T, res *Result) []byte {
	t.Helper()
	m, err := res.Index.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	for _, d := range m.Manifests {
		img, err := res.Index.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		layers, err := img.Layers()
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range layers {
			rc, err := l.Uncompressed()
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(&out, rc)
			rc.Close()
		}
	}
	return out.Bytes()
}

// TestLayerFileConfined: a files layer's file swapped, after it was
// listed, for a link (out of the config directory, or to another file of
// it) is refused when it is read, for the cache key and for the tar; one
// whose content changed after the key was computed is refused when the tar
// is written, so no cache entry holds other content than its key names.
func TestLayerFileConfined(t *testing.T) {
	tests := []struct {
		name string
		swap func(t *testing.T, cfg, outside string)
		when string      // "key" or "tar": after which step the swap happens
		want reason.Code // substring of the error
	}{
		{"link out of the config directory, before the key", func(t *testing.T, cfg, outside string) {
			replaceWithLink(t, filepath.Join(cfg, "root", "f"), filepath.Join(outside, "secret"))
		}, "key", reason.EscapingSymlink},
		{"relative link out, before the tar", func(t *testing.T, cfg, outside string) {
			replaceWithLink(t, filepath.Join(cfg, "root", "f"), "../../outside/secret")
		}, "tar", reason.EscapingSymlink},
		{"link to another file of the config, before the tar", func(t *testing.T, cfg, outside string) {
			replaceWithLink(t, filepath.Join(cfg, "root", "f"), "../other")
		}, "tar", "no longer the regular file listed"},
		{"parent directory swapped for a link out", func(t *testing.T, cfg, outside string) {
			must(t, os.Rename(filepath.Join(cfg, "root"), filepath.Join(cfg, "root.listed")))
			must(t, os.Symlink(outside, filepath.Join(cfg, "root")))
		}, "key", reason.EscapingSymlink},
		{"content changed after the key", func(t *testing.T, cfg, outside string) {
			must(t, os.WriteFile(filepath.Join(cfg, "root", "f"), []byte("HARMLESS"), 0o644))
		}, "tar", "not what the layer's cache key was computed from"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base := t.TempDir()
			cfg, outside := filepath.Join(base, "config"), filepath.Join(base, "outside")
			must(t, os.MkdirAll(filepath.Join(cfg, "root"), 0o755))
			must(t, os.MkdirAll(outside, 0o755))
			must(t, os.WriteFile(filepath.Join(cfg, "root", "f"), []byte("harmless"), 0o644))
			must(t, os.WriteFile(filepath.Join(cfg, "other"), []byte("OTHER-FILE"), 0o644))
			must(t, os.WriteFile(filepath.Join(outside, "secret"), []byte("HOST-SECRET"), 0o644))
			root, err := os.OpenRoot(cfg)
			must(t, err)
			defer root.Close()

			c := newContent()
			must(t, c.addTree(root, "root", "/srv"))
			if tt.when == "key" {
				tt.swap(t, cfg, outside)
			}
			err = newKey("files").content(c)
			if tt.when == "tar" {
				must(t, err)
				tt.swap(t, cfg, outside)
				var buf bytes.Buffer
				err = writeTar(&buf, c.sorted(), time.Unix(0, 0))
				if bytes.Contains(buf.Bytes(), []byte("SECRET")) || bytes.Contains(buf.Bytes(), []byte("OTHER")) {
					t.Error("the tar holds what the link points at")
				}
			}
			if err == nil || !strings.Contains(err.Error(), string(tt.want)) {
				t.Fatalf("got %v, want an error containing %q", err, tt.want)
			}
			var ie *reason.Error
			if tt.want == reason.EscapingSymlink && (!errors.As(err, &ie) || ie.Code != reason.EscapingSymlink) {
				t.Errorf("got %v, want code %s", err, reason.EscapingSymlink)
			}
		})
	}
}

func replaceWithLink(t *testing.T, p, target string) {
	t.Helper()
	must(t, os.Remove(p))
	must(t, os.Symlink(target, p))
}

// TestLayerFileUnchanged: the entry's recorded sum is what the tar holds.
func TestLayerFileUnchanged(t *testing.T) {
	cfg := t.TempDir()
	must(t, os.MkdirAll(filepath.Join(cfg, "root"), 0o755))
	must(t, os.WriteFile(filepath.Join(cfg, "root", "f"), []byte("harmless"), 0o644))
	root, err := os.OpenRoot(cfg)
	must(t, err)
	defer root.Close()
	c := newContent()
	must(t, c.addTree(root, "root", "/srv"))
	must(t, newKey("files").content(c))
	var buf bytes.Buffer
	must(t, writeTar(&buf, c.sorted(), time.Unix(0, 0)))
	tr := tar.NewReader(&buf)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			t.Fatal("srv/f not in the tar")
		}
		must(t, err)
		if h.Name == "srv/f" {
			data, _ := io.ReadAll(tr)
			if sum := sha256.Sum256(data); string(data) != "harmless" || !bytes.Equal(sum[:], c.entries["srv/f"].sum) {
				t.Fatalf("srv/f holds %q", data)
			}
			return
		}
	}
}
