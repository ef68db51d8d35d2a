package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/nlx-dev/nlx/internal/testgen"
)

// testHost is one nlx host for a test: a config, a state and a workspace root,
// driven through the built binary.
type testHost struct {
	t     *testing.T
	dir   string
	state string
	root  string
}

func newHost(t *testing.T) *testHost {
	t.Helper()
	dir := t.TempDir()
	h := &testHost{t: t, dir: dir, state: filepath.Join(dir, "state", "state.db"), root: filepath.Join(dir, "workspaces")}
	if err := testgen.CopyTree("../../examples/pi-team", filepath.Join(dir, "cfg")); err != nil {
		t.Fatal(err)
	}
	// The actors prove who they are with the test keys (--key).
	if err := writeIdentities(filepath.Join(dir, "cfg"), testKeys); err != nil {
		t.Fatal(err)
	}
	return h
}

// run runs nlx with env additions and returns stdout, stderr and the exit
// code (128+signal for a killed process).
func (h *testHost) run(env []string, args ...string) (string, string, int) {
	h.t.Helper()
	cmd := h.command(env, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			code = 128 + int(ws.Signal())
		}
	case err != nil:
		h.t.Fatalf("run nlx: %v", err)
	}
	return stdout.String(), stderr.String(), code
}

// command is nlx with args run on the host, with env additions.
func (h *testHost) command(env []string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(binDir, "nlx"), args...)
	cmd.Dir = h.dir
	cmd.Env = append(os.Environ(), "NLX_STATE="+h.state, "NLX_WORKSPACE_ROOT="+h.root, "NLX_ACTOR=ci", "NLX_FAULT=", "NLX_FAULT_TRACE=",
		"GOWORK="+filepath.Join(binDir, "go.work"), "NLX_IMAGE_CACHE="+filepath.Join(binDir, "image-cache"))
	cmd.Env = append(cmd.Env, env...)
	return cmd
}

// must runs nlx and requires exit code want.
func (h *testHost) must(want int, args ...string) string {
	h.t.Helper()
	out, errOut, code := h.run(nil, args...)
	if code != want {
		h.t.Fatalf("nlx %s: exit %d, want %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, want, out, errOut)
	}
	return out
}

func (h *testHost) json(v any, args ...string) {
	h.t.Helper()
	out := h.must(0, append(args, "-o", "json")...)
	if err := json.Unmarshal([]byte(out), v); err != nil {
		h.t.Fatalf("nlx %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

type stateList struct {
	Serial    int64 `json:"serial"`
	Resources []struct {
		Address string `json:"address"`
		Serial  int64  `json:"serial"`
	} `json:"resources"`
}

type journalList struct {
	Journal []struct {
		ApplyID int64  `json:"apply_id"`
		Address string `json:"address"`
		Phase   string `json:"phase"`
	} `json:"journal"`
}

// effectsLog counts how often each workspace's directory was made.
func (h *testHost) effectsLog() map[string]int {
	h.t.Helper()
	data, err := os.ReadFile(filepath.Join(h.root, ".nlx-effects.log"))
	if errors.Is(err, os.ErrNotExist) {
		return map[string]int{}
	}
	if err != nil {
		h.t.Fatal(err)
	}
	n := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if f := strings.Fields(line); len(f) >= 3 {
			n[f[2]]++
		}
	}
	return n
}

// credentialHomes are the example's connections' credential homes, under
// the default credential root beside the state.
var credentialHomes = map[string]string{
	"connection.platform-codex": "platform/codex",
	"connection.alice-claude":   "alice/claude",
	"connection.bob-codex":      "bob/codex",
}

// effectDone reports whether the effect of the change at address is on
// the host: the workspace's directory, the connection's credential home.
func (h *testHost) effectDone(address string) bool {
	p := filepath.Join(h.root, strings.TrimPrefix(address, "workspace."))
	if home, ok := credentialHomes[address]; ok {
		p = filepath.Join(filepath.Dir(h.state), "credentials", home)
	}
	_, err := os.Stat(p)
	return err == nil
}

// TestCrashAtEveryJournalStep kills nlx with SIGKILL at every journal step
// of an apply of the example (17 changes, eight with an effect: the
// workspaces' directories, the connections' credential homes and the
// skills' packages) and checks what is left each time.
func TestCrashAtEveryJournalStep(t *testing.T) {
	if testing.Short() {
		t.Skip("kills many processes")
	}
	// List the points of a whole apply (batches of 4 to have many).
	trace := newHost(t)
	trace.must(0, "plan", "cfg", "--out", "plan.json")
	traceFile := filepath.Join(trace.dir, "points")
	if _, errOut, code := trace.run([]string{"NLX_FAULT_TRACE=" + traceFile}, "apply", "plan.json", "--batch-size", "4"); code != 0 {
		t.Fatalf("traced apply: exit %d: %s", code, errOut)
	}
	data, err := os.ReadFile(traceFile)
	if err != nil {
		t.Fatal(err)
	}
	points := strings.Fields(string(data))
	if len(points) < 12 {
		t.Fatalf("only %d fault points: %v", len(points), points)
	}
	for _, point := range points {
		t.Run(point, func(t *testing.T) {
			t.Parallel()
			h := newHost(t)
			h.must(0, "plan", "cfg", "--out", "plan.json")
			if _, _, code := h.run([]string{"NLX_FAULT=" + point + "=kill"}, "apply", "plan.json", "--batch-size", "4"); code != 128+int(syscall.SIGKILL) {
				t.Fatalf("apply killed at %s: exit %d, want %d", point, code, 128+int(syscall.SIGKILL))
			}
			h.checkAfterCrash(point)
		})
	}
}

func (h *testHost) checkAfterCrash(point string) {
	t := h.t
	// The state is readable.
	var st stateList
	h.json(&st, "state", "list")
	var jl journalList
	h.json(&jl, "state", "journal")

	// Every change is wholly applied or wholly not: a resource exists iff
	// its change was journaled committed.
	committed := map[string]bool{}
	dispatched := map[string]bool{}
	for _, j := range jl.Journal {
		switch j.Phase {
		case "committed":
			committed[j.Address] = true
		case "dispatched":
			dispatched[j.Address] = true
		}
	}
	present := map[string]bool{}
	for _, r := range st.Resources {
		present[r.Address] = true
		if !committed[r.Address] {
			t.Errorf("%s is in the state but its change was not journaled committed", r.Address)
		}
		if r.Serial != 1 {
			t.Errorf("%s written at serial %d, want 1", r.Address, r.Serial)
		}
	}
	for a := range committed {
		if !present[a] {
			t.Errorf("%s was journaled committed but is not in the state", a)
		}
	}
	// The serial is consistent: bumped once when the apply began (after
	// the lock and the plan's re-derivation).
	begun := point != "apply.locked" && point != "apply.derived"
	if want := map[bool]int64{false: 0, true: 1}[begun]; st.Serial != want {
		t.Errorf("serial %d, want %d", st.Serial, want)
	}

	// Effects dispatched without an outcome show as unknown in a new plan.
	var unknownNow []string
	for a := range dispatched {
		if !committed[a] {
			unknownNow = append(unknownNow, a)
		}
	}
	var p struct {
		Unknowns []struct {
			Address string `json:"address"`
		} `json:"unknown_outcomes"`
		Changes []struct {
			Address string `json:"address"`
			Risks   []struct {
				Code string `json:"code"`
			} `json:"risks"`
		} `json:"changes"`
	}
	out, errOut, code := h.run(nil, "plan", "cfg", "--out", "again.json", "-o", "json")
	if code != 0 && code != 3 {
		t.Fatalf("plan after the crash: exit %d: %s", code, errOut)
	}
	if err := json.Unmarshal([]byte(out), &p); err != nil {
		t.Fatal(err)
	}
	shown := map[string]bool{}
	for _, u := range p.Unknowns {
		shown[u.Address] = true
	}
	for _, a := range unknownNow {
		if !shown[a] {
			t.Errorf("dispatched %s is not shown as an unknown outcome", a)
		}
	}
	claims := 0
	for _, c := range p.Changes {
		for _, r := range c.Risks {
			if r.Code == "unknown_claim" {
				claims++
				if !shown[c.Address] {
					t.Errorf("%s carries unknown_claim without an unknown outcome", c.Address)
				}
			}
		}
	}
	if claims != len(unknownNow) {
		t.Errorf("%d changes carry unknown_claim, want %d", claims, len(unknownNow))
	}

	before := h.effectsLog()
	// A new apply replays nothing that was dispatched: with unknowns it is
	// refused, and it marks them unknown.
	if len(unknownNow) > 0 {
		_, errOut, code := h.run(nil, "apply", "again.json")
		if code != 3 || !strings.Contains(errOut, "unknown_unresolved") {
			t.Fatalf("apply with unknown outcomes: exit %d, want 3 unknown_unresolved: %s", code, errOut)
		}
		if after := h.effectsLog(); !mapsEqual(after, before) {
			t.Fatalf("the refused apply carried out effects: %v -> %v", before, after)
		}
		// An operator looks at the host and says what happened.
		for _, a := range unknownNow {
			outcome := "not-applied"
			if h.effectDone(a) {
				outcome = "applied"
			}
			h.must(0, "resolve", a, "--outcome", outcome, "--actor", "alice", "--key", testKey("alice"), "--reason", "checked the host")
		}
		h.must(0, "plan", "cfg", "--out", "again.json")
	}
	h.must(0, "apply", "again.json")
	h.must(0, "plan", "cfg", "--detailed-exitcode")

	// Every workspace has its directory, made exactly once in all.
	for _, w := range []string{"alice", "bob", "platform"} {
		if _, err := os.Stat(filepath.Join(h.root, w)); err != nil {
			t.Errorf("workspace %s has no directory: %v", w, err)
		}
		if n := h.effectsLog()["workspace."+w]; n > 1 {
			t.Errorf("workspace.%s was made %d times: an effect was replayed", w, n)
		}
	}
	// Every connection has its credential home, made exactly once too.
	for a := range credentialHomes {
		if !h.effectDone(a) {
			t.Errorf("%s has no credential home", a)
		}
		if n := h.effectsLog()[a]; n > 1 {
			t.Errorf("%s's home was made %d times: an effect was replayed", a, n)
		}
	}
}

func mapsEqual(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestConcurrentApplies starts 8 applies of one plan at once, on a host
// without a state yet: exactly one applies, the others exit 4 and write
// nothing, and all meet the one state the first created.
func TestConcurrentApplies(t *testing.T) {
	h := newHost(t)
	h.must(0, "plan", "cfg", "--out", "plan.json")

	const n = 8
	codes := make([]int, n)
	errs := make([]string, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			// The winner holds the lock a while: every other apply must
			// meet it, whatever the scheduling.
			_, errs[i], codes[i] = h.run([]string{"NLX_FAULT=apply.locked=sleep:3s"}, "apply", "plan.json")
		}()
	}
	close(start)
	wg.Wait()
	won, locked := 0, 0
	for i, c := range codes {
		switch c {
		case 0:
			won++
		case 4:
			locked++
			if !strings.Contains(errs[i], "state_locked") {
				t.Errorf("exit 4 without state_locked: %s", errs[i])
			}
		default:
			t.Errorf("apply exited %d: %s", c, errs[i])
		}
	}
	if won != 1 || locked != n-1 {
		t.Fatalf("%d applied and %d were locked out, want 1 and %d (codes %v)", won, locked, n-1, codes)
	}
	var st stateList
	h.json(&st, "state", "list")
	if st.Serial != 1 || len(st.Resources) != 17 {
		t.Errorf("after the race: serial %d, %d resources", st.Serial, len(st.Resources))
	}
	var hist struct {
		Applies []struct {
			Status string `json:"status"`
		} `json:"applies"`
	}
	h.json(&hist, "state", "history")
	if len(hist.Applies) != 1 || hist.Applies[0].Status != "completed" {
		t.Errorf("history: %+v, want one completed apply", hist.Applies)
	}
}
