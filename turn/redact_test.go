package turn

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nlx-dev/nlx/provider"
)

func TestRedactor(t *testing.T) {
	home := t.TempDir()
	if err := os.WriteFile(filepath.Join(home, "auth.json"), []byte(`{"OPENAI_API_KEY":null,"tokens":{"access_token":"eyJhbGciOiJSUzI1NiJ9.payload","refresh_token":"rt_abcdefghijklmnop","account_id":"acct-1"},"auth_mode":"chatgpt"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, ".credentials.json"), []byte(`{"claudeAiOauth":{"accessToken":"sk-ant-oat01-AAAAAAAAAAAAAAAAAAAA","expiresAt":1760000000000,"scopes":["user:inference"]}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	r := NewRedactor("conn-secret-42", home)
	tests := []struct{ in, want string }{
		{"the key is conn-secret-42.", "the key is [redacted]."},
		{"Bearer eyJhbGciOiJSUzI1NiJ9.payload and rt_abcdefghijklmnop", "Bearer [redacted] and [redacted]"},
		{"oauth sk-ant-oat01-AAAAAAAAAAAAAAAAAAAA", "oauth [redacted]"},
		{"someone's sk-proj-0123456789abcdefXYZ leaked", "someone's [redacted] leaked"},
		// Short values and non-secret fields stay: words are not blanked.
		{"auth_mode chatgpt, account acct-1, user:inference, sk-short", "auth_mode chatgpt, account acct-1, user:inference, sk-short"},
	}
	for _, tt := range tests {
		if got := r.String(tt.in); got != tt.want {
			t.Errorf("String(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
	e := r.Event(provider.Event{Type: provider.EventPermission, Permission: &provider.Permission{Kind: provider.PermissionCommand,
		Command: "curl -H 'x-api-key: conn-secret-42' x", Decision: &provider.Decision{Reason: "no conn-secret-42"}}})
	if strings.Contains(e.Permission.Command+e.Permission.Decision.Reason, "conn-secret-42") {
		t.Errorf("permission not redacted: %+v %+v", e.Permission, e.Permission.Decision)
	}
	res := r.Result(provider.Result{Text: "conn-secret-42", Error: &provider.Error{Message: "bad key conn-secret-42"}})
	if res.Text != Redacted || strings.Contains(res.Error.Message, "conn-secret-42") {
		t.Errorf("result not redacted: %+v", res)
	}
}
