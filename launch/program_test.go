package launch

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nlx-dev/nlx/internal/reason"
)

func TestFindProgram(t *testing.T) {
	root := t.TempDir()
	write := func(rel, data string, mode os.FileMode) string {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// An npm prefix: the launcher's package beside its platform package,
	// and .bin linking to the launcher.
	js := write("prefix/node_modules/@openai/codex/bin/codex.js", "#!/usr/bin/env node\n", 0o755)
	write("prefix/node_modules/@openai/codex/package.json", "{}", 0o644)
	write("prefix/node_modules/@openai/codex-linux-x64/vendor/codex", "", 0o755)
	bin := filepath.Join(root, "prefix/node_modules/.bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../@openai/codex/bin/codex.js", filepath.Join(bin, "codex")); err != nil {
		t.Fatal(err)
	}
	// A package with a manifest but no node_modules, and a bare program.
	tool := write("opt/tool/bin/tool", "#!/bin/sh\n", 0o755)
	write("opt/tool/package.json", "{}", 0o644)
	bare := write("bare/run", "#!/bin/sh\n", 0o755)
	write("bare/data.txt", "", 0o644)
	plain := write("bare/plain", "", 0o644)

	tests := []struct {
		name, cmd, path string
		file, dir       string
		code            reason.Code
	}{
		{"npm, through PATH and .bin", "codex", "relative:" + bin, js, filepath.Join(root, "prefix/node_modules"), ""},
		{"npm, absolute", js, "", js, filepath.Join(root, "prefix/node_modules"), ""},
		{"a package manifest", tool, "", tool, filepath.Join(root, "opt/tool"), ""},
		{"a bare program", bare, "", bare, filepath.Join(root, "bare"), ""},
		{"not on PATH", "codex", "/nonexistent", "", "", reason.ProviderNotFound},
		{"a relative path", "bin/codex", bin, "", "", reason.ProviderNotFound},
		{"a relative PATH entry is skipped", "codex", "node_modules/.bin", "", "", reason.ProviderNotFound},
		{"not executable", plain, "", "", "", reason.ProviderNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := tt.path
			if v, ok := strings.CutPrefix(path, "relative:"); ok {
				path = "relative-entry:" + string(os.PathListSeparator) + v
			}
			p, err := FindProgram(tt.cmd, path)
			if tt.code != "" {
				if !reason.Is(err, tt.code) {
					t.Fatalf("FindProgram: %v, want %s", err, tt.code)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.Path != tt.file || p.Dir != tt.dir || p.Identity == "" {
				t.Errorf("got %+v, want file %s in %s", p, tt.file, tt.dir)
			}
		})
	}
	// The identity follows the program: a changed file is a new one.
	before, _ := FindProgram(js, "")
	if err := os.WriteFile(js, []byte("#!/usr/bin/env node\n// v2\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	after, _ := FindProgram(js, "")
	if before.Identity == after.Identity {
		t.Errorf("identity %s unchanged after the program changed", after.Identity)
	}
}

func TestSecret(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "key")
	if err := os.WriteFile(file, []byte("sk-from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	env := []string{"A=1", "KEY=sk-from-env", "EMPTY="}
	tests := []struct {
		ref, want string
		ok        bool
	}{
		{"env:KEY", "sk-from-env", true},
		{"env:MISSING", "", false},
		{"env:EMPTY", "", false},
		{"file:" + file, "sk-from-file", true},
		{"file:" + empty, "", false},
		{"file:" + filepath.Join(dir, "nope"), "", false},
		{"keychain:nlx", "", false},
	}
	for _, tt := range tests {
		got, err := Secret(tt.ref, env)
		if tt.ok != (err == nil) || got != tt.want {
			t.Errorf("Secret(%s) = %q, %v", tt.ref, got, err)
		}
		if err != nil && !reason.Is(err, reason.SecretUnavailable) {
			t.Errorf("Secret(%s): %v, want secret_unavailable", tt.ref, err)
		}
	}
}
