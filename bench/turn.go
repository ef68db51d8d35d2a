package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nlx-dev/nlx/internal/fakemodel"
	"github.com/nlx-dev/nlx/provider"
	"github.com/nlx-dev/nlx/provider/claude"
	"github.com/nlx-dev/nlx/provider/codex"
)

// turnRounds is how many turns of each kind are measured per provider.
const turnRounds = 21

// turnBench measures a one-message text turn through nlx turn (state,
// binding, sandbox, the real provider, records) against the same provider
// driven directly by a minimal client on the same fake model, interleaved,
// medians of turnRounds; and the peak RSS of nlx itself during a turn.
func turnBench(ctx context.Context, work, nlx string) error {
	if os.Geteuid() != 0 {
		fmt.Println("\nprovider turns: not measured: the sandbox's cgroups need root")
		return nil
	}
	bin, err := filepath.Abs(".providers/node_modules/.bin")
	if err != nil {
		return err
	}
	model, err := fakemodel.Start()
	if err != nil {
		return err
	}
	defer model.Close()
	dir := filepath.Join(work, "turns")
	cfg := filepath.Join(dir, "cfg")
	if err := workDir(dir, "cfg", "direct"); err != nil {
		return err
	}
	codexArgs, _ := json.Marshal(append([]string{"codex", "app-server"}, codex.FakeModelArgs(model.URL())...))
	config := strings.NewReplacer("CODEXCMD", string(codexArgs), "FAKEURL", model.URL()).Replace(turnConfig)
	if err := os.WriteFile(filepath.Join(cfg, "host.cue"), []byte(config), 0o644); err != nil {
		return err
	}
	if err := writeIdentities(cfg, "bench", "bench"); err != nil {
		return err
	}
	env := append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"), "NLX_STATE="+filepath.Join(dir, "state.db"),
		"NLX_WORKSPACE_ROOT="+filepath.Join(dir, "workspaces"), "NLX_CREDENTIAL_ROOT="+filepath.Join(dir, "credentials"),
		"NLX_ACTOR=bench", "NLX_PROVIDER_USER=61234:61234", "BENCH_KEY=sk-bench-0000000000000000")
	apply := exec.CommandContext(ctx, nlx, "apply", cfg, "--yes")
	apply.Env = env
	if msg, err := apply.CombinedOutput(); err != nil {
		return fmt.Errorf("apply the turn config: %v\n%s", err, msg)
	}
	fmt.Printf("\none-message text turn through nlx turn (bwrap sandbox, state, records) against the provider driven directly by a minimal client, same fake model, interleaved (medians of %d):\n", turnRounds)
	for _, p := range []struct {
		name, conn string
		direct     func(ctx context.Context, home string) error
	}{
		{"codex", "c-codex", func(ctx context.Context, home string) error {
			return directCodex(ctx, filepath.Join(bin, "codex"), home, model.URL())
		}},
		{"claude", "c-claude", func(ctx context.Context, home string) error {
			return directClaude(ctx, filepath.Join(bin, "claude"), home, model.URL())
		}},
	} {
		if _, err := os.Stat(filepath.Join(bin, p.name)); err != nil {
			fmt.Printf("  %s: not measured: not installed (make providers)\n", p.name)
			continue
		}
		var viaNlx, direct []float64
		var rss []int64
		home := filepath.Join(dir, "direct", p.name)
		if err := os.MkdirAll(home, 0o700); err != nil {
			return err
		}
		for i := 0; i < turnRounds+1; i++ {
			cmd := exec.CommandContext(ctx, nlx, "turn", "--workspace", "w", "--connection", p.conn, "--actor", "bench", "say ok")
			cmd.Env = env
			wall, peak, err := measurePeak(cmd)
			if err != nil {
				return fmt.Errorf("nlx turn (%s): %w", p.name, err)
			}
			start := time.Now()
			if err := p.direct(ctx, home); err != nil {
				return fmt.Errorf("direct %s turn: %w", p.name, err)
			}
			if i == 0 {
				continue // the first probes the version and warms the caches
			}
			direct = append(direct, time.Since(start).Seconds()*1000)
			viaNlx = append(viaNlx, wall.Seconds()*1000)
			rss = append(rss, peak)
		}
		n, d := medianOf(viaNlx), medianOf(direct)
		sort.Slice(rss, func(i, j int) bool { return rss[i] < rss[j] })
		peak := float64(rss[len(rss)-1]) / 1024
		fmt.Printf("  %-6s nlx turn %.0f ms, direct %.0f ms: ratio %.2f (target <= 1.15) %s\n", p.name, n, d, n/d, verdict(n/d <= 1.15, "turn overhead, "+p.name))
		fmt.Printf("         peak RSS of nlx itself during a turn: %.1f MiB (the largest of %d; target < 40) %s\n", peak, len(rss), verdict(peak < 40, "nlx RSS during a turn, "+p.name))
	}
	return nil
}

func medianOf(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s[len(s)/2]
}

// measurePeak runs cmd and returns its wall time and the peak RSS (KiB) of
// that process alone, sampled from /proc (its rusage would count the
// sandbox and the provider it waited for).
func measurePeak(cmd *exec.Cmd) (time.Duration, int64, error) {
	var stderr strings.Builder
	cmd.Stderr = &stderr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, 0, err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var peak int64
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			if err != nil {
				return 0, 0, fmt.Errorf("%v\n%s", err, stderr.String())
			}
			return time.Since(start), peak, nil
		case <-tick.C:
			if kb := vmHWM(cmd.Process.Pid); kb > peak {
				peak = kb
			}
		}
	}
}

// vmHWM is the peak resident set of pid, in KiB (0 once it is gone).
func vmHWM(pid int) int64 {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	return 0
}

// directCodex is the minimal client: codex app-server on the fake model,
// initialize, a thread, one turn, until the turn completes.
func directCodex(ctx context.Context, prog, home, url string) error {
	// Started exactly as nlx starts it: only nlx's machinery differs.
	extra, _ := (&codex.Adapter{}).Args(provider.Turn{Policy: provider.TrustedLocal})
	cmd := exec.CommandContext(ctx, prog, append(append([]string{"app-server"}, codex.FakeModelArgs(url)...), extra...)...)
	cmd.Env = append(os.Environ(), "CODEX_HOME="+home, "OPENAI_API_KEY=sk-bench-0000000000000000")
	cmd.Dir = home
	in, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	defer cmd.Wait()
	defer in.Close()
	send := func(s string) { io.WriteString(in, s+"\n") }
	send(`{"method":"initialize","id":1,"params":{"clientInfo":{"name":"bench","title":"bench","version":"0"}}}`)
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var m struct {
			ID     *int            `json:"id"`
			Method string          `json:"method"`
			Result json.RawMessage `json:"result"`
		}
		if json.Unmarshal(sc.Bytes(), &m) != nil {
			continue
		}
		switch {
		case m.ID != nil && *m.ID == 1 && m.Method == "":
			send(`{"method":"initialized"}`)
			send(`{"method":"thread/start","id":2,"params":{"cwd":` + strconv.Quote(home) + `,"approvalPolicy":"never","sandbox":"danger-full-access"}}`)
		case m.ID != nil && *m.ID == 2 && m.Method == "":
			var r struct {
				Thread struct {
					ID string `json:"id"`
				} `json:"thread"`
			}
			json.Unmarshal(m.Result, &r)
			send(`{"method":"turn/start","id":3,"params":{"threadId":` + strconv.Quote(r.Thread.ID) + `,"input":[{"type":"text","text":"say ok"}]}}`)
		case m.Method == "turn/completed":
			return nil
		}
	}
	return fmt.Errorf("codex ended before the turn completed: %v", sc.Err())
}

// directClaude is the minimal client: claude -p in stream-json on the
// fake model, with the arguments and variables nlx's adapter gives it, one
// user message, until the result.
func directClaude(ctx context.Context, prog, home, url string) error {
	// The program is started exactly as nlx starts it for the bench's
	// trusted_local workspace: only nlx's machinery differs.
	args, env := (&claude.Adapter{}).Args(provider.Turn{Policy: provider.TrustedLocal})
	cmd := exec.CommandContext(ctx, prog, args...)
	cmd.Env = append(os.Environ(), "HOME="+home, "CLAUDE_CONFIG_DIR="+home, "ANTHROPIC_API_KEY=sk-bench-0000000000000000", "ANTHROPIC_BASE_URL="+url)
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Dir = home
	in, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	defer cmd.Wait()
	defer in.Close()
	io.WriteString(in, `{"type":"user","message":{"role":"user","content":"say ok"},"parent_tool_use_id":null,"session_id":""}`+"\n")
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var m struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(sc.Bytes(), &m) == nil && m.Type == "result" {
			return nil
		}
	}
	return fmt.Errorf("claude ended before its result: %v", sc.Err())
}

const turnConfig = `package bench

host: operators: ["bench"]
providers: {
	codex: {kind: "codex-app-server", status: "enabled", version: ">= 0.169.0", command: CODEXCMD}
	claude: {kind: "claude-code", status: "enabled", version: ">= 2.1.0", command: ["claude"], env: ANTHROPIC_BASE_URL: "FAKEURL"}
}
workspaces: w: {
	team:      "t"
	kind:      "team"
	policy:    "trusted_local"
	chatReset: "never"
	members: bench: "admin"
	limits: {memory: "2Gi", cpu: 2, pids: 512}
	network: egress: "full"
}
connections: {
	"c-codex": {owner: "bench", scope: "team", workspace: "w", provider: "codex", billing: "api", credentialHome: "w/codex", secret: "env:BENCH_KEY", generation: 1}
	"c-claude": {owner: "bench", scope: "team", workspace: "w", provider: "claude", billing: "api", credentialHome: "w/claude", secret: "env:BENCH_KEY", generation: 1}
}
`
