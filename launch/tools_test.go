package launch

import (
	"context"
	"testing"

	"github.com/nlx-dev/nlx/reconcile"
	"github.com/nlx-dev/nlx/schema"
)

// TestTools: what a launch's tool proxy may expose, from the applied
// state alone, whatever a state edited by hand or a grant left behind
// says: a team tool of the workspace's team, a personal tool only in its
// owner's personal workspace on the owner's connection, nothing that is
// not applied and active, nothing once the workspace or connection is
// gone.
func TestTools(t *testing.T) {
	tool := func(scope, owner string) schema.Tool {
		return schema.Tool{Command: []string{"toolfix"}, Egress: "none", Scope: scope, Owner: owner}
	}
	st := base()
	st["tool.files"] = res{tool("team", "platform"), reconcile.StatusActive}
	st["tool.other-team"] = res{tool("team", "elsewhere"), reconcile.StatusActive}
	st["tool.mine"] = res{tool("personal", "alice"), reconcile.StatusActive}
	st["tool.bobs"] = res{tool("personal", "bob"), reconcile.StatusActive}
	st["tool.held"] = res{tool("team", "platform"), reconcile.StatusHeld}
	team := st["workspace.platform"].spec.(schema.Workspace)
	team.Tools = []string{"files", "other-team", "mine", "held", "gone", "files"}
	st["workspace.platform"] = res{team, reconcile.StatusActive}
	alice := st["workspace.alice"].spec.(schema.Workspace)
	alice.Tools = []string{"files", "mine", "bobs"}
	st["workspace.alice"] = res{alice, reconcile.StatusActive}
	st["connection.alices"] = res{schema.Connection{Owner: "alice", Scope: "personal", Workspace: "alice", Provider: "codex",
		CredentialHome: "alice/codex"}, reconcile.StatusActive}
	st["connection.bobs-in-alice"] = res{schema.Connection{Owner: "bob", Scope: "personal", Workspace: "alice", Provider: "codex",
		CredentialHome: "bob/codex"}, reconcile.StatusActive}
	names := func(ws, conn string) ([]string, string) {
		t.Helper()
		tools, grant, err := Tools(context.Background(), st, ws, conn)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, tl := range tools {
			if tl.Hash == "" {
				t.Errorf("tool %s without its spec hash", tl.Name)
			}
			out = append(out, tl.Name)
		}
		return out, grant
	}
	tests := []struct {
		name, ws, conn string
		want           []string
	}{
		{"a team workspace: its team's tools, never a personal one", "platform", "team", []string{"files"}},
		{"a personal workspace on its owner's connection", "alice", "alices", []string{"files", "mine"}},
		{"another owner's connection in it gets no personal tool", "alice", "bobs-in-alice", []string{"files"}},
		{"a connection of another workspace", "alice", "team", nil},
		{"a workspace not applied", "nosuch", "team", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, grant := names(tt.ws, tt.conn)
			if len(got) != len(tt.want) {
				t.Fatalf("tools %v, want %v", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Fatalf("tools %v, want %v", got, tt.want)
				}
			}
			if grant == "" {
				t.Error("no grant digest")
			}
		})
	}
	// The grant digest changes exactly when the grant does.
	_, before := names("platform", "team")
	_, again := names("platform", "team")
	st["tool.files"] = res{schema.Tool{Command: []string{"toolfix", "--name", "changed"}, Egress: "none", Scope: "team", Owner: "platform"}, reconcile.StatusActive}
	_, changed := names("platform", "team")
	if before != again || before == changed {
		t.Errorf("grant digests %s, %s, %s: want the same twice, then another", before, again, changed)
	}
}
