package provision

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nlx-dev/nlx/plan"
	"github.com/nlx-dev/nlx/schema"
)

func TestWorkspaceDirectories(t *testing.T) {
	root := filepath.Join(t.TempDir(), "workspaces")
	h := &Host{WorkspaceRoot: root, Now: func() time.Time { return time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC) }}
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
