package images

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/nlx-dev/nlx/internal/reason"
)

// hdr is one tar entry of a hand-made layer.
type hdr struct {
	name, link string
	typ        byte
	body       string
}

func layerOf(t *testing.T, entries ...hdr) v1.Layer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.typ, Mode: 0o644, Size: int64(len(e.body))}
		switch e.typ {
		case tar.TypeDir:
			h.Mode = 0o755
		case tar.TypeChar, tar.TypeBlock:
			h.Devmajor, h.Devminor = 1, 3
		}
		if e.typ != tar.TypeReg {
			h.Size = 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if e.typ == tar.TypeReg {
			io.WriteString(tw, e.body)
		}
	}
	tw.Close()
	data := buf.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func imageOf(t *testing.T, layers ...v1.Layer) v1.Image {
	t.Helper()
	img, err := mutate.AppendLayers(empty.Image, layers...)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func file(name, body string) hdr   { return hdr{name: name, typ: tar.TypeReg, body: body} }
func dir(name string) hdr          { return hdr{name: name, typ: tar.TypeDir} }
func symlink(name, to string) hdr  { return hdr{name: name, typ: tar.TypeSymlink, link: to} }
func hardlink(name, to string) hdr { return hdr{name: name, typ: tar.TypeLink, link: to} }

// TestUnpackRefusesHostileLayers: every way out of the root is refused with
// its code, and nothing lands outside the root.
func TestUnpackRefusesHostileLayers(t *testing.T) {
	tests := []struct {
		name   string
		layers [][]hdr
		code   reason.Code
	}{
		{"dot-dot path", [][]hdr{{file("../escaped", "x")}}, reason.PathTraversal},
		{"dot-dot inside a path", [][]hdr{{file("etc/../../escaped", "x")}}, reason.PathTraversal},
		{"absolute path", [][]hdr{{file("/escaped", "x")}}, reason.AbsolutePath},
		{"symlink then write through it", [][]hdr{{symlink("etc", "../outside"), file("etc/passwd", "x")}}, reason.EscapingLink},
		{"absolute symlink then write through it", [][]hdr{{symlink("etc", "/tmp"), file("etc/passwd", "x")}}, reason.LinkInPath},
		{"symlink in a lower layer, write through it in an upper one", [][]hdr{{symlink("lib", "/")}, {file("lib/x", "x")}}, reason.LinkInPath},
		{"relative symlink climbing out", [][]hdr{{dir("a"), symlink("a/b", "../../../etc/shadow")}}, reason.EscapingLink},
		{"hardlink to outside", [][]hdr{{hardlink("shadow", "../../etc/shadow")}}, reason.EscapingHardlink},
		{"hardlink to an absolute path", [][]hdr{{hardlink("shadow", "/etc/shadow")}}, reason.EscapingHardlink},
		{"hardlink through a symlink", [][]hdr{{symlink("s", "/etc"), hardlink("shadow", "s/shadow")}}, reason.LinkInPath},
		{"character device", [][]hdr{{{name: "dev/null", typ: tar.TypeChar}}}, reason.DeviceNode},
		{"block device", [][]hdr{{{name: "dev/sda", typ: tar.TypeBlock}}}, reason.DeviceNode},
		{"fifo", [][]hdr{{{name: "pipe", typ: tar.TypeFifo}}}, reason.SpecialFile},
		{"whiteout of a parent", [][]hdr{{file("etc/keep", "x")}, {file("etc/.wh...", "")}}, reason.BadWhiteout},
		{"whiteout climbing out", [][]hdr{{file("../.wh.etc", "")}}, reason.PathTraversal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base := t.TempDir()
			root := filepath.Join(base, "root")
			outside := filepath.Join(base, "outside")
			os.MkdirAll(outside, 0o755)
			var layers []v1.Layer
			for _, l := range tt.layers {
				layers = append(layers, layerOf(t, l...))
			}
			err := Unpack(context.Background(), imageOf(t, layers...), root)
			var ie *reason.Error
			if !errors.As(err, &ie) || ie.Code != tt.code {
				t.Fatalf("got %v, want code %s", err, tt.code)
			}
			if entries, _ := os.ReadDir(outside); len(entries) > 0 {
				t.Errorf("something was written outside the root: %v", entries)
			}
			if _, err := os.Stat(filepath.Join(base, "escaped")); err == nil {
				t.Error("a file escaped the root")
			}
		})
	}
}

// TestUnpackLayersAndWhiteouts: later layers replace earlier ones, a
// whiteout removes a file, an opaque whiteout empties a directory of what
// lower layers put there but keeps what its own layer wrote.
func TestUnpackLayersAndWhiteouts(t *testing.T) {
	root := filepath.Join(t.TempDir(), "root")
	img := imageOf(t,
		layerOf(t, dir("etc"), file("etc/a", "1"), file("etc/b", "1"), dir("var"), file("var/old", "1"), file("var/keep-lower", "1"),
			symlink("etc/localtime", "/usr/share/zoneinfo/UTC")),
		layerOf(t, file("etc/a", "2"), file("etc/.wh.b", ""), file("var/new", "2"), file("var/.wh..wh..opq", ""), hardlink("etc/a-link", "etc/a")),
	)
	if err := Unpack(context.Background(), img, root); err != nil {
		t.Fatal(err)
	}
	read := func(p string) string {
		data, err := os.ReadFile(filepath.Join(root, p))
		if err != nil {
			return "<missing>"
		}
		return string(data)
	}
	for p, want := range map[string]string{
		"etc/a": "2", "etc/b": "<missing>", "var/old": "<missing>", "var/keep-lower": "<missing>", "var/new": "2", "etc/a-link": "2",
	} {
		if got := read(p); got != want {
			t.Errorf("%s: got %q, want %q", p, got, want)
		}
	}
	if target, err := os.Readlink(filepath.Join(root, "etc/localtime")); err != nil || target != "/usr/share/zoneinfo/UTC" {
		t.Errorf("absolute link inside the image: %q %v", target, err)
	}
	if entries, _ := os.ReadDir(filepath.Join(root, "var")); len(entries) != 1 {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("var after the opaque whiteout: %s", strings.Join(names, ", "))
	}
}
