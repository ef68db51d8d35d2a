package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// egressRounds is how many downloads of each kind are measured.
const egressRounds = 7

// egressSmall is how many small requests one curl makes, on one
// connection (to the proxy, or to the server).
const egressSmall = 200

// egressBench measures the inference proxy: a 10 MiB download and 200
// small requests by curl inside a sandbox with egress inference (through
// the bridge and the proxy) against the same curl on the host straight to
// the loopback server, interleaved, in the same run. curl's own timings
// are compared: the sandbox's start is not the proxy's cost.
func egressBench(ctx context.Context, work, nlx string) error {
	curl, err := exec.LookPath("curl")
	if os.Geteuid() != 0 || err != nil {
		fmt.Println("\ninference egress: not measured: it needs root (cgroups) and curl")
		return nil
	}
	big := bytes.Repeat([]byte("0123456789abcdef"), 10<<20/16)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/big" {
			w.Header().Set("Content-Length", strconv.Itoa(len(big)))
			w.Write(big)
			return
		}
		w.Write([]byte("ok"))
	})}
	go srv.Serve(ln)
	defer srv.Close()
	addr := ln.Addr().String()
	dir := filepath.Join(work, "egress")
	cfg := filepath.Join(dir, "cfg")
	if err := workDir(dir, "cfg"); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(cfg, "host.cue"), []byte(strings.ReplaceAll(egressConfig, "ADDR", addr)), 0o644); err != nil {
		return err
	}
	env := append(os.Environ(), "NLX_STATE="+filepath.Join(dir, "state.db"), "NLX_WORKSPACE_ROOT="+filepath.Join(dir, "workspaces"),
		"NLX_CREDENTIAL_ROOT="+filepath.Join(dir, "credentials"), "NLX_ACTOR=bench", "NLX_PROVIDER_USER=61234:61234")
	apply := exec.CommandContext(ctx, nlx, "apply", cfg, "--yes")
	apply.Env = env
	if msg, err := apply.CombinedOutput(); err != nil {
		return fmt.Errorf("apply the egress config: %v\n%s", err, msg)
	}
	bigArgs := []string{"-s", "-o", "/dev/null", "-w", `%{time_total}\n`, "http://" + addr + "/big"}
	// -p: through a CONNECT tunnel, as every https request (a real model's
	// API) goes.
	tunnelArgs := append([]string{"-p"}, bigArgs...)
	smallArgs := []string{"-s", "-w", `%{time_total}\n`}
	for i := 0; i < egressSmall; i++ {
		smallArgs = append(smallArgs, "-o", "/dev/null", "http://"+addr+"/small")
	}
	// inside runs curl in the sandbox; host runs it here, straight.
	inside := func(args []string) ([]float64, error) {
		cmd := exec.CommandContext(ctx, nlx, append([]string{"exec", "--workspace", "w", "--connection", "c", "--", "curl"}, args...)...)
		cmd.Env = env
		return curlTimes(cmd)
	}
	host := func(args []string) ([]float64, error) {
		cmd := exec.CommandContext(ctx, curl, args...)
		cmd.Env = []string{"PATH=/usr/bin:/bin"}
		return curlTimes(cmd)
	}
	var bigIn, bigHost, tunIn, tunHost, smallIn, smallHost []float64
	for r := 0; r < egressRounds; r++ {
		for _, m := range []struct {
			into *[]float64
			run  func([]string) ([]float64, error)
			args []string
			all  bool
		}{
			{&bigIn, inside, bigArgs, false}, {&bigHost, host, bigArgs, false},
			{&tunIn, inside, tunnelArgs, false}, {&tunHost, host, bigArgs, false},
			{&smallIn, inside, smallArgs, true}, {&smallHost, host, smallArgs, true},
		} {
			times, err := m.run(m.args)
			if err != nil {
				return err
			}
			if m.all {
				// The first request of each run opens the connection.
				*m.into = append(*m.into, times[1:]...)
			} else {
				*m.into = append(*m.into, times...)
			}
		}
	}
	bi, bh := medianOf(bigIn), medianOf(bigHost)
	ti, th := medianOf(tunIn), medianOf(tunHost)
	si, sh := medianOf(smallIn), medianOf(smallHost)
	fmt.Printf("\ninference egress: curl in a sandbox through the bridge and the proxy, against curl on the host straight to the loopback server (curl's own timings, medians of %d runs):\n", egressRounds)
	fmt.Printf("  10 MiB download, plain http forwarded: %.1f ms through the proxy, %.1f ms direct: ratio %.2f (target <= 1.3) %s\n",
		bi*1000, bh*1000, bi/bh, verdict(bi/bh <= 1.3, "egress download, forwarded"))
	fmt.Printf("  10 MiB download, CONNECT tunnel (https's path): %.1f ms through the proxy, %.1f ms direct: ratio %.2f (target <= 1.3) %s\n",
		ti*1000, th*1000, ti/th, verdict(ti/th <= 1.3, "egress download, tunnelled"))
	added := (si - sh) * 1000
	fmt.Printf("  small requests (%d per run, one connection): median %.2f ms through the proxy, %.2f ms direct: %+.2f ms added (target <= 2) %s\n",
		egressSmall, si*1000, sh*1000, added, verdict(added <= 2, "egress request latency"))
	return nil
}

// curlTimes runs a curl printing %{time_total} per transfer and returns
// them, in seconds.
func curlTimes(cmd *exec.Cmd) ([]float64, error) {
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s: %v\n%s", strings.Join(cmd.Args[:min(len(cmd.Args), 8)], " "), err, errOut.String())
	}
	var times []float64
	for _, f := range strings.Fields(out.String()) {
		v, err := strconv.ParseFloat(f, 64)
		if err != nil {
			return nil, fmt.Errorf("curl printed %q", f)
		}
		times = append(times, v)
	}
	if len(times) == 0 {
		return nil, fmt.Errorf("curl printed no timing")
	}
	return times, nil
}

const egressConfig = `package bench

host: operators: ["bench"]
providers: p: {kind: "codex-app-server", status: "enabled", version: ">= 0.1", command: ["codex"], inference: ["ADDR"]}
workspaces: w: {
	team:      "t"
	kind:      "team"
	policy:    "workspace_write"
	chatReset: "never"
	members: bench: "admin"
	limits: {memory: "512Mi", cpu: 2, pids: 128}
	network: egress: "inference"
}
connections: c: {owner: "bench", scope: "team", workspace: "w", provider: "p", billing: "api", credentialHome: "w/p", generation: 1}
`
