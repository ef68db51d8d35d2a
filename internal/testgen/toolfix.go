package testgen

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// BuildToolfix builds internal/toolfix, the tests' and the benchmark's MCP
// tool server, into dir, static, and returns its path.
func BuildToolfix(ctx context.Context, dir string) (string, error) {
	bin := filepath.Join(dir, "toolfix")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/nlx-dev/nlx/internal/toolfix")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build toolfix: %v\n%s", err, out)
	}
	return bin, nil
}
