package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/nlx-dev/nlx/internal/openclawfix"
)

// preserveBench measures nlx preserve inventory and export of a generated
// OpenClaw installation (era 2: 70 jobs, 800 sessions, 400 MB of
// transcripts) against `cp -a` of the same tree followed by `sha256sum` of
// every file of the copy, interleaved, medians of rounds; and the peak RSS
// of each (streaming: never the whole source in memory).
func preserveBench(ctx context.Context, work, nlx string, rounds int) error {
	dir := filepath.Join(work, "preserve")
	src := filepath.Join(dir, "openclaw")
	fmt.Fprintln(os.Stderr, "preserve: generating an OpenClaw installation with 400 MB of transcripts")
	truth, err := openclawfix.Write(src, openclawfix.Options{Era: 2, Jobs: 70, Sessions: 800, TranscriptBytes: 400 << 20})
	if err != nil {
		return err
	}
	cfg := filepath.Join(dir, "cfg")
	if err := os.MkdirAll(cfg, 0o755); err != nil {
		return err
	}
	export := filepath.Join(dir, "export")
	host := fmt.Sprintf(`package p

host: operators: ["bench"]
providers: codex: {kind: "codex-app-server", status: "enabled", version: ">= 0.169.0", command: ["codex", "app-server"]}
workspaces: w: {team: "t", kind: "team", policy: "read_only", chatReset: "manual", members: bench: "admin",
	limits: {memory: "256Mi", cpu: 1, pids: 64}, network: egress: "none"}
connections: c: {owner: "bench", scope: "team", workspace: "w", provider: "codex", billing: "subscription", credentialHome: "w/codex", generation: 1}
preservations: oc: {source: {kind: "openclaw", path: %q, lockDir: %q}, workspace: "w", connection: "c",
	export: %q, expected: counts: {jobs: %d}, chatReset: w: "preserve"}
`, src, filepath.Join(dir, "locks"), export, truth.Counts["jobs"])
	if err := os.WriteFile(filepath.Join(cfg, "host.cue"), []byte(host), 0o644); err != nil {
		return err
	}
	rounds = max(3, rounds/2) // each round moves about 2 GB
	var peer, inventory, exports series
	// Each command starts with the page cache's dirty pages written back
	// (sync, untimed): the previous one's writes never slow the next.
	sync := func() { exec.CommandContext(ctx, "sync").Run() }
	for r := 0; r < rounds; r++ {
		dst := filepath.Join(dir, "copy")
		sync()
		cp := exec.CommandContext(ctx, "sh", "-c", `cp -a "$1" "$2" && find "$2" -type f -exec sha256sum {} + > /dev/null`, "sh", src, dst)
		x, err := measure(cp)
		if err != nil {
			return err
		}
		peer = append(peer, x)
		os.RemoveAll(dst)
		sync()
		inv := exec.CommandContext(ctx, nlx, "preserve", "inventory", "oc", cfg)
		if x, err = measure(inv); err != nil {
			return err
		}
		inventory = append(inventory, x)
		sync()
		exp := exec.CommandContext(ctx, nlx, "preserve", "export", "oc", cfg)
		if x, err = measure(exp); err != nil {
			return err
		}
		exports = append(exports, x)
		os.RemoveAll(export)
		fmt.Fprintf(os.Stderr, "preserve round %d/%d done\n", r+1, rounds)
	}
	p, inv, exp := peer.median(), inventory.median(), exports.median()
	mb := float64(truth.Bytes) / 1e6
	fmt.Printf("\nnlx preserve of an OpenClaw installation (%d files, %.0f MB; %d jobs, %d sessions, %d transcript entries), medians of %d:\n",
		truth.Files, mb, truth.Counts["jobs"], truth.Counts["sessions"], truth.Counts["transcript_entries"], rounds)
	fmt.Printf("  cp -a + sha256sum of every file      %6.2f s\n", p.wall.Seconds())
	row := func(what string, s sample) {
		ratio := s.wall.Seconds() / p.wall.Seconds()
		fmt.Printf("  %-36s %6.2f s  %.2fx (target <= 1.5) %s   peak RSS %.1f MiB (target < 100) %s\n", what, s.wall.Seconds(), ratio,
			verdict(ratio <= 1.5, "preserve "+what+" time"), float64(s.rss)/1024, verdict(float64(s.rss)/1024 < 100, "preserve "+what+" RSS"))
	}
	row("nlx preserve inventory", inv)
	row("nlx preserve export", exp)
	if strings.TrimSpace(os.Getenv("NLX_BENCH_KEEP_PRESERVE")) == "" {
		os.RemoveAll(dir)
	}
	return nil
}
