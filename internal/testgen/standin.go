package testgen

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// BuildStandin builds the Codex app-server stand-in (internal/codexstandin)
// into dir, static (CGO_ENABLED=0) as its users run it in sandboxes, and
// returns its path. It runs the go command, from within nlx's module.
func BuildStandin(ctx context.Context, dir string) (string, error) {
	return build(ctx, dir, "codexstandin")
}

// build builds the command internal/NAME into dir, static, and returns
// its path.
func build(ctx context.Context, dir, name string) (string, error) {
	bin := filepath.Join(dir, name)
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/nlx-dev/nlx/internal/"+name)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %v\n%s", name, err, out)
	}
	return bin, nil
}

// StandinHost is the host of nlx serve's scale test and benchmark: one
// team workspace w (Actor its admin and an operator, egress full so that
// the stand-in reaches the fake model on 127.0.0.1), one connection c on
// the stand-in provider (Command: its argv, the fake model's arguments
// included; the secret from $SecretEnv), and Jobs one-time jobs job-NNNN
// due at At, each in its own conversation; with Shared, two more
// (shared-a, shared-b) in one conversation, shared.
type StandinHost struct {
	Command   []string
	Actor     string
	SecretEnv string
	Jobs      int
	Shared    bool
	At        time.Time
}

// Config is the host as one CUE file.
func (h StandinHost) Config() string {
	quoted := make([]string, len(h.Command))
	for i, c := range h.Command {
		quoted[i] = fmt.Sprintf("%q", c)
	}
	var b strings.Builder
	fmt.Fprintf(&b, `package scale

host: operators: [%[1]q]
providers: standin: {kind: "codex-app-server", status: "enabled", version: ">= 0.169.0", command: [%[2]s]}
workspaces: w: {
	team:      "t"
	kind:      "team"
	policy:    "workspace_write"
	chatReset: "manual"
	members: %[1]s: "admin"
	limits: {memory: "256Mi", cpu: 1, pids: 64}
	network: egress: "full"
}
connections: c: {owner: %[1]q, scope: "team", workspace: "w", provider: "standin", billing: "api", credentialHome: "w/c", secret: "env:%[3]s", generation: 1}
_at: %[4]q
jobs: {
`, h.Actor, strings.Join(quoted, ", "), h.SecretEnv, h.At.UTC().Format(time.RFC3339))
	if h.Shared {
		b.WriteString("\t\"shared-a\": {workspace: \"w\", connection: \"c\", conversation: \"shared\", schedule: at: _at, prompt: \"shared a\"}\n")
		b.WriteString("\t\"shared-b\": {workspace: \"w\", connection: \"c\", conversation: \"shared\", schedule: at: _at, prompt: \"shared b\"}\n")
	}
	for i := range h.Jobs {
		fmt.Fprintf(&b, "\t\"job-%04d\": {workspace: \"w\", connection: \"c\", schedule: at: _at, prompt: \"job %d\"}\n", i, i)
	}
	b.WriteString("}\n")
	return b.String()
}
