package launch

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/nlx-dev/nlx/host"
	"github.com/nlx-dev/nlx/reconcile"
	"github.com/nlx-dev/nlx/schema"
)

// TestHomes: doctor's list of credential homes to attend to: missing and
// empty ones with the command that signs their provider in, unsafe ones
// with why; signed-in homes, and connections that cannot launch, are not
// listed.
func TestHomes(t *testing.T) {
	root := filepath.Join(t.TempDir(), "credentials")
	for _, d := range []string{"bob/codex", "alice/claude", "dave/claude"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "dave", "claude", ".credentials.json"), []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(root, "bob"), filepath.Join(root, "eve")); err != nil {
		t.Fatal(err)
	}
	var rs []reconcile.Resource
	add := func(kind schema.Kind, name string, spec any, status reconcile.ResourceStatus) {
		b, err := json.Marshal(spec)
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, reconcile.Resource{Kind: kind, Name: name, Spec: b, Status: status})
	}
	conn := func(name, provider, home string, status reconcile.ResourceStatus) {
		add(schema.KindConnection, name, schema.Connection{Provider: provider, CredentialHome: home}, status)
	}
	add(schema.KindProvider, "codex", schema.Provider{Kind: "codex-app-server", Status: "enabled"}, reconcile.StatusActive)
	add(schema.KindProvider, "claude", schema.Provider{Kind: "claude-code", Status: "enabled"}, reconcile.StatusActive)
	add(schema.KindProvider, "opencode", schema.Provider{Kind: "opencode", Status: "disabled"}, reconcile.StatusActive)
	add(schema.KindProvider, "acp", schema.Provider{Kind: "acp", Status: "enabled", Feature: "acp"}, reconcile.StatusActive)
	conn("bob-codex", "codex", "bob/codex", reconcile.StatusActive)          // empty
	conn("alice-claude", "claude", "alice/claude", reconcile.StatusActive)   // empty
	conn("carol-codex", "codex", "carol/codex", reconcile.StatusActive)      // missing
	conn("dave-claude", "claude", "dave/claude", reconcile.StatusActive)     // signed in
	conn("eve-codex", "codex", "eve/codex", reconcile.StatusActive)          // through a symlink
	conn("held-codex", "codex", "held/codex", reconcile.StatusHeld)          // held: cannot launch
	conn("bob-opencode", "opencode", "bob/opencode", reconcile.StatusActive) // disabled provider
	conn("bob-acp", "acp", "bob/acp", reconcile.StatusActive)                // behind a feature flag
	conn("nobody", "gone", "nobody/x", reconcile.StatusActive)               // provider not applied

	bob := filepath.Join(root, "bob", "codex")
	alice := filepath.Join(root, "alice", "claude")
	carol := filepath.Join(root, "carol", "codex")
	want := map[string]Home{
		"bob-codex": {Connection: "bob-codex", Provider: "codex", Kind: "codex-app-server", Dir: bob, State: host.HomeEmpty,
			SignIn: "CODEX_HOME=" + bob + " codex login && chown -R 61234:61234 " + bob},
		"alice-claude": {Connection: "alice-claude", Provider: "claude", Kind: "claude-code", Dir: alice, State: host.HomeEmpty,
			SignIn: "CLAUDE_CONFIG_DIR=" + alice + " claude && chown -R 61234:61234 " + alice, SignInThen: "type /login, then /exit"},
		"carol-codex": {Connection: "carol-codex", Provider: "codex", Kind: "codex-app-server", Dir: carol, State: host.HomeMissing,
			Create: "mkdir -p -m 0711 " + filepath.Dir(carol) + " && mkdir -m 0700 " + carol + " && chown 61234:61234 " + carol,
			SignIn: "CODEX_HOME=" + carol + " codex login && chown -R 61234:61234 " + carol},
		"eve-codex": {Connection: "eve-codex", Provider: "codex", Kind: "codex-app-server", Dir: filepath.Join(root, "eve", "codex"), State: host.HomeUnsafe},
	}
	got := Homes(rs, root, "61234:61234")
	if len(got) != len(want) {
		t.Errorf("Homes listed %d, want %d: %+v", len(got), len(want), got)
	}
	for _, h := range got {
		w, ok := want[h.Connection]
		if !ok {
			t.Errorf("%s listed: %+v", h.Connection, h)
			continue
		}
		if h.State == host.HomeUnsafe && h.Detail == "" {
			t.Errorf("%s: unsafe without a detail", h.Connection)
		}
		h.Detail = ""
		if h != w {
			t.Errorf("%s:\n got %+v\nwant %+v", h.Connection, h, w)
		}
	}
	// Not as root: nothing to hand to another user.
	for _, h := range Homes(rs, root, "") {
		if h.Connection == "bob-codex" && h.SignIn != "CODEX_HOME="+bob+" codex login" {
			t.Errorf("not root: sign in %q", h.SignIn)
		}
	}
}
