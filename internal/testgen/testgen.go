// Package testgen writes large, valid nlx configurations for benchmarks and
// scale tests: a fleet of workspaces, each with one connection and a few jobs.
package testgen

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
)

// Fleet describes a generated configuration.
type Fleet struct {
	Workspaces     int // number of team workspaces
	JobsPerSpace   int // jobs per workspace
	PerFile        int // workspaces per .cue file
	Package        string
	ScheduleMinute int // shifts every cron schedule; change it to force updates
	// PromptTag and ConversationTag end every job's prompt and conversation
	// key: changing the first updates every job without risk, the second
	// with a destructive one (a chat reset).
	PromptTag, ConversationTag string
	Operators                  []string // host operators
}

// Resources is the number of resources the fleet holds (providers included).
func (f Fleet) Resources() int {
	return 2 + f.Workspaces*(2+f.JobsPerSpace)
}

// Write writes the fleet into dir as several .cue files of one package.
func (f Fleet) Write(dir string) error {
	if f.PerFile <= 0 {
		f.PerFile = 100
	}
	if f.Package == "" {
		f.Package = "fleet"
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	head := fmt.Sprintf(`package %s

host: operators: %s

providers: codex: {
	kind:    "codex-app-server"
	status:  "enabled"
	version: ">= 0.161"
	command: ["codex", "app-server"]
}
providers: claude: {
	kind:    "claude-code"
	status:  "enabled"
	version: ">= 2.0"
	command: ["claude", "--output-format", "stream-json"]
}
`, f.Package, quoteList(f.Operators))
	if err := os.WriteFile(filepath.Join(dir, "providers.cue"), []byte(head), 0o644); err != nil {
		return fmt.Errorf("write providers: %w", err)
	}
	for start := 0; start < f.Workspaces; start += f.PerFile {
		end := min(start+f.PerFile, f.Workspaces)
		if err := f.writeFile(filepath.Join(dir, fmt.Sprintf("ws-%05d.cue", start)), start, end); err != nil {
			return err
		}
	}
	return nil
}

func (f Fleet) writeFile(path string, start, end int) (err error) {
	file, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	defer func() {
		if cerr := file.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("close %s: %w", path, cerr)
		}
	}()
	w := bufio.NewWriter(file)
	fmt.Fprintf(w, "package %s\n", f.Package)
	for i := start; i < end; i++ {
		ws := fmt.Sprintf("ws-%05d", i)
		provider, billing := "codex", "subscription"
		if i%2 == 1 {
			provider, billing = "claude", "api"
		}
		fmt.Fprintf(w, `
workspaces: %q: {
	team:      "team-%03d"
	kind:      "team"
	policy:    "workspace_write"
	chatReset: "manual"
	members: {"admin-%d": "admin", "dev-%d": "member"}
	limits: {memory: "2Gi", cpu: 1.5, pids: 512}
	network: egress: "none"
}
connections: "%s-conn": {
	owner:          "admin-%d"
	scope:          "team"
	workspace:      %q
	provider:       %q
	billing:        %q
	credentialHome: "team-%03d/%s"
	secret:         "env:TOKEN_%d"
	generation:     1
}
`, ws, i%1000, i, i, ws, i, ws, provider, billing, i%1000, ws, i)
		for j := 0; j < f.JobsPerSpace; j++ {
			fmt.Fprintf(w, `jobs: "%s-job-%d": {
	workspace:    %q
	connection:   "%s-conn"
	schedule: {cron: "%d %d * * *", timezone: "Europe/Berlin"}
	conversation: "%s/daily-%d%s"
	prompt:       "Summarise yesterday's activity in %s, part %d.%s"
}
`, ws, j, ws, ws, (f.ScheduleMinute+j*7)%60, (i+j)%24, ws, j, f.ConversationTag, ws, j, f.PromptTag)
		}
	}
	if err := w.Flush(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

func quoteList(l []string) string {
	out := "["
	for i, s := range l {
		if i > 0 {
			out += ", "
		}
		out += fmt.Sprintf("%q", s)
	}
	return out + "]"
}

// CopyTree copies the directory tree src to dst (created), regular files
// and directories only: tests start from a copy of an example and edit it.
func CopyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), data, 0o644)
	})
}
