package isolate

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nlx-dev/nlx/internal/reason"
)

// TestPrograms: a program installed outside the system directories (an npm
// package tree) runs inside by its absolute path, read-only; a program
// directory inside the workspace or the credential root is refused.
func TestPrograms(t *testing.T) {
	f := newFixture(t)
	dir := filepath.Join(f.base, "programs", "node_modules")
	prog := filepath.Join(dir, "tool", "bin", "tool.sh")
	must(t, os.MkdirAll(filepath.Dir(prog), 0o755))
	must(t, os.WriteFile(prog, []byte("#!/bin/sh\necho tool-ran\ntouch \"$0.w\" 2>/dev/null && echo WROTE || echo read-only\n"), 0o755))
	for _, b := range backends {
		t.Run(string(b), func(t *testing.T) {
			needBackend(t, b)
			req := f.request(b, WorkspaceWrite, prog)
			req.Programs = []string{dir}
			r := run(t, req)
			if r.code != 0 || !strings.Contains(r.out, "tool-ran") || !strings.Contains(r.out, "read-only") {
				t.Fatalf("exit %d, stdout %q, stderr %q: want the program to run, read-only", r.code, r.out, r.errOut)
			}
		})
	}
	for _, tc := range []struct {
		name string
		dir  string
		code reason.Code
	}{
		{"inside the workspace", f.ws, reason.InvalidRequest},
		{"the credential root", f.credRoot, reason.CredentialHomeUnsafe},
		{"relative", "programs", reason.InvalidRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := f.request(Bwrap, WorkspaceWrite, prog)
			req.Programs = []string{tc.dir}
			_, err := Compile(req)
			if !reason.Is(err, tc.code) {
				t.Fatalf("Compile: %v, want %s", err, tc.code)
			}
		})
	}
}
