package atomicfile_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/nlx-dev/nlx/internal/atomicfile"
)

func TestWrite(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	for _, data := range []string{"first", "second, longer"} {
		if err := atomicfile.Write(path, []byte(data), 0o640); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != data {
			t.Fatalf("read back %q, %v; want %q", got, err, data)
		}
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o640 {
		t.Errorf("mode %v, want 0640", fi.Mode().Perm())
	}
	// Into a directory that is not there: an error, and nothing left over.
	if err := atomicfile.Write(filepath.Join(dir, "missing", "f"), []byte("x"), 0o644); err == nil {
		t.Error("wrote into a missing directory")
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("left %d entries in the directory, want the file alone", len(entries))
	}
}
