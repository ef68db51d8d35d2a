// Command bench measures nlx against its peers in one run and prints ratios:
// `make bench` runs it. Wall times and peak RSS come from whole processes,
// each the median of several rounds, peers and nlx interleaved so that a
// busy machine slows both alike.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/nlx-dev/nlx/internal/testgen"
)

func main() {
	rounds := flag.Int("rounds", 7, "rounds per measurement (the median is reported)")
	workspaces := flag.Int("workspaces", 2000, "workspaces in the generated fleet (each with 1 connection and 5 jobs)")
	keep := flag.Bool("keep", false, "keep the work directory")
	only := flag.String("only", "", "run only this part: reconcile, images, isolate, turn, egress, serve, tools, preserve or gitops")
	flag.Parse()
	if err := run(context.Background(), *rounds, *workspaces, *keep, *only); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
	if len(missed) > 0 {
		fmt.Printf("\nMISSED %d target(s): %s\n", len(missed), strings.Join(missed, "; "))
		os.Exit(2)
	}
}

// sample is one process run.
type sample struct {
	wall time.Duration
	rss  int64 // KiB
}

type series []sample

func (s series) median() sample {
	walls := make([]time.Duration, len(s))
	rss := make([]int64, len(s))
	for i, x := range s {
		walls[i], rss[i] = x.wall, x.rss
	}
	sort.Slice(walls, func(i, j int) bool { return walls[i] < walls[j] })
	sort.Slice(rss, func(i, j int) bool { return rss[i] < rss[j] })
	return sample{walls[len(s)/2], rss[len(s)/2]}
}

func run(ctx context.Context, rounds, workspaces int, keep bool, only string) error {
	work, err := os.MkdirTemp("", "nlx-bench-")
	if err != nil {
		return err
	}
	if keep {
		fmt.Fprintln(os.Stderr, "work directory:", work)
	} else {
		defer os.RemoveAll(work)
	}
	nlx := filepath.Join(work, "nlx")
	build := exec.CommandContext(ctx, "go", "build", "-o", nlx, "./cmd/nlx")
	build.Env = append(os.Environ(), "CGO_ENABLED=0") // static, as make build makes it
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("build nlx: %v\n%s", err, out)
	}
	switch only {
	case "images":
		cue, err := installCUE(ctx)
		if err != nil {
			return err
		}
		if err := warmPlanBench(ctx, work, nlx, cue, rounds); err != nil {
			return err
		}
		return imageBench(ctx, work, nlx)
	case "isolate":
		return isolateBench(ctx, work, nlx)
	case "turn":
		return turnBench(ctx, work, nlx)
	case "egress":
		return egressBench(ctx, work, nlx)
	case "serve":
		return serveBench(ctx, work, nlx)
	case "tools":
		return toolsBench(ctx, work, nlx)
	case "preserve":
		return preserveBench(ctx, work, nlx, rounds)
	case "gitops":
		return gitopsBench(ctx, work, nlx, rounds, workspaces)
	}
	if err := goBenchmarks(ctx); err != nil {
		return err
	}
	cue, err := installCUE(ctx)
	if err != nil {
		return err
	}
	fleet := testgen.Fleet{Workspaces: workspaces, JobsPerSpace: 5}
	cfg := filepath.Join(work, "fleet")
	if err := fleet.Write(cfg); err != nil {
		return err
	}
	fmt.Printf("fleet: %d resources (%d workspaces, %d connections, %d jobs, 2 providers) in %s\n",
		fleet.Resources(), workspaces, workspaces, workspaces*5, cfg)
	fmt.Printf("peer: %s\n\n", cue)

	var cueExport, plan0, apply, plan1 series
	for r := 0; r < rounds; r++ {
		st := filepath.Join(work, fmt.Sprintf("round%d", r), "state.db")
		planFile := filepath.Join(work, fmt.Sprintf("round%d", r), "plan.json")
		// A plan reads the state without creating it, or its directory.
		if err := os.MkdirAll(filepath.Dir(planFile), 0o755); err != nil {
			return err
		}
		steps := []struct {
			into *series
			cmd  *exec.Cmd
		}{
			{&cueExport, exec.CommandContext(ctx, cue, "export", ".")},
			{&plan0, exec.CommandContext(ctx, nlx, "--state", st, "plan", ".", "--out", planFile)},
			{&apply, exec.CommandContext(ctx, nlx, "--state", st, "apply", planFile)},
			{&plan1, exec.CommandContext(ctx, nlx, "--state", st, "plan", ".", "--detailed-exitcode")},
		}
		for _, s := range steps {
			s.cmd.Dir = cfg
			x, err := measure(s.cmd)
			if err != nil {
				return err
			}
			*s.into = append(*s.into, x)
		}
		fmt.Fprintf(os.Stderr, "round %d/%d done\n", r+1, rounds)
	}
	gatedRatio, gatedDetail, err := gatedApply(ctx, work, nlx, 3*rounds) // 80 ms runs: more rounds against noise
	if err != nil {
		return err
	}
	c, p0, a, p1 := cueExport.median(), plan0.median(), apply.median(), plan1.median()
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "measurement\tnlx\tcue export\tratio\ttarget\t")
	row := func(name string, got, peer float64, unit string, target float64) {
		ratio := got / peer
		fmt.Fprintf(tw, "%s\t%.3g %s\t%.3g %s\t%.2f\t<= %.1f %s\t\n", name, got, unit, peer, unit, ratio, target, verdict(ratio <= target, name))
	}
	row("plan, empty state: wall", p0.wall.Seconds(), c.wall.Seconds(), "s", 1.2)
	row("plan, empty state: peak RSS", float64(p0.rss)/1024, float64(c.rss)/1024, "MiB", 1.2)
	// Apply re-derives the plan (loads the config, plans again against the
	// state under the lock) before it writes: about a plan plus an apply.
	row("apply of that plan, re-derived: wall", a.wall.Seconds(), c.wall.Seconds(), "s", 1.9)
	row("plan, no changes: wall", p1.wall.Seconds(), c.wall.Seconds(), "s", 1.2)
	tw.Flush()
	fmt.Printf("\napply of 1,000 approved risky changes vs 1,000 without risk (medians of %d): %s, ratio %.2f (target <= 1.2) %s\n",
		3*rounds, gatedDetail, gatedRatio, verdict(gatedRatio <= 1.2, "gated apply"))
	fmt.Printf("\nmedians of %d rounds; apply peak RSS %.0f MiB; no-change plan peak RSS %.0f MiB\n", rounds, float64(a.rss)/1024, float64(p1.rss)/1024)
	if err := warmPlanBench(ctx, work, nlx, cue, rounds); err != nil {
		return err
	}
	if only == "reconcile" {
		return nil
	}
	if err := gitopsBench(ctx, work, nlx, rounds, workspaces); err != nil {
		return err
	}
	if err := isolateBench(ctx, work, nlx); err != nil {
		return err
	}
	if err := turnBench(ctx, work, nlx); err != nil {
		return err
	}
	if err := egressBench(ctx, work, nlx); err != nil {
		return err
	}
	if err := preserveBench(ctx, work, nlx, rounds); err != nil {
		return err
	}
	if err := serveBench(ctx, work, nlx); err != nil {
		return err
	}
	if err := toolsBench(ctx, work, nlx); err != nil {
		return err
	}
	return imageBench(ctx, work, nlx)
}

// gatedApply measures an apply of 1,000 job updates that each carry a risk
// (a chat reset) and were approved, against the same apply of 1,000 updates
// without risk, from copies of one applied state.
func gatedApply(ctx context.Context, work, nlx string, rounds int) (float64, string, error) {
	base := testgen.Fleet{Workspaces: 200, JobsPerSpace: 5, Operators: []string{"ops"}}
	dir := filepath.Join(work, "gated")
	cfg := filepath.Join(dir, "cfg")
	if err := base.Write(cfg); err != nil {
		return 0, "", err
	}
	// ops approves as the OS user running the bench.
	if err := writeIdentities(cfg, "fleet", "ops"); err != nil {
		return 0, "", err
	}
	seed := filepath.Join(dir, "seed.db")
	run := func(args ...string) error {
		cmd := exec.CommandContext(ctx, nlx, args...)
		cmd.Env = append(os.Environ(), "NLX_ACTOR=ci", "NLX_WORKSPACE_ROOT="+filepath.Join(dir, "ws"))
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("nlx %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	if err := run("--state", seed, "apply", cfg, "--yes"); err != nil {
		return 0, "", err
	}
	seedData, err := os.ReadFile(seed)
	if err != nil {
		return 0, "", err
	}
	// Two plans from the same state: prompts changed (no risk) and
	// conversation keys changed (destructive, approved).
	plans := map[string]string{}
	for name, f := range map[string]testgen.Fleet{
		"plain": {Workspaces: 200, JobsPerSpace: 5, Operators: []string{"ops"}, PromptTag: " v2"},
		"gated": {Workspaces: 200, JobsPerSpace: 5, Operators: []string{"ops"}, ConversationTag: "-v2"},
	} {
		d := filepath.Join(dir, name)
		if err := f.Write(d); err != nil {
			return 0, "", err
		}
		if err := writeIdentities(d, "fleet", "ops"); err != nil {
			return 0, "", err
		}
		st := filepath.Join(dir, name+".db")
		if err := os.WriteFile(st, seedData, 0o600); err != nil {
			return 0, "", err
		}
		p := filepath.Join(dir, name+".json")
		if err := run("--state", st, "plan", d, "--out", p); err != nil {
			return 0, "", err
		}
		if name == "gated" {
			if err := run("--state", st, "approve", p, "--actor", "ops", "--reason", "benchmark"); err != nil {
				return 0, "", err
			}
		}
		plans[name] = st
	}
	var plain, gated series
	for r := 0; r < rounds; r++ {
		for _, name := range []string{"plain", "gated"} {
			st := filepath.Join(dir, fmt.Sprintf("%s-%d.db", name, r))
			data, err := os.ReadFile(plans[name])
			if err != nil {
				return 0, "", err
			}
			if err := os.WriteFile(st, data, 0o600); err != nil {
				return 0, "", err
			}
			cmd := exec.CommandContext(ctx, nlx, "--state", st, "apply", filepath.Join(dir, name+".json"), "--config", filepath.Join(dir, name))
			cmd.Env = append(os.Environ(), "NLX_ACTOR=ci")
			x, err := measure(cmd)
			if err != nil {
				return 0, "", err
			}
			if name == "plain" {
				plain = append(plain, x)
			} else {
				gated = append(gated, x)
			}
		}
	}
	p, g := plain.median(), gated.median()
	return g.wall.Seconds() / p.wall.Seconds(), fmt.Sprintf("%.3g s vs %.3g s", g.wall.Seconds(), p.wall.Seconds()), nil
}

// peers pairs each Go benchmark with the peer it is measured against.
var peers = []struct{ bench, peer, what string }{
	{"BenchmarkLoad/fast", "BenchmarkLoad/cue", "config load: fast path vs full CUE unification"},
	{"BenchmarkChild/budgeted", "BenchmarkChild/in-process", "small config load: in the budgeted child vs in process"},
	{"BenchmarkEncode/canonical", "BenchmarkEncode/encoding-json", "plan encoding: canonical encoder vs encoding/json"},
	{"BenchmarkLeaves/scan", "BenchmarkLeaves/decode", "field diff leaves: JSON scan vs decoding"},
	{"BenchmarkRead/read", "BenchmarkRead/encoding-json", "plan reading: verified read vs plain json.Unmarshal"},
	{"BenchmarkCallProxied", "BenchmarkCallDirect", "tool call in process: through the proxy vs direct"},
}

// benchRuns are the go test -bench runs: each package's benchmarks with
// the iterations that suit them (a tool call takes ~0.2 ms: many more).
var benchRuns = [][]string{
	{"-benchtime", "5x", "./schema", "./plan", "./reconcile"},
	{"-benchtime", "2000x", "./toolproxy"},
}

// goBenchmarks runs the benchmarks next to the code and prints each one's
// ratio to its peer.
func goBenchmarks(ctx context.Context) error {
	var out []byte
	for _, args := range benchRuns {
		cmd := exec.CommandContext(ctx, "go", append([]string{"test", "-run", "^$", "-bench", ".", "-benchmem"}, args...)...)
		o, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("go test -bench: %v\n%s", err, o)
		}
		out = append(out, o...)
	}
	ns := map[string]float64{}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") || f[3] != "ns/op" {
			continue
		}
		fmt.Println(line)
		name := f[0]
		if i := strings.LastIndex(name, "-"); i > 0 {
			name = name[:i] // drop the GOMAXPROCS suffix
		}
		var v float64
		fmt.Sscan(f[2], &v)
		ns[name] = v
	}
	fmt.Println()
	for _, p := range peers {
		if ns[p.bench] == 0 || ns[p.peer] == 0 {
			return fmt.Errorf("benchmark %s or %s did not run", p.bench, p.peer)
		}
		fmt.Printf("%-55s %.2fx the peer's time\n", p.what, ns[p.bench]/ns[p.peer])
	}
	fmt.Println()
	return nil
}

// measure runs cmd to completion and returns its wall time and peak RSS.
func measure(cmd *exec.Cmd) (sample, error) {
	var stderr bytes.Buffer
	cmd.Stdout = nil // discarded, as > /dev/null
	cmd.Stderr = &stderr
	start := time.Now()
	err := cmd.Run()
	wall := time.Since(start)
	if err != nil && cmd.ProcessState != nil && cmd.ProcessState.ExitCode() == 2 && strings.Contains(strings.Join(cmd.Args, " "), "--detailed-exitcode") {
		return sample{}, fmt.Errorf("%s: the plan after apply has changes", strings.Join(cmd.Args, " "))
	}
	if err != nil {
		return sample{}, fmt.Errorf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, stderr.String())
	}
	ru, _ := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	var rss int64
	if ru != nil {
		rss = ru.Maxrss
	}
	return sample{wall, rss}, nil
}

// installCUE installs the cue command at the version go.mod requires, once,
// into the module's own tool directory.
func installCUE(ctx context.Context) (string, error) {
	v, err := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Version}}", "cuelang.org/go").Output()
	if err != nil {
		return "", fmt.Errorf("find the cuelang.org/go version: %w", err)
	}
	version := strings.TrimSpace(string(v))
	dir, err := filepath.Abs(filepath.Join(".bench", "cue-"+version))
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "cue")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	fmt.Fprintf(os.Stderr, "installing cue %s into %s\n", version, dir)
	cmd := exec.CommandContext(ctx, "go", "install", "cuelang.org/go/cmd/cue@"+version)
	cmd.Env = append(os.Environ(), "GOBIN="+dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("install cue %s: %v\n%s", version, err, out)
	}
	return bin, nil
}

// searchable makes dir and every directory above it searchable by others
// (o+x): the sandbox's provider user reaches the state's roots, the
// workspaces and credential homes, through them.
// workDir makes dir and its subdirectories subs, and lets every user
// reach dir (searchable): a sandbox's user runs below it.
func workDir(dir string, subs ...string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, sub := range subs {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			return err
		}
	}
	return searchable(dir)
}

func searchable(dir string) error {
	for d := dir; d != "/"; d = filepath.Dir(d) {
		if fi, err := os.Stat(d); err == nil && fi.Mode().Perm()&0o001 == 0 {
			if err := os.Chmod(d, fi.Mode().Perm()|0o111); err != nil {
				return err
			}
		}
	}
	return nil
}
