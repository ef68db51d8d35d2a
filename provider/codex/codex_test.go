package codex

import (
	"encoding/json"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/nlx-dev/nlx/internal/testtool"
	"github.com/nlx-dev/nlx/provider"
)

func TestAdapterBasics(t *testing.T) {
	a := &Adapter{}
	if a.Kind() != provider.KindCodex || a.SecretEnv() != "OPENAI_API_KEY" || !slices.Equal(a.VersionArgs(), []string{"--version"}) {
		t.Errorf("kind %s secret %s version args %v", a.Kind(), a.SecretEnv(), a.VersionArgs())
	}
	args, env := a.Args(provider.Turn{Policy: provider.WorkspaceWrite})
	if !slices.Equal(args, []string{"-c", "shell_environment_policy.ignore_default_excludes=false"}) || len(env) != 0 {
		t.Errorf("args %q env %v", args, env)
	}
}

func TestParseVersion(t *testing.T) {
	tests := []struct {
		out, want string
		ok        bool
	}{
		{"codex-cli 0.169.0\n", "0.169.0", true},
		{"codex-cli 0.169.0", "0.169.0", true},
		{"WARNING: proceeding, even though we could not create PATH aliases\ncodex-cli 0.170.1-alpha.2\n", "0.170.1-alpha.2", true},
		{"codex 1.2.3\n", "1.2.3", true},
		{"codex-cli v0.169.0\r\n", "0.169.0", true},
		{"", "", false},
		{"codex-cli\n", "", false},
		{"claude 2.1.328 (Claude Code)\n", "", false},
		{"codex-cli 0.169\n", "", false},
	}
	for _, tt := range tests {
		got, err := (&Adapter{}).ParseVersion(tt.out)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("ParseVersion(%q) = %q, %v; want %q (ok %v)", tt.out, got, err, tt.want, tt.ok)
		}
	}
}

// TestParseVersionOfThePinned reads the pinned program's own output.
func TestParseVersionOfThePinned(t *testing.T) {
	bin := testtool.NeedProvider(t, "codex")
	out, err := exec.Command(bin, (&Adapter{}).VersionArgs()...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s --version: %v\n%s", bin, err, out)
	}
	v, err := (&Adapter{}).ParseVersion(string(out))
	if err != nil || v != "0.169.0" {
		t.Errorf("ParseVersion(%q) = %q, %v; want the pinned 0.169.0", out, v, err)
	}
}

func TestFakeModelArgs(t *testing.T) {
	args := FakeModelArgs("http://127.0.0.1:4242/")
	if len(args)%2 != 0 {
		t.Fatalf("odd args %q", args)
	}
	kv := map[string]string{}
	for i := 0; i < len(args); i += 2 {
		k, v, ok := strings.Cut(args[i+1], "=")
		if args[i] != "-c" || !ok {
			t.Fatalf("not -c key=value: %q %q", args[i], args[i+1])
		}
		kv[k] = v
	}
	want := map[string]string{
		"model":                                    `"gpt-fake"`,
		"model_provider":                           `"fake"`,
		"model_providers.fake.name":                `"fake"`,
		"model_providers.fake.base_url":            `"http://127.0.0.1:4242/v1"`,
		"model_providers.fake.wire_api":            `"responses"`,
		"model_providers.fake.env_key":             `"OPENAI_API_KEY"`,
		"model_providers.fake.supports_websockets": "false",
		"model_providers.fake.stream_max_retries":  "0",
		"model_providers.fake.request_max_retries": "0",
	}
	for k, v := range want {
		if kv[k] != v {
			t.Errorf("%s = %q, want %q", k, kv[k], v)
		}
	}
	if len(kv) != len(want) {
		t.Errorf("args %q, want exactly %v", args, want)
	}
}

// TestFakeModelArgsAccepted: the pinned Codex knows every key, even under
// --strict-config (which refuses unknown ones).
func TestFakeModelArgsAccepted(t *testing.T) {
	bin := testtool.NeedProvider(t, "codex")
	extra, _ := (&Adapter{}).Args(provider.Turn{})
	args := append(append([]string{"app-server", "--strict-config", "--print-startup-config"}, FakeModelArgs("http://127.0.0.1:9")...), extra...)
	cmd := exec.Command(bin, args...)
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "CODEX_HOME="+home, "OPENAI_API_KEY="+testSecret)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("codex %q: %v\n%s", args, err, out)
	}
	var cfg struct {
		Version string `json:"appServerVersion"`
	}
	if err := json.Unmarshal(out, &cfg); err != nil || cfg.Version != "0.169.0" {
		t.Errorf("startup config %s: %v", out, err)
	}
	// And an unknown key is refused: the check above means something.
	bad := exec.Command(bin, "app-server", "--strict-config", "--print-startup-config", "-c", "model_providers.fake.no_such_key=1")
	bad.Env = cmd.Env
	if out, err := bad.CombinedOutput(); err == nil {
		t.Errorf("an unknown key was accepted: %s", out)
	}
}

// TestValidateTranscriptCatches: the transcript check reports what breaks
// the schema.
func TestValidateTranscriptCatches(t *testing.T) {
	s := loadSchema(t)
	tests := []struct {
		name    string
		entries []entry
		bad     int // the line reported, 0 for none
	}{
		{"good approval answer", []entry{
			{Dir: fromCodex, Msg: json.RawMessage(`{"method":"item/fileChange/requestApproval","id":0,"params":{"threadId":"t","turnId":"u","itemId":"i","startedAtMs":1}}`)},
			{Dir: fromNLX, Msg: json.RawMessage(`{"id":0,"result":{"decision":"decline"}}`)},
		}, 0},
		{"bad approval answer", []entry{
			{Dir: fromCodex, Msg: json.RawMessage(`{"method":"item/fileChange/requestApproval","id":0,"params":{"threadId":"t","turnId":"u","itemId":"i","startedAtMs":1}}`)},
			{Dir: fromNLX, Msg: json.RawMessage(`{"id":0,"result":{"decision":"acceptWithExecpolicyAmendment"}}`)},
		}, 2},
		{"answer to nothing", []entry{{Dir: fromNLX, Msg: json.RawMessage(`{"id":5,"result":{}}`)}}, 1},
		{"bad client request", []entry{{Dir: fromNLX, Msg: json.RawMessage(`{"method":"turn/interrupt","id":1,"params":{"threadId":"t"}}`)}}, 1},
		{"bad server result", []entry{
			{Dir: fromNLX, Msg: json.RawMessage(`{"method":"thread/start","id":2,"params":{}}`)},
			{Dir: fromCodex, Msg: json.RawMessage(`{"id":2,"result":{"thread":{}}}`)},
		}, 2},
		{"bad notification", []entry{{Dir: fromCodex, Msg: json.RawMessage(`{"method":"item/agentMessage/delta","params":{"delta":"x"}}`)}}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bad := s.validateTranscript(tt.entries)
			switch {
			case tt.bad == 0 && len(bad) != 0:
				t.Errorf("reported %v", bad)
			case tt.bad != 0 && (len(bad) != 1 || bad[0].line != tt.bad):
				t.Errorf("reported %v, want line %d", bad, tt.bad)
			}
		})
	}
}
