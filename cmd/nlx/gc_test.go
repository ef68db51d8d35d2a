package main

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/nlx-dev/nlx/state"
)

// TestGCExports: gc removes an expired export directory only when it is
// one (a directory, reached through no link, holding the manifest.json
// that was imported), never follows a link out of it, says why anything
// else stays, and a dry run reports exactly what the run removes.
func TestGCExports(t *testing.T) {
	root := t.TempDir()
	outside := filepath.Join(t.TempDir(), "precious")
	mkdir := func(rel string) string {
		t.Helper()
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write := func(path, data string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	link := func(target, path string) {
		t.Helper()
		if err := os.Symlink(target, path); err != nil {
			t.Fatal(err)
		}
	}
	mkdir("outside")
	if err := os.MkdirAll(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	write(filepath.Join(outside, "keep.txt"), "not an export's")
	digest := func(data string) string {
		s := sha256.Sum256([]byte(data))
		return "sha256:" + hex.EncodeToString(s[:])
	}
	const manifest = `{"version":"1"}`

	// An export, with a link out of it inside.
	good := mkdir("good")
	write(filepath.Join(good, exportManifest), manifest)
	mkdir("good/raw")
	write(filepath.Join(good, "raw", "jobs.json"), "[]")
	link(outside, filepath.Join(good, "raw", "out"))
	// A link to an export.
	real := mkdir("real")
	write(filepath.Join(real, exportManifest), manifest)
	link(real, filepath.Join(root, "alias"))
	// An export reached through a linked parent.
	mkdir("parent/inner")
	write(filepath.Join(root, "parent", "inner", exportManifest), manifest)
	link(filepath.Join(root, "parent"), filepath.Join(root, "viaparent"))
	// A directory without a manifest, a manifest that is a link, another
	// export than the one imported, a file.
	mkdir("nomanifest")
	linked := mkdir("linkedmanifest")
	link(filepath.Join(good, exportManifest), filepath.Join(linked, exportManifest))
	other := mkdir("other")
	write(filepath.Join(other, exportManifest), `{"version":"1","changed":true}`)
	write(filepath.Join(root, "file"), manifest)

	export := func(id, path string) state.GCItem {
		return state.GCItem{Kind: state.GCExport, ID: id, At: "2026-01-01T00:00:00Z", Why: "expired", Path: path, Manifest: digest(manifest)}
	}
	items := []state.GCItem{
		{Kind: state.GCClaim, ID: "c1", Why: "expired"},
		export("good", good),
		export("good-again", good+"/"), // two imports of one export

		export("alias", filepath.Join(root, "alias")),
		export("viaparent", filepath.Join(root, "viaparent", "inner")),
		export("nomanifest", filepath.Join(root, "nomanifest")),
		export("linkedmanifest", linked),
		export("other", other),
		export("file", filepath.Join(root, "file")),
		export("relative", "exports/x"),
		export("missing", filepath.Join(root, "missing")),
	}
	report := func() *state.GCReport {
		return &state.GCReport{Removed: append([]state.GCItem{}, items...), Kept: []state.GCItem{}, Newer: map[state.GCKind]int{}}
	}
	wantRemoved := []string{"c1", "good", "good-again"}
	wantKept := map[string]string{
		"alias":          "symbolic link",
		"viaparent":      "symbolic link",
		"nomanifest":     "no readable manifest.json",
		"linkedmanifest": "no readable manifest.json",
		"other":          "another export than the one imported",
		"file":           "not a directory",
		"relative":       "not an absolute path",
	}
	ids := func(list []state.GCItem) []string {
		var out []string
		for _, it := range list {
			out = append(out, it.ID)
		}
		return out
	}

	dry := report()
	checkExports(dry)
	if got := ids(dry.Removed); !reflect.DeepEqual(got, wantRemoved) {
		t.Errorf("dry run removes %v, want %v", got, wantRemoved)
	}
	if len(dry.Kept) != len(wantKept) {
		t.Errorf("dry run keeps %v, want %d items", ids(dry.Kept), len(wantKept))
	}
	for _, it := range dry.Kept {
		if want, ok := wantKept[it.ID]; !ok || !strings.Contains(it.Why, want) {
			t.Errorf("kept %s: %q, want it to say %q", it.ID, it.Why, want)
		}
	}
	if _, err := os.Stat(filepath.Join(good, exportManifest)); err != nil {
		t.Errorf("the dry run touched %s: %v", good, err)
	}

	run := report()
	checkExports(run)
	if err := removeExports(run); err != nil {
		t.Fatalf("removeExports: %v", err)
	}
	if !reflect.DeepEqual(run, dry) {
		t.Errorf("the run's report differs from its dry run's:\n run %+v\n dry %+v", run, dry)
	}
	if _, err := os.Lstat(good); !os.IsNotExist(err) {
		t.Errorf("%s is still there (%v)", good, err)
	}
	for _, p := range []string{filepath.Join(outside, "keep.txt"), filepath.Join(real, exportManifest),
		filepath.Join(root, "alias"), filepath.Join(root, "parent", "inner", exportManifest), filepath.Join(other, exportManifest),
		filepath.Join(root, "nomanifest"), filepath.Join(root, "file")} {
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("gc removed %s: %v", p, err)
		}
	}

	// The next gc finds the directory gone: it removes nothing.
	again := report()
	checkExports(again)
	if got := ids(again.Removed); !reflect.DeepEqual(got, []string{"c1"}) {
		t.Errorf("the second gc removes %v, want only the state's [c1]", got)
	}
}
