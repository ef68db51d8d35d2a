package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/nlx-dev/nlx/internal/testgen"
	"github.com/nlx-dev/nlx/internal/testtool"
)

// gitopsBench measures planning against a published state: the fleet of
// the reconcile benchmark is applied into a local state, which is
// published once to Debian's docker-registry on 127.0.0.1 and exported
// once to a file; then `nlx plan` of the fleet with nothing changed
// against the local state (the peer), against the registry reference
// (--state-from REF) and against the file (--state-from FILE), interleaved,
// medians of rounds. Each plan must have the local plan's plan_hash: the
// same plan, whichever way the state was read. Then `nlx state publish`
// of that state, median of rounds.
func gitopsBench(ctx context.Context, work, nlx string, rounds, workspaces int) error {
	bin, err := exec.LookPath("docker-registry")
	if err != nil {
		fmt.Println("\ngitops: not measured: it needs Debian's docker-registry")
		return nil
	}
	dir := filepath.Join(work, "gitops")
	cfg := filepath.Join(dir, "fleet")
	fleet := testgen.Fleet{Workspaces: workspaces, JobsPerSpace: 5}
	if err := fleet.Write(cfg); err != nil {
		return err
	}
	env := append(os.Environ(), "NLX_STATE="+filepath.Join(dir, "state.db"), "NLX_WORKSPACE_ROOT="+filepath.Join(dir, "workspaces"))
	nlxCmd := func(args ...string) *exec.Cmd {
		cmd := exec.CommandContext(ctx, nlx, args...)
		cmd.Dir, cmd.Env = cfg, env
		return cmd
	}
	untimed := func(args ...string) error {
		if out, err := nlxCmd(args...).CombinedOutput(); err != nil {
			return fmt.Errorf("nlx %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	// As the reconcile benchmark does: a plan saved, then applied.
	fmt.Fprintf(os.Stderr, "gitops: applying the %d-resource fleet\n", fleet.Resources())
	applied := filepath.Join(dir, "apply.json")
	if err := untimed("plan", ".", "--out", applied); err != nil {
		return err
	}
	if err := untimed("apply", applied); err != nil {
		return err
	}

	addr, stop, err := testtool.StartRegistry(ctx, bin, filepath.Join(dir, "registry"))
	if err != nil {
		return err
	}
	defer stop()
	ref := addr + "/nlx/fleet/state:latest"
	if err := untimed("state", "publish", ref); err != nil {
		return err
	}
	file := filepath.Join(dir, "state.json")
	if err := untimed("state", "export", "--out", file); err != nil {
		return err
	}
	fi, err := os.Stat(file)
	if err != nil {
		return err
	}

	kinds := []struct {
		name, label string
		from        []string
	}{
		{"local", "", nil},
		{"registry", "REF", []string{"--state-from", ref}},
		{"file", "FILE", []string{"--state-from", file}},
	}
	plans := make([]series, len(kinds))
	var publishes series
	hashes := map[string]string{} // kind: the plan_hash of its last plan
	for r := 0; r < rounds; r++ {
		// Each round starts with a different kind, so that none always
		// follows the same one.
		for i := range kinds {
			k := (r + i) % len(kinds)
			out := filepath.Join(dir, fmt.Sprintf("plan-%s-%d.json", kinds[k].name, r))
			x, err := measure(nlxCmd(append([]string{"plan", ".", "--detailed-exitcode", "--out", out}, kinds[k].from...)...))
			if err != nil {
				return err
			}
			plans[k] = append(plans[k], x)
			h, err := planHash(out)
			if err != nil {
				return err
			}
			if prev, ok := hashes[kinds[k].name]; ok && prev != h {
				return fmt.Errorf("gitops: plans from the %s state differ between rounds: %s, then %s", kinds[k].name, prev, h)
			}
			hashes[kinds[k].name] = h
		}
		x, err := measure(nlxCmd("state", "publish", ref))
		if err != nil {
			return err
		}
		publishes = append(publishes, x)
		fmt.Fprintf(os.Stderr, "gitops round %d/%d done\n", r+1, rounds)
	}

	local, reg, exp, pub := plans[0].median(), plans[1].median(), plans[2].median(), publishes.median()
	fmt.Printf("\nplan of the %d-resource fleet, no changes, against a published state (medians of %d):\n", fleet.Resources(), rounds)
	fmt.Printf("  nlx plan DIR (local state)             %6.3f s  peak RSS %5.0f MiB\n", local.wall.Seconds(), float64(local.rss)/1024)
	ratio := reg.wall.Seconds() / local.wall.Seconds()
	fmt.Printf("  nlx plan DIR --state-from REF          %6.3f s  peak RSS %5.0f MiB  %.2fx (target <= 1.2) %s\n",
		reg.wall.Seconds(), float64(reg.rss)/1024, ratio, verdict(ratio <= 1.2, "plan --state-from REF"))
	fmt.Printf("  nlx plan DIR --state-from FILE         %6.3f s  peak RSS %5.0f MiB  %.2fx (reported)\n",
		exp.wall.Seconds(), float64(exp.rss)/1024, exp.wall.Seconds()/local.wall.Seconds())
	fmt.Printf("  plan_hash, local state: %s\n", hashes["local"])
	for _, k := range kinds[1:] {
		same := hashes[k.name] == hashes["local"]
		what := "the same"
		if !same {
			what = "differs: " + hashes[k.name]
		}
		fmt.Printf("  plan_hash, --state-from %-5s %s %s\n", k.label+":", what,
			verdict(same, "plan_hash from the "+k.name+" state"))
	}
	fmt.Printf("  nlx state publish REF                  %6.3f s  peak RSS %5.0f MiB  (target < 2 s) %s; snapshot %.1f MiB (%d bytes)\n",
		pub.wall.Seconds(), float64(pub.rss)/1024, verdict(pub.wall < 2*time.Second, "state publish"), float64(fi.Size())/(1<<20), fi.Size())
	return nil
}

// planHash reads the plan_hash of a plan file.
func planHash(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	var p struct {
		PlanHash string `json:"plan_hash"`
	}
	if err := json.Unmarshal(data, &p); err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	if p.PlanHash == "" {
		return "", fmt.Errorf("%s: no plan_hash", path)
	}
	return p.PlanHash, nil
}
