package host

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/nlx-dev/nlx/internal/reason"
	"github.com/nlx-dev/nlx/plan"
	"github.com/nlx-dev/nlx/schema"
)

func connChange(t *testing.T, action plan.Action, before, after string) *plan.Change {
	t.Helper()
	c := &plan.Change{Address: "connection.bob-codex", Kind: schema.KindConnection, Name: "bob-codex", Action: action}
	spec := func(home string) json.RawMessage {
		b, err := json.Marshal(schema.Connection{Owner: "bob", Scope: "personal", Workspace: "bob", Provider: "codex", CredentialHome: home})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	if before != "" {
		c.Before = spec(before)
	}
	if action != plan.Delete {
		c.After = spec(after)
	}
	return c
}

// TestCredentialHomeEffect: which connection changes make a home.
func TestCredentialHomeEffect(t *testing.T) {
	h := &Effects{}
	for _, tt := range []struct {
		name   string
		change *plan.Change
		want   bool
	}{
		{"create", connChange(t, plan.Create, "", "bob/codex"), true},
		{"replace", connChange(t, plan.Replace, "bob/codex", "bob/codex"), true},
		{"update moving the home", connChange(t, plan.Update, "bob/codex", "bob/codex2"), true},
		{"update keeping the home", connChange(t, plan.Update, "bob/codex", "bob/codex"), false},
		{"delete", connChange(t, plan.Delete, "bob/codex", ""), false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := h.Has(tt.change); got != tt.want {
				t.Errorf("Has = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestCredentialHomes: apply makes a connection's home under the
// credential root as a launch accepts it (the root and the directories
// above the home root's, 0711; the home the provider user's, 0700),
// whatever the umask; keeps one already there as it is; and makes nothing
// for a home that would leave the root or pass through a symlink.
func TestCredentialHomes(t *testing.T) {
	old := syscall.Umask(0o077) // modes must not depend on it
	defer syscall.Umask(old)
	ctx := context.Background()
	base := t.TempDir()
	root := filepath.Join(base, "credentials")
	outside := filepath.Join(base, "outside")
	if err := os.Mkdir(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	owner := &Owner{UID: 61234, GID: 61235, Name: "61234:61235"}
	h := &Effects{WorkspaceRoot: filepath.Join(base, "workspaces"), CredentialRoot: root,
		Owner: func(context.Context) (*Owner, error) { return owner, nil }}
	defer h.Close()
	asRoot := os.Geteuid() == 0

	type want struct {
		path string
		mode os.FileMode
		uid  uint32 // when nlx is root
	}
	for _, tt := range []struct {
		name  string
		setup func(t *testing.T)
		home  string
		code  reason.Code // "" when made
		say   string      // in the refusal
		want  []want
	}{
		{name: "new home", home: "bob/codex", want: []want{
			{root, 0o711, 0}, {filepath.Join(root, "bob"), 0o711, 0}, {filepath.Join(root, "bob", "codex"), 0o700, 61234}}},
		{name: "one level", home: "team", want: []want{{filepath.Join(root, "team"), 0o700, 61234}}},
		{name: "kept as it is", home: "alice/claude",
			setup: func(t *testing.T) {
				dir := filepath.Join(root, "alice", "claude")
				must(t, os.MkdirAll(dir, 0o755))
				must(t, os.Chmod(dir, 0o750))
				must(t, os.WriteFile(filepath.Join(dir, "token"), []byte("signed in"), 0o600))
			},
			want: []want{{filepath.Join(root, "alice", "claude"), 0o750, 0}}},
		{name: "escapes with ..", home: "../outside", code: reason.CredentialHomeUnsafe},
		{name: "climbs and comes back", home: "bob/../bob/codex", code: reason.CredentialHomeUnsafe},
		{name: "absolute", home: outside, code: reason.CredentialHomeUnsafe},
		{name: "the root itself", home: ".", code: reason.CredentialHomeUnsafe},
		{name: "empty", home: "", code: reason.CredentialHomeUnsafe},
		{name: "dot component", home: "bob/./codex", code: reason.CredentialHomeUnsafe},
		{name: "through a symlink", home: "mallory/codex", code: reason.CredentialHomeUnsafe, say: "is a symbolic link",
			setup: func(t *testing.T) { must(t, os.Symlink(outside, filepath.Join(root, "mallory"))) }},
		{name: "a symlink", home: "eve", code: reason.CredentialHomeUnsafe,
			setup: func(t *testing.T) { must(t, os.Symlink(filepath.Join(root, "bob"), filepath.Join(root, "eve"))) }},
		{name: "under a directory others may write", home: "open/codex", code: reason.CredentialHomeUnsafe, say: "writable by group or others",
			setup: func(t *testing.T) {
				must(t, os.Mkdir(filepath.Join(root, "open"), 0o777))
				must(t, os.Chmod(filepath.Join(root, "open"), 0o777))
			}},
		{name: "under another user's directory", home: "theirs/codex", code: reason.CredentialHomeUnsafe, say: "belongs to uid 61234",
			setup: func(t *testing.T) {
				if !asRoot {
					t.Skip("chown needs root")
				}
				must(t, os.Mkdir(filepath.Join(root, "theirs"), 0o755))
				must(t, os.Lchown(filepath.Join(root, "theirs"), 61234, 61234))
			}},
		{name: "a file", home: "file", code: reason.CredentialHomeUnsafe, say: "is not a directory",
			setup: func(t *testing.T) { must(t, os.WriteFile(filepath.Join(root, "file"), nil, 0o600)) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if tt.setup != nil {
				must(t, os.MkdirAll(root, 0o711))
				tt.setup(t)
			}
			err := h.Do(ctx, connChange(t, plan.Create, "", tt.home))
			if tt.code != "" {
				if got := reason.CodeOf(err); got != tt.code {
					t.Fatalf("Do = %v (%s), want %s", err, got, tt.code)
				}
				if !strings.Contains(err.Error(), tt.say) {
					t.Errorf("Do = %v, want it to say %q", err, tt.say)
				}
				if entries, _ := os.ReadDir(outside); len(entries) != 0 {
					t.Errorf("a refused home made %v outside the root", entries)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range tt.want {
				var st syscall.Stat_t
				if err := syscall.Lstat(w.path, &st); err != nil {
					t.Fatal(err)
				}
				if got := os.FileMode(st.Mode & 0o7777); got != w.mode || st.Mode&syscall.S_IFMT != syscall.S_IFDIR {
					t.Errorf("%s: mode %o, want a directory %o", w.path, st.Mode, w.mode)
				}
				if asRoot && st.Uid != w.uid {
					t.Errorf("%s: owned by %d, want %d", w.path, st.Uid, w.uid)
				}
			}
		})
	}
	// The home kept kept its files, and made again it is kept again.
	if err := h.Do(ctx, connChange(t, plan.Create, "", "alice/claude")); err != nil {
		t.Fatal(err)
	}
	if data, err := os.ReadFile(filepath.Join(root, "alice", "claude", "token")); err != nil || string(data) != "signed in" {
		t.Errorf("an existing home's files were touched: %q %v", data, err)
	}
	h.Close()
	log, err := os.ReadFile(filepath.Join(base, "workspaces", ".nlx-effects.log"))
	if err != nil || !strings.Contains(string(log), " create connection.bob-codex "+filepath.Join(root, "bob", "codex")+"\n") {
		t.Errorf("effects log: %q %v", log, err)
	}
}

// TestInspectCredentialHome: what doctor reports of a home, read only.
func TestInspectCredentialHome(t *testing.T) {
	base := t.TempDir()
	root := filepath.Join(base, "credentials")
	must(t, os.MkdirAll(filepath.Join(root, "bob", "codex"), 0o700))
	must(t, os.MkdirAll(filepath.Join(root, "alice", "claude"), 0o700))
	must(t, os.WriteFile(filepath.Join(root, "alice", "claude", "auth.json"), []byte("{}"), 0o600))
	must(t, os.Symlink(filepath.Join(root, "alice"), filepath.Join(root, "mallory")))
	for _, tt := range []struct {
		root, home string
		want       HomeState
	}{
		{root, "bob/codex", HomeEmpty},
		{root, "alice/claude", HomeSignedIn},
		{root, "carol/codex", HomeMissing},
		{filepath.Join(base, "nowhere"), "bob/codex", HomeMissing},
		{root, "mallory/claude", HomeUnsafe},
		{root, "../credentials/bob/codex", HomeUnsafe},
	} {
		t.Run(tt.home, func(t *testing.T) {
			dir, got, err := InspectCredentialHome(tt.root, tt.home)
			if got != tt.want {
				t.Errorf("InspectCredentialHome(%s) = %s, %v; want %s", tt.home, got, err, tt.want)
			}
			if got == HomeUnsafe && reason.CodeOf(err) != reason.CredentialHomeUnsafe {
				t.Errorf("unsafe without credential_home_unsafe: %v", err)
			}
			if got != HomeUnsafe && dir != filepath.Join(tt.root, tt.home) {
				t.Errorf("dir %s", dir)
			}
		})
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
