package schema

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// InputFile is one file a config was made from.
type InputFile struct {
	Path   string `json:"path"` // slash-separated, relative to the config directory
	SHA256 string `json:"sha256"`
	Size   int64  `json:"size"`
}

// Inputs lists every file a config was made from: the package's .cue files
// and the files of every directory it refers to (skill packages). Dirs are
// those directories, so the same set can be listed again without evaluating
// the CUE (whose bytes are themselves inputs).
type Inputs struct {
	Files []InputFile `json:"files"`
	Dirs  []string    `json:"dirs,omitempty"`
	Hash  string      `json:"config_hash"`
}

func (in *Inputs) add(name string, data []byte) {
	sum := sha256.Sum256(data)
	in.Files = append(in.Files, InputFile{Path: name, SHA256: hex.EncodeToString(sum[:]), Size: int64(len(data))})
}

// finish sorts the inputs and computes Hash: SHA-256 over every file's name,
// size and content hash, in name order.
func (in *Inputs) finish() {
	sort.Slice(in.Files, func(i, j int) bool { return in.Files[i].Path < in.Files[j].Path })
	sort.Strings(in.Dirs)
	in.Dirs = compactStrings(in.Dirs)
	h := sha256.New()
	for _, f := range in.Files {
		h.Write([]byte(f.Path))
		h.Write([]byte{0})
		h.Write([]byte(strconv.FormatInt(f.Size, 10)))
		h.Write([]byte{0})
		h.Write([]byte(f.SHA256))
		h.Write([]byte{'\n'})
	}
	in.Hash = "sha256:" + hex.EncodeToString(h.Sum(nil))
}

func compactStrings(s []string) []string {
	out := s[:0]
	for i, x := range s {
		if i == 0 || x != s[i-1] {
			out = append(out, x)
		}
	}
	return out
}

// Rehash lists the inputs of the config in dir again, given the directories
// an earlier Load recorded, without evaluating any CUE. Apply uses it to
// prove that a config has not changed since it was planned.
func Rehash(dir string, dirs []string) (Inputs, error) {
	var in Inputs
	entries, err := os.ReadDir(dir)
	if err != nil {
		return in, fmt.Errorf("read config directory: %w", err)
	}
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".cue") || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return in, fmt.Errorf("read config file: %w", err)
		}
		in.add(name, data)
	}
	for _, d := range dirs {
		if _, err := walkTree(dir, d, &in); err != nil {
			return in, err
		}
	}
	in.Dirs = append(in.Dirs, dirs...)
	in.finish()
	return in, nil
}

// Changed lists the paths that differ between two input sets.
func Changed(a, b Inputs) []string {
	am := make(map[string]string, len(a.Files))
	for _, f := range a.Files {
		am[f.Path] = f.SHA256
	}
	var out []string
	for _, f := range b.Files {
		if sum, ok := am[f.Path]; !ok || sum != f.SHA256 {
			out = append(out, f.Path)
		}
		delete(am, f.Path)
	}
	for p := range am {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

// walkTree adds every regular file under rel (a slash path relative to root)
// to in and returns the tree's digest. Symbolic links and other non-regular
// files are refused: a package's content must be what is in the tree.
func walkTree(root, rel string, in *Inputs) (string, error) {
	if err := checkRelative(rel); err != nil {
		return "", err
	}
	base := filepath.Join(root, filepath.FromSlash(rel))
	if err := within(root, base); err != nil {
		return "", fmt.Errorf("read %s: %w", rel, err)
	}
	h := sha256.New()
	err := filepath.WalkDir(base, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		r, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		r = filepath.ToSlash(r)
		if !d.Type().IsRegular() {
			return fmt.Errorf("%s is not a regular file (symbolic links and devices are refused)", r)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		in.add(r, data)
		f := in.Files[len(in.Files)-1]
		fmt.Fprintf(h, "%s\x00%d\x00%s\n", strings.TrimPrefix(r, rel+"/"), f.Size, f.SHA256)
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("read %s: %w", rel, err)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

// checkRelative refuses absolute paths and paths that leave the config
// directory.
func checkRelative(rel string) error {
	if rel == "" || path.IsAbs(rel) || filepath.IsAbs(rel) {
		return fmt.Errorf("path %q must be relative to the config directory", rel)
	}
	clean := path.Clean(rel)
	if clean == ".." || strings.HasPrefix(clean, "../") {
		return fmt.Errorf("path %q leaves the config directory", rel)
	}
	return nil
}

// within refuses a path that, once symbolic links in its parents are
// resolved, is outside root.
func within(root, p string) error {
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		return err
	}
	realParent, err := filepath.EvalSymlinks(filepath.Dir(p))
	if err != nil {
		return err
	}
	r, err := filepath.Rel(realRoot, realParent)
	if err != nil || r == ".." || strings.HasPrefix(r, "../") {
		return fmt.Errorf("%s leaves the config directory through a symbolic link", p)
	}
	return nil
}
