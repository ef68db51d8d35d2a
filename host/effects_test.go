package host

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nlx-dev/nlx/internal/reason"
	"github.com/nlx-dev/nlx/plan"
	"github.com/nlx-dev/nlx/schema"
)

func TestWorkspaceDirectories(t *testing.T) {
	root := filepath.Join(t.TempDir(), "workspaces")
	h := &Effects{WorkspaceRoot: root, Now: func() time.Time { return time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC) }}
	defer h.Close()
	ctx := context.Background()
	create := &plan.Change{Address: "workspace.platform", Kind: schema.KindWorkspace, Name: "platform", Action: plan.Create}
	for _, c := range []*plan.Change{
		{Kind: schema.KindWorkspace, Name: "platform", Action: plan.Update},
		{Kind: schema.KindWorkspace, Name: "platform", Action: plan.Delete},
		{Kind: schema.KindWorkspace, Name: "platform", Action: plan.Replace},
		{Kind: schema.KindJob, Name: "platform", Action: plan.Create},
	} {
		if h.Has(c) {
			t.Errorf("%s %s has an effect; only creating a workspace has", c.Action, c.Kind)
		}
	}
	if !h.Has(create) {
		t.Fatal("creating a workspace has no effect")
	}
	if err := h.Do(ctx, create); err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(filepath.Join(root, "platform"))
	if err != nil || !info.IsDir() || info.Mode().Perm() != 0o750 {
		t.Fatalf("workspace directory: %v %v", info, err)
	}
	// A directory already there (with files) is kept as it is.
	if err := os.WriteFile(filepath.Join(root, "platform", "notes.md"), []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := h.Do(ctx, create); err != nil {
		t.Fatal(err)
	}
	if data, err := os.ReadFile(filepath.Join(root, "platform", "notes.md")); err != nil || string(data) != "keep" {
		t.Fatalf("the workspace's files were touched: %q %v", data, err)
	}
	h.Close()
	log, err := os.ReadFile(filepath.Join(root, ".nlx-effects.log"))
	if err != nil {
		t.Fatal(err)
	}
	want := "2026-11-30T08:00:00Z create workspace.platform " + filepath.Join(root, "platform") + "\n"
	if string(log) != want+want {
		t.Errorf("effects log:\n%s\nwant twice:\n%s", log, want)
	}
	bad := &plan.Change{Address: "workspace.x", Kind: schema.KindWorkspace, Name: "../escape", Action: plan.Create}
	if err := h.Do(ctx, bad); err == nil || !strings.Contains(err.Error(), "cannot name a directory") {
		t.Errorf("a name leaving the root: got %v", err)
	}
}

// TestSkillInstall: a skill change installs its package from the config
// into the skill store under its digest, readable by everyone; a package
// whose files are not those the spec's digest names is refused and leaves
// nothing; so is one holding a symbolic link.
func TestSkillInstall(t *testing.T) {
	ctx := context.Background()
	cfg := t.TempDir()
	pkg := filepath.Join(cfg, "skills", "notes")
	if err := os.MkdirAll(filepath.Join(pkg, "ref"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{"SKILL.md": "---\nname: notes\ndescription: d\n---\n", "ref/a.md": "a"} {
		if err := os.WriteFile(filepath.Join(pkg, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	root, err := os.OpenRoot(cfg)
	if err != nil {
		t.Fatal(err)
	}
	digest, err := schema.TreeDigest(root, "skills/notes")
	root.Close()
	if err != nil {
		t.Fatal(err)
	}
	change := func(digest string) *plan.Change {
		after, _ := json.Marshal(schema.Skill{Path: "skills/notes", Digest: digest})
		return &plan.Change{Address: "skill.notes", Kind: schema.KindSkill, Name: "notes", Action: plan.Create, After: after}
	}
	store := filepath.Join(t.TempDir(), "skills")
	h := &Effects{WorkspaceRoot: filepath.Join(t.TempDir(), "ws"), SkillRoot: store, ConfigDir: cfg}
	defer h.Close()

	wrong := "sha256:" + strings.Repeat("0", 64)
	if err := h.Do(ctx, change(wrong)); err == nil || !strings.Contains(err.Error(), "the config changed under the apply") {
		t.Errorf("install with a digest that is not the package's: %v", err)
	}
	if entries, _ := os.ReadDir(filepath.Join(store, "notes")); len(entries) != 0 {
		t.Errorf("a refused install left %v", entries)
	}

	if err := h.Do(ctx, change(digest)); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(store, "notes", strings.TrimPrefix(digest, "sha256:"))
	for name, mode := range map[string]os.FileMode{"SKILL.md": 0o644, "ref/a.md": 0o644, "ref": 0o755 | os.ModeDir} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || fi.Mode() != mode {
			t.Errorf("%s: %v %v, want mode %v", name, fi.Mode(), err, mode)
		}
	}
	// Installed again (a replay after a resolve, or another apply): kept.
	if err := h.Do(ctx, change(digest)); err != nil {
		t.Fatal(err)
	}

	if err := os.Symlink("/etc/shadow", filepath.Join(pkg, "ref", "shadow")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pkg, "SKILL.md"), []byte("changed"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := h.Do(ctx, change(wrong)); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("install of a package holding a symlink: %v", err)
	}
}

// TestWorkspaceOwner: a new workspace directory belongs to the provider's
// user (root keeps the root, searchable only).
func TestWorkspaceOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chown needs root")
	}
	root := filepath.Join(t.TempDir(), "workspaces")
	owner := &Owner{UID: 61234, GID: 61235, Name: "61234:61235"}
	h := &Effects{WorkspaceRoot: root, Owner: func(context.Context) (*Owner, error) { return owner, nil }}
	defer h.Close()
	c := &plan.Change{Address: "workspace.a", Kind: schema.KindWorkspace, Name: "a", Action: plan.Create}
	if err := h.Do(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(root, "a"), &st); err != nil || st.Uid != 61234 || st.Gid != 61235 {
		t.Errorf("workspace directory owned by %d:%d (%v), want 61234:61235", st.Uid, st.Gid, err)
	}
	if err := syscall.Stat(root, &st); err != nil || st.Uid != 0 || st.Mode&0o777 != 0o711 {
		t.Errorf("workspace root %o owned by %d (%v), want 0711 root's", st.Mode&0o777, st.Uid, err)
	}
}

// TestProviderUser: numbers need no passwd entry; a name must exist (the
// default one is created by nlx as root); root is refused.
func TestProviderUser(t *testing.T) {
	ctx := context.Background()
	t.Setenv("NLX_PROVIDER_USER", "61234:61234")
	if o, err := ProviderUser(ctx); err != nil || o.UID != 61234 || o.GID != 61234 {
		t.Errorf("ProviderUser(61234:61234) = %+v, %v", o, err)
	}
	t.Setenv("NLX_PROVIDER_USER", "0:0")
	if _, err := ProviderUser(ctx); err == nil || !strings.Contains(err.Error(), "provider_user_root") {
		t.Errorf("root as provider user: %v", err)
	}
	t.Setenv("NLX_PROVIDER_USER", "root")
	if _, err := ProviderUser(ctx); err == nil || !strings.Contains(err.Error(), "provider_user_root") {
		t.Errorf("root by name: %v", err)
	}
	t.Setenv("NLX_PROVIDER_USER", "nlx-no-such-user-x")
	if _, err := ProviderUser(ctx); err == nil || !strings.Contains(err.Error(), string(reason.ProviderUserMissing)) {
		t.Errorf("missing user: %v", err)
	}
}
