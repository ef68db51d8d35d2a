package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

// isolateBench runs isolate's launch benchmark (launch to exit of
// /bin/true through spec, cgroup, identity record, launch, wait and stop
// receipt) against the same raw bwrap and raw runc runs, several times,
// and prints median ratios; then the peak RSS of nlx exec.
func isolateBench(ctx context.Context, work, nlx string) error {
	if os.Geteuid() != 0 {
		fmt.Println("\nisolation: not measured: cgroups and runc need root")
		return nil
	}
	out, err := exec.CommandContext(ctx, "go", "test", "-run", "^$", "-bench", "BenchmarkLaunch|BenchmarkBwrapFilter", "-benchtime", "100x", "-count", "5", "./isolate").CombinedOutput()
	if err != nil {
		return fmt.Errorf("isolate benchmark: %v\n%s", err, out)
	}
	// Each result line: name, iterations, ns/op, then value-unit pairs:
	// nlx-ms, raw-ms, x-raw (see BenchmarkLaunch).
	runs := map[string]map[string][]float64{}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 4 || !strings.HasPrefix(f[0], "BenchmarkLaunch/") && !strings.HasPrefix(f[0], "BenchmarkBwrapFilter") {
			continue
		}
		name := strings.TrimPrefix(f[0], "BenchmarkLaunch/")
		if strings.HasPrefix(f[0], "BenchmarkBwrapFilter") {
			name = "filter-"
		}
		if i := strings.LastIndex(name, "-"); i > 0 {
			name = name[:i]
		}
		if runs[name] == nil {
			runs[name] = map[string][]float64{}
		}
		for i := 2; i+1 < len(f); i += 2 {
			var v float64
			fmt.Sscan(f[i], &v)
			runs[name][f[i+1]] = append(runs[name][f[i+1]], v)
		}
	}
	median := func(xs []float64) float64 {
		if len(xs) == 0 {
			return 0
		}
		s := append([]float64(nil), xs...)
		sort.Float64s(s)
		return s[len(s)/2]
	}
	fmt.Printf("\nisolated launch of /bin/true, identity and receipt in a SQLite state on disk, interleaved with the raw backend (medians of 5 runs of 100 pairs):\n")
	for _, pair := range []struct {
		name   string
		target float64
	}{{"bwrap", 1.5}, {"runc", 1.2}} {
		m := runs[pair.name]
		r := median(m["x-raw"])
		if r == 0 {
			fmt.Printf("  %s: not measured (is it installed?)\n", pair.name)
			continue
		}
		fmt.Printf("  %-6s %.1f ms, raw %.1f ms: ratio %.2f (target <= %.1f) %s\n", pair.name, median(m["nlx-ms"]), median(m["raw-ms"]), r, pair.target, verdict(r <= pair.target, "isolated launch, "+pair.name))
		if mem := runs[pair.name+"-memory"]; len(mem["x-raw"]) > 0 {
			fmt.Printf("         (with an in-memory recorder instead: %.1f ms against raw %.1f ms, ratio %.2f)\n", median(mem["nlx-ms"]), median(mem["raw-ms"]), median(mem["x-raw"]))
		}
	}
	if m := runs["filter"]; len(m["bare-ms"]) > 0 {
		fmt.Printf("  (the raw bwrap runs nlx's command line, seccomp filter and bind handles included; without them: %.1f ms against %.1f ms, %+.0f%%)\n",
			median(m["bare-ms"]), median(m["filtered-ms"]), 100*median(m["x-extra"]))
	}

	// nlx exec of /bin/true in a one-workspace config: its peak RSS.
	dir := filepath.Join(work, "exec")
	cfg := filepath.Join(dir, "cfg")
	if err := os.MkdirAll(cfg, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(cfg, "host.cue"), []byte(execConfig), 0o644); err != nil {
		return err
	}
	for _, d := range []string{"credentials/w/codex", "workspaces"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return err
		}
	}
	// The provider's user (a number: no passwd entry needed) owns its
	// credential home and reaches it, as bubblewrap running as it must.
	if err := os.Chown(filepath.Join(dir, "credentials/w/codex"), 61234, 61234); err != nil {
		return err
	}
	if err := searchable(dir); err != nil {
		return err
	}
	env := append(os.Environ(), "NLX_STATE="+filepath.Join(dir, "state.db"), "NLX_WORKSPACE_ROOT="+filepath.Join(dir, "workspaces"),
		"NLX_CREDENTIAL_ROOT="+filepath.Join(dir, "credentials"), "NLX_ACTOR=bench", "NLX_PROVIDER_USER=61234:61234")
	apply := exec.CommandContext(ctx, nlx, "apply", cfg, "--yes")
	apply.Env = env
	if msg, err := apply.CombinedOutput(); err != nil {
		return fmt.Errorf("apply the exec config: %v\n%s", err, msg)
	}
	var rss series
	for i := 0; i < 5; i++ {
		cmd := exec.CommandContext(ctx, nlx, "exec", "--workspace", "w", "--connection", "c", "--", "/bin/true")
		cmd.Env = env
		s, err := measure(cmd)
		if err != nil {
			return err
		}
		rss = append(rss, s)
	}
	m := rss.median()
	fmt.Printf("  nlx exec -- /bin/true: %.0f ms wall, peak RSS %.1f MiB (medians of 5)\n", m.wall.Seconds()*1000, float64(m.rss)/1024)
	return nil
}

const execConfig = `package bench

host: operators: ["bench"]
providers: codex: {kind: "codex-app-server", status: "enabled", version: ">= 0.1", command: ["codex"]}
workspaces: w: {
	team:      "t"
	kind:      "team"
	policy:    "workspace_write"
	chatReset: "never"
	members: bench: "admin"
	limits: {memory: "256Mi", cpu: 1, pids: 64}
	network: egress: "none"
}
connections: c: {owner: "bench", scope: "team", workspace: "w", provider: "codex", billing: "api", credentialHome: "w/codex", generation: 1}
`
