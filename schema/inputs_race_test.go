//go:build linux

package schema

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nlx-dev/nlx/internal/testtool"
)

// TestSkillFileSwapRace: while a skill package is read, another process
// keeps exchanging one of its files for a symbolic link to another file of
// the config directory (renameat2 RENAME_EXCHANGE). os.Root keeps the read
// inside the directory, but follows a link that stays in it: a file listed
// as regular and then read by name gave the package the other file's
// content under a digest apply would trust. The file read must be the file
// listed: every digest is the package's own, or the read is refused.
func TestSkillFileSwapRace(t *testing.T) {
	cfg := t.TempDir()
	pkg := filepath.Join(cfg, "skills", "x")
	if err := os.MkdirAll(pkg, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string]string{
		"skills/x/SKILL.md": "---\nname: x\ndescription: X.\n---\n",
		"skills/x/notes.md": "notes",
		"private.txt":       "PRIVATE",
	} {
		if err := os.WriteFile(filepath.Join(cfg, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Resolved from skills/x once swapped in: config/private.txt. Where it
	// waits, outside the package, nothing lists it.
	if err := os.Symlink("../../private.txt", filepath.Join(cfg, "spare")); err != nil {
		t.Fatal(err)
	}
	root, err := os.OpenRoot(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	want, err := TreeDigest(root, "skills/x")
	if err != nil {
		t.Fatal(err)
	}

	defer testtool.Exchange(t, filepath.Join(pkg, "notes.md"), filepath.Join(cfg, "spare"))()

	same, refused := 0, 0
	deadline := time.Now().Add(2 * time.Second)
	for attempt := 0; attempt < 20000 && time.Now().Before(deadline); attempt++ {
		got, err := TreeDigest(root, "skills/x")
		switch {
		case err != nil:
			refused++
		case got != want:
			t.Fatalf("attempt %d: digest %s, want %s or a refusal: the package was read through the swapped link", attempt, got, want)
		default:
			same++
		}
	}
	t.Logf("%d reads refused, %d read the package itself", refused, same)
}
