package schema

import (
	"bytes"
	"flag"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"cuelang.org/go/cue/format"
	"cuelang.org/go/cue/parser"
	"github.com/rogpeppe/go-internal/txtar"
)

var update = flag.Bool("update", false, "rewrite the .cue files (and .cue sections of .txtar archives) that cue fmt would change")

// moduleRoot is the repository root, seen from this package's directory.
const moduleRoot = ".."

// cueFmtExcluded are CUE sources that are malformed on purpose, with why.
// They are named as PATH (from the module root) or ARCHIVE:SECTION.
var cueFmtExcluded = map[string]string{
	"cmd/nlx/testdata/script/invalid.txtar:syntax/x.cue": "a syntax error on purpose: the script checks its position",
}

// cueFmt formats src exactly as `cue fmt` of the pinned cuelang.org/go does
// (cmd/cue/cmd/fmt.go, formatFile): parsed with comments, no language
// version (this repository has no cue.mod), formatted without options
// (--simplify is off by default).
func cueFmt(name string, src []byte) ([]byte, error) {
	f, err := parser.ParseFile(name, src, parser.ParseComments)
	if err != nil {
		return nil, err
	}
	return format.Node(f)
}

// TestCUEFormatted holds every CUE file shipped in the repository (the
// examples, testdata, the embedded schema, and the .cue sections of the
// script archives) to `cue fmt`. make check runs it; -update rewrites what
// differs.
func TestCUEFormatted(t *testing.T) {
	if _, err := os.Stat(filepath.Join(moduleRoot, "go.mod")); err != nil {
		t.Fatalf("not at the module root: %v", err)
	}
	var (
		differ  []string
		checked int
		used    = map[string]bool{}
	)
	check := func(name string, src []byte) ([]byte, bool) {
		if _, ok := cueFmtExcluded[name]; ok {
			used[name] = true
			return nil, false
		}
		checked++
		out, err := cueFmt(name, src)
		if err != nil {
			t.Errorf("%s: %v (cue fmt cannot format it; exclude it in cueFmtExcluded with a reason if that is on purpose)", name, err)
			return nil, false
		}
		if bytes.Equal(out, src) {
			return nil, false
		}
		differ = append(differ, name)
		return out, true
	}
	err := filepath.WalkDir(moduleRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(moduleRoot, path)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			// As cue fmt --files walks: no cue.mod, no hidden or _ directories.
			if n := d.Name(); rel != "." && (n == "cue.mod" || strings.HasPrefix(n, ".") || strings.HasPrefix(n, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		switch {
		case strings.HasSuffix(rel, ".cue"):
			src, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			if out, ok := check(rel, src); ok && *update {
				return os.WriteFile(path, out, 0o644)
			}
		case strings.HasSuffix(rel, ".txtar"):
			a, err := txtar.ParseFile(path)
			if err != nil {
				return err
			}
			changed := false
			for i, f := range a.Files {
				if !strings.HasSuffix(f.Name, ".cue") {
					continue
				}
				if out, ok := check(rel+":"+f.Name, f.Data); ok {
					a.Files[i].Data, changed = out, true
				}
			}
			if changed && *update {
				return os.WriteFile(path, txtar.Format(a), 0o644)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for name := range cueFmtExcluded {
		if !used[name] {
			t.Errorf("cueFmtExcluded names %s, which is gone: drop it", name)
		}
	}
	if checked < 10 {
		t.Errorf("checked only %d CUE sources: is the walk rooted at the module?", checked)
	}
	if len(differ) > 0 && !*update {
		sort.Strings(differ)
		t.Errorf("not formatted as cue fmt formats them (go test ./schema -run TestCUEFormatted -update rewrites them):\n\t%s", strings.Join(differ, "\n\t"))
	}
}

// TestCUEFmtMatchesCueFmt pins what cueFmt does to what cue fmt does on
// the cases that differ between configurations of the formatter.
func TestCUEFmtMatchesCueFmt(t *testing.T) {
	tests := []struct{ in, want string }{
		// Alignment restarts after a field whose value is a struct.
		{"package p\n\na: {\n\tb:    1\n\tc: {d: 1}\n\te:    2\n}\n", "package p\n\na: {\n\tb: 1\n\tc: {d: 1}\n\te: 2\n}\n"},
		// Not simplified: quoted labels stay quoted (cue fmt -s unquotes).
		{"package p\n\n\"a\": 1\n", "package p\n\n\"a\": 1\n"},
		// Comments kept.
		{"package p\n\n// c\na:   1 // d\n", "package p\n\n// c\na: 1 // d\n"},
	}
	for _, tt := range tests {
		got, err := cueFmt("x.cue", []byte(tt.in))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != tt.want {
			t.Errorf("cueFmt(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
