package nlx

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestSourceHoldsTheBuild: Source holds every file the go command builds
// the nlx command from, for both platforms images are built for (so that
// an nlx layer builds exactly the command), and no package directory the
// command no longer needs.
func TestSourceHoldsTheBuild(t *testing.T) {
	root, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	need := map[string]bool{"go.mod": true, "go.sum": true} // files
	dirs := map[string]bool{".": true}                      // package directories
	for _, arch := range []string{"amd64", "arm64"} {
		cmd := exec.Command("go", "list", "-deps", "-json=ImportPath,Dir,GoFiles,SFiles,HFiles,SysoFiles,EmbedFiles,Module", "./"+Main)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch, "GOFLAGS=")
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list: %v", err)
		}
		dec := json.NewDecoder(bytes.NewReader(out))
		for dec.More() {
			var p struct {
				Dir                                            string
				GoFiles, SFiles, HFiles, SysoFiles, EmbedFiles []string
				Module                                         *struct{ Main bool }
			}
			if err := dec.Decode(&p); err != nil {
				t.Fatal(err)
			}
			if p.Module == nil || !p.Module.Main {
				continue
			}
			rel, err := filepath.Rel(root, p.Dir)
			if err != nil {
				t.Fatal(err)
			}
			rel = filepath.ToSlash(rel)
			dirs[rel] = true
			for _, files := range [][]string{p.GoFiles, p.SFiles, p.HFiles, p.SysoFiles, p.EmbedFiles} {
				for _, f := range files {
					need[path.Join(rel, f)] = true
				}
			}
		}
	}
	have := map[string]bool{}
	fs.WalkDir(Source, ".", func(name string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			have[name] = true
		}
		return err
	})
	for _, f := range slices.Sorted(maps.Keys(need)) {
		if !have[f] {
			t.Errorf("%s is built into nlx but not in Source: add its directory to the go:embed lines of source.go", f)
		}
	}
	for _, f := range slices.Sorted(maps.Keys(have)) {
		dir := path.Dir(f)
		if !dirs[dir] && !strings.HasPrefix(f, "state/migrations/") {
			t.Errorf("Source holds %s, of no package nlx is built from: drop it from source.go", f)
		}
		data, err := os.ReadFile(filepath.FromSlash(f))
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		if embedded, _ := fs.ReadFile(Source, f); !bytes.Equal(data, embedded) {
			t.Errorf("%s differs from the embedded copy", f)
		}
	}
}
