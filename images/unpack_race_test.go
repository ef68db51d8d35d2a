//go:build linux

package images

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nlx-dev/nlx/internal/reason"
	"github.com/nlx-dev/nlx/internal/testtool"
)

// TestUnpackSwapRace: while Unpack writes d/f0000, d/f0001, ... another
// process keeps exchanging the directory d for a symbolic link to a
// directory outside the root (renameat2 RENAME_EXCHANGE, atomic). Checking
// d before writing through it is not enough: between the check and the
// open, d may be the link. The root's confinement refuses every such
// write, so nothing ever lands outside.
func TestUnpackSwapRace(t *testing.T) {
	base := t.TempDir()
	root := filepath.Join(base, "root")
	outside := filepath.Join(base, "outside")
	must(t, os.MkdirAll(filepath.Join(root, "d"), 0o755))
	must(t, os.MkdirAll(outside, 0o755))
	must(t, os.Symlink(outside, filepath.Join(root, "l")))

	var entries []hdr
	for i := range 64 {
		entries = append(entries, file(fmt.Sprintf("d/f%04d", i), "x"))
	}
	img := imageOf(t, layerOf(t, entries...))

	defer testtool.Exchange(t, filepath.Join(root, "d"), filepath.Join(root, "l"))()

	refused, done, other := 0, 0, 0
	deadline := time.Now().Add(2 * time.Second)
	for attempt := 0; attempt < 5000 && time.Now().Before(deadline); attempt++ {
		err := Unpack(context.Background(), img, root)
		var ie *reason.Error
		switch {
		case err == nil:
			done++
		case errors.As(err, &ie) && ie.Code == reason.LinkInPath:
			refused++
		default:
			// A name that changed type mid-lookup (ENOTDIR) is refused
			// too; only what lands outside is not fine.
			other++
		}
		if leaked, _ := os.ReadDir(outside); len(leaked) > 0 {
			t.Fatalf("attempt %d: %d files were written outside the root through the swapped link (e.g. %s)", attempt, len(leaked), leaked[0].Name())
		}
	}
	t.Logf("%d unpacks refused (link_in_path), %d failed otherwise, %d finished", refused, other, done)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestUnpackConfinedAfterCheck: every kind of write Unpack makes is
// confined by the root itself. After an entry passed its checks (d is a
// directory), d is swapped for a symbolic link out of the root, absolute or
// relative; the write, removal, link or mode change that follows is refused
// (link_in_path), or replaces the link when the entry is d itself, and what
// lies outside is untouched.
func TestUnpackConfinedAfterCheck(t *testing.T) {
	tests := []struct {
		name  string
		lower []hdr // unpacked before the swap is armed
		layer []hdr
		// replaced: the entry itself is d, and replaces the link swapped
		// in at its name rather than following it.
		replaced bool
	}{
		{name: "regular file", layer: []hdr{file("d/x", "x")}},
		{name: "directory", layer: []hdr{dir("d/sub")}},
		{name: "existing directory", lower: []hdr{dir("d")}, layer: []hdr{dir("d/")}, replaced: true},
		{name: "symlink", layer: []hdr{symlink("d/l", "x")}},
		{name: "hardlink", lower: []hdr{file("f", "x")}, layer: []hdr{hardlink("d/h", "f")}},
		{name: "replacing a file", lower: []hdr{file("d/keep", "x")}, layer: []hdr{file("d/keep", "y")}},
		{name: "whiteout", lower: []hdr{file("d/keep", "x")}, layer: []hdr{file("d/.wh.keep", "")}},
		{name: "opaque whiteout", lower: []hdr{file("d/keep", "x")}, layer: []hdr{file("d/.wh..wh..opq", "")}},
	}
	for _, link := range []string{"absolute", "relative"} {
		for _, tt := range tests {
			t.Run(link+"/"+tt.name, func(t *testing.T) {
				base := t.TempDir()
				root := filepath.Join(base, "root")
				outside := filepath.Join(base, "outside")
				must(t, os.MkdirAll(filepath.Join(root, "d"), 0o755))
				must(t, os.MkdirAll(outside, 0o700))
				must(t, os.WriteFile(filepath.Join(outside, "keep"), []byte("outside"), 0o600))
				if tt.lower != nil {
					must(t, Unpack(context.Background(), imageOf(t, layerOf(t, tt.lower...)), root))
				}
				target := outside
				if link == "relative" {
					target = "../outside"
				}
				swapped := false
				afterCheck = func(rel string) {
					if swapped || (rel != "d" && !strings.HasPrefix(rel, "d/")) {
						return
					}
					swapped = true
					must(t, os.Rename(filepath.Join(root, "d"), filepath.Join(root, "d.checked")))
					must(t, os.Symlink(target, filepath.Join(root, "d")))
				}
				defer func() { afterCheck = nil }()

				err := Unpack(context.Background(), imageOf(t, layerOf(t, tt.layer...)), root)
				if !swapped {
					t.Fatal("the swap never ran")
				}
				var ie *reason.Error
				switch {
				case tt.replaced:
					if fi, lerr := os.Lstat(filepath.Join(root, "d")); err != nil || lerr != nil || !fi.IsDir() {
						t.Errorf("got %v, %v: want the link replaced by the directory", err, lerr)
					}
				case !errors.As(err, &ie) || ie.Code != reason.LinkInPath:
					t.Errorf("got %v, want %s", err, reason.LinkInPath)
				}
				entries, _ := os.ReadDir(outside)
				if len(entries) != 1 || entries[0].Name() != "keep" {
					var names []string
					for _, e := range entries {
						names = append(names, e.Name())
					}
					t.Errorf("outside holds %v, want only keep", names)
				}
				data, err := os.ReadFile(filepath.Join(outside, "keep"))
				if err != nil || string(data) != "outside" {
					t.Errorf("outside/keep: %q %v", data, err)
				}
				if fi, err := os.Stat(outside); err != nil || fi.Mode().Perm() != 0o700 {
					t.Errorf("outside's mode changed: %v %v", fi.Mode(), err)
				}
			})
		}
	}
}
