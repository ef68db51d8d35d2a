package schema

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// FuzzLoad feeds arbitrary bytes as one file of a valid config. Load must
// never panic, and whatever the fast path accepts, CUE must accept with the
// same result (the fast path's soundness rule, fast.go).
func FuzzLoad(f *testing.F) {
	base, err := os.ReadFile("testdata/base/jobs.cue")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(base)
	f.Add([]byte("package base\n"))
	f.Add([]byte("package base\njobs: x: {workspace: \"core\", connection: \"core-codex\", schedule: every: \"5m\", prompt: \"p\", enabled: *false | true}\n"))
	f.Add([]byte("package base\njobs: x: schedule: {cron: \"* * * * *\"}\n"))
	f.Add([]byte("package base\nimport \"strings\"\njobs: y: prompt: strings.ToUpper(\"x\")\n"))
	f.Add([]byte("package base\ntools: x: {command: [\"mcp-x\"], env: A: \"1\", secrets: B: \"env:B\", egress: \"full\", scope: \"team\", owner: \"core\"}\n"))
	f.Add([]byte("package base\ntools: x: {url: \"unix:///s.sock\", endpoint: \"/mcp\", scope: \"personal\", owner: \"ana\"}\n"))
	f.Add([]byte("package base\ntools: x: {url: \"http://127.0.0.1:9/mcp\", endpoint: \"/mcp\", egress: \"full\", scope: \"team\", owner: \"core\"}\n"))
	f.Add([]byte("package base\ntools: x: {command: [\"a\"], url: \"http://localhost\", secrets: B: \"sk-1\", scope: \"team\", owner: \"core\"}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := copyTree(t, "testdata/base")
		if err := os.WriteFile(filepath.Join(dir, "jobs.cue"), data, 0o644); err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		fast, err := Load(ctx, dir)
		if err != nil || !fast.FastPath {
			return
		}
		full, err := LoadWith(ctx, dir, Options{ForceCUE: true})
		if err != nil {
			t.Fatalf("the fast path accepted what CUE refuses:\n%s\n%v", data, err)
		}
		fast.FastPath = false
		if !reflect.DeepEqual(fast, full) {
			t.Fatalf("the fast path decoded differently from CUE:\n%s", data)
		}
	})
}
