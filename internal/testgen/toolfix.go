package testgen

import "context"

// BuildToolfix builds internal/toolfix, the tests' and the benchmark's MCP
// tool server, into dir, static, and returns its path.
func BuildToolfix(ctx context.Context, dir string) (string, error) {
	return build(ctx, dir, "toolfix")
}
