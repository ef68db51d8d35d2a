package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/nlx-dev/nlx/internal/fakemodel"
	"github.com/nlx-dev/nlx/internal/testgen"
	"github.com/nlx-dev/nlx/provider/codex"
	"github.com/nlx-dev/nlx/state"
)

// serveRounds is how many occurrences of each kind the claim overhead is
// the median of.
const serveRounds = 21

// serveManyJobs is how many occurrences fall due at one instant in the
// dispatch measurement.
const serveManyJobs = 1000

// serveBench measures the scheduler: the overhead of one claimed
// occurrence (nlx run: claim, dispatch, turn, end) against the same turn
// launched without a claim (nlx turn), the real Codex, interleaved; the
// time from the due instant until 1,000 occurrences in 1,000
// conversations are dispatched (on the Codex stand-in, the fake model
// answering at once) and serve's peak RSS meanwhile; and serve's idle RSS
// with the example host applied.
func serveBench(ctx context.Context, work, nlx string) error {
	if os.Geteuid() != 0 {
		fmt.Println("\nnlx serve: not measured: the sandbox's cgroups need root")
		return nil
	}
	dir := filepath.Join(work, "serve")
	if err := workDir(dir); err != nil {
		return err
	}
	model, err := fakemodel.Start()
	if err != nil {
		return err
	}
	defer model.Close()
	if err := claimOverhead(ctx, dir, nlx, model.URL()); err != nil {
		return err
	}
	if err := manyDue(ctx, dir, nlx, model); err != nil {
		return err
	}
	return idleServe(ctx, dir, nlx)
}

// serveEnv is the environment of the serve bench's nlx commands on the
// state under dir.
func serveEnv(dir string, extra ...string) []string {
	bin, _ := filepath.Abs(".providers/node_modules/.bin")
	return append(append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"), "NLX_STATE="+filepath.Join(dir, "state.db"),
		"NLX_WORKSPACE_ROOT="+filepath.Join(dir, "workspaces"), "NLX_CREDENTIAL_ROOT="+filepath.Join(dir, "credentials"),
		"NLX_ACTOR=bench", "NLX_PROVIDER_USER=61234:61234", "BENCH_KEY=sk-bench-0000000000000000"), extra...)
}

func applyCfg(ctx context.Context, nlx, cfg string, env []string) error {
	apply := exec.CommandContext(ctx, nlx, "apply", cfg, "--yes")
	apply.Env = env
	if msg, err := apply.CombinedOutput(); err != nil {
		return fmt.Errorf("apply %s: %v\n%s", cfg, err, msg)
	}
	return nil
}

// claimOverhead: nlx run of a job against nlx turn of the same workspace,
// connection and prompt.
func claimOverhead(ctx context.Context, dir, nlx, url string) error {
	if _, err := os.Stat(".providers/node_modules/.bin/codex"); err != nil {
		fmt.Println("\none claimed occurrence: not measured: codex is not installed (make providers)")
		return nil
	}
	d := filepath.Join(dir, "claim")
	cfg := filepath.Join(d, "cfg")
	if err := os.MkdirAll(cfg, 0o755); err != nil {
		return err
	}
	codexArgs, _ := json.Marshal(append([]string{"codex", "app-server"}, codex.FakeModelArgs(url)...))
	config := strings.NewReplacer("CODEXCMD", string(codexArgs), "FAKEURL", url).Replace(turnConfig) + `
jobs: once: {workspace: "w", connection: "c-codex", schedule: at: "2030-01-01T00:00:00Z", prompt: "say ok", conversation: "bench-run"}
`
	if err := os.WriteFile(filepath.Join(cfg, "host.cue"), []byte(config), 0o644); err != nil {
		return err
	}
	if err := writeIdentities(cfg, "bench", "bench"); err != nil {
		return err
	}
	env := serveEnv(d)
	if err := applyCfg(ctx, nlx, cfg, env); err != nil {
		return err
	}
	var viaRun, viaTurn []float64
	for i := 0; i < serveRounds+1; i++ {
		turn := exec.CommandContext(ctx, nlx, "turn", "--workspace", "w", "--connection", "c-codex", "--actor", "bench",
			"--conversation", "bench-turn", "say ok")
		run := exec.CommandContext(ctx, nlx, "run", "once", "--actor", "bench")
		turn.Env, run.Env = env, env
		t, err := measure(turn)
		if err != nil {
			return fmt.Errorf("nlx turn: %w", err)
		}
		r, err := measure(run)
		if err != nil {
			return fmt.Errorf("nlx run: %w", err)
		}
		if i == 0 {
			continue // the first probes the version and warms the caches
		}
		viaTurn, viaRun = append(viaTurn, t.wall.Seconds()*1000), append(viaRun, r.wall.Seconds()*1000)
	}
	r, t := medianOf(viaRun), medianOf(viaTurn)
	fmt.Printf("\none claimed occurrence (nlx run: claim, dispatch, turn, end) vs the same turn launched without a claim (nlx turn), real Codex, interleaved (medians of %d):\n", serveRounds)
	fmt.Printf("  nlx run %.0f ms, nlx turn %.0f ms: ratio %.2f (target <= 1.2) %s\n", r, t, r/t, verdict(r/t <= 1.2, "claim-to-launch overhead"))
	return nil
}

// manyDue: serveManyJobs one-time jobs due at one instant, each in its own
// conversation, on the stand-in.
func manyDue(ctx context.Context, dir, nlx string, model *fakemodel.Server) error {
	d := filepath.Join(dir, "many")
	cfg := filepath.Join(d, "cfg")
	prog := filepath.Join(d, "prog")
	for _, p := range []string{cfg, prog} {
		if err := os.MkdirAll(p, 0o755); err != nil {
			return err
		}
	}
	bin, err := testgen.BuildStandin(ctx, prog)
	if err != nil {
		return err
	}
	host := testgen.StandinHost{Command: append([]string{bin, "app-server"}, codex.FakeModelArgs(model.URL())...),
		Actor: "bench", SecretEnv: "BENCH_KEY", Jobs: serveManyJobs}
	write := func(at time.Time) error {
		host.At = at
		return os.WriteFile(filepath.Join(cfg, "host.cue"), []byte(host.Config()), 0o644)
	}
	if err := writeIdentities(cfg, "scale", host.Actor); err != nil {
		return err
	}
	env := serveEnv(d)
	// Applied first far ahead, so that the version probe and the caches
	// are warm (one manual run), then moved to a few seconds ahead.
	if err := write(time.Now().Add(time.Hour).UTC().Truncate(time.Second)); err != nil {
		return err
	}
	if err := applyCfg(ctx, nlx, cfg, env); err != nil {
		return err
	}
	warm := exec.CommandContext(ctx, nlx, "run", "job-0000", "--actor", "bench")
	warm.Env = env
	if out, err := warm.CombinedOutput(); err != nil {
		return fmt.Errorf("nlx run: %v\n%s", err, out)
	}
	due := time.Now().Add(15 * time.Second).UTC().Truncate(time.Second)
	if err := write(due); err != nil {
		return err
	}
	if err := applyCfg(ctx, nlx, cfg, env); err != nil {
		return err
	}
	srv := exec.CommandContext(ctx, nlx, "serve", "--poll", "200ms")
	srv.Env = env
	if err := srv.Start(); err != nil {
		return err
	}
	defer srv.Process.Kill()
	fmt.Fprintf(os.Stderr, "serve bench: %d occurrences due at %s\n", serveManyJobs, due.Format(time.RFC3339))
	st, err := state.Open(ctx, filepath.Join(d, "state.db"), state.Options{ReadOnly: true})
	if err != nil {
		return err
	}
	defer st.Close()
	var peak int64
	var lastDispatch, lastEnd time.Time
	deadline := time.Now().Add(10 * time.Minute)
	for {
		if kb := vmHWM(srv.Process.Pid); kb > peak {
			peak = kb
		}
		claims, err := st.Claims(ctx, "", 0)
		if err != nil {
			return err
		}
		dispatched, ended := 0, 0
		for _, c := range claims {
			if c.Trigger != state.TriggerSchedule {
				continue
			}
			if c.DispatchedAt != "" {
				dispatched++
				if t, _ := time.Parse(time.RFC3339Nano, c.DispatchedAt); t.After(lastDispatch) {
					lastDispatch = t
				}
			}
			if c.Phase.Terminal() {
				ended++
				if t, _ := time.Parse(time.RFC3339Nano, c.EndedAt); t.After(lastEnd) {
					lastEnd = t
				}
				if c.Phase != state.ClaimSucceeded {
					return fmt.Errorf("claim %s of %s: %s (%s %s)", c.ID, c.Job, c.Phase, c.ReasonCode, c.Reason)
				}
			}
		}
		if ended == serveManyJobs {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after 10 minutes %d of %d occurrences dispatched, %d ended", dispatched, serveManyJobs, ended)
		}
		time.Sleep(100 * time.Millisecond)
	}
	srv.Process.Signal(syscall.SIGTERM)
	srv.Wait()
	fmt.Printf("\n%d occurrences due at one instant in %d conversations (Codex stand-in, each in its own sandbox; the fake model answers at once; 2 cores):\n",
		serveManyJobs, serveManyJobs)
	fmt.Printf("  all dispatched %.1f s after the due instant, all ended after %.1f s; peak RSS of nlx serve %.1f MiB\n",
		lastDispatch.Sub(due).Seconds(), lastEnd.Sub(due).Seconds(), float64(peak)/1024)
	return nil
}

// idleServe: nlx serve's resident set, idle, on the example host.
func idleServe(ctx context.Context, dir, nlx string) error {
	repo, err := os.Getwd()
	if err != nil {
		return err
	}
	d := filepath.Join(dir, "idle")
	cfg := filepath.Join(d, "pi-team")
	if err := testgen.CopyTree(filepath.Join(repo, "examples", "pi-team"), cfg); err != nil {
		return err
	}
	env := serveEnv(d, "GOWORK=off", "NLX_IMAGE_STORE="+filepath.Join(d, "images"), "NLX_IMAGE_CACHE=")
	fmt.Fprintln(os.Stderr, "serve bench: applying the example (builds its image)")
	if err := applyCfg(ctx, nlx, cfg, env); err != nil {
		return err
	}
	srv := exec.CommandContext(ctx, nlx, "serve")
	srv.Env = env
	errPipe, err := srv.StderrPipe()
	if err != nil {
		return err
	}
	if err := srv.Start(); err != nil {
		return err
	}
	defer srv.Process.Kill()
	sc := bufio.NewScanner(errPipe)
	for sc.Scan() {
		if strings.Contains(sc.Text(), "serving serial") {
			break
		}
	}
	go func() {
		for sc.Scan() {
		}
	}()
	time.Sleep(5 * time.Second)
	rss := vmRSS(srv.Process.Pid)
	hwm := vmHWM(srv.Process.Pid)
	srv.Process.Signal(syscall.SIGTERM)
	srv.Wait()
	mib := float64(rss) / 1024
	fmt.Printf("\nnlx serve idle on the example host (4 jobs): RSS %.1f MiB (peak %.1f; target <= 30) %s\n", mib, float64(hwm)/1024, verdict(mib <= 30, "serve idle RSS"))
	return nil
}

// vmRSS is the resident set of pid now, in KiB.
func vmRSS(pid int) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			var n int64
			fmt.Sscan(strings.TrimSuffix(strings.TrimSpace(v), " kB"), &n)
			return n
		}
	}
	return 0
}
