package main

import (
	"bytes"
	"database/sql"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nlx-dev/nlx/plan"
	"github.com/nlx-dev/nlx/schema"
)

// start runs nlx in the background with env additions; the test waits for
// it (or leaves it unreaped, to make a zombie).
func (h *testHost) start(env []string, args ...string) (*exec.Cmd, *bytes.Buffer, *bytes.Buffer) {
	h.t.Helper()
	cmd := h.command(env, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		h.t.Fatal(err)
	}
	return cmd, &stdout, &stderr
}

type listedLock struct {
	Lock *struct {
		LockID     string `json:"lock_id"`
		Operation  string `json:"operation"`
		PID        int    `json:"pid"`
		HolderGone bool   `json:"holder_gone"`
	} `json:"lock"`
}

// waitLocked polls nlx state list until it shows the lock held by pid.
func (h *testHost) waitLocked(pid int) string {
	h.t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		out, _, code := h.run(nil, "state", "list", "-o", "json")
		if code != 0 {
			continue // no state yet
		}
		var l listedLock
		if err := json.Unmarshal([]byte(out), &l); err != nil {
			h.t.Fatal(err)
		}
		if l.Lock != nil && l.Lock.PID == pid {
			return l.Lock.LockID
		}
	}
	h.t.Fatalf("nlx state list never showed a lock held by pid %d", pid)
	return ""
}

// TestPlanDuringApply: a plan made while an apply is changing the state is
// refused (state_locked, exit 4). It used to read the half-applied state at
// the serial the apply had already bumped, pass apply's stale check once
// that apply ended, and make every workspace a second time.
func TestPlanDuringApply(t *testing.T) {
	h := newHost(t)
	h.must(0, "plan", "cfg", "--out", "p1.json")
	first, _, firstErr := h.start([]string{"NLX_FAULT=apply.committed.1=sleep:4s"}, "apply", "p1.json", "--batch-size", "4")
	h.waitLocked(first.Process.Pid)
	out, errOut, code := h.run(nil, "plan", "cfg", "--out", "p2.json")
	if code != 4 || !strings.Contains(errOut, "state_locked") || !strings.Contains(errOut, "is changing the state") {
		t.Errorf("plan during an apply: exit %d, want 4 state_locked saying the state is being changed\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	if _, err := os.Stat(filepath.Join(h.dir, "p2.json")); err == nil {
		t.Error("the refused plan wrote its file")
	}
	if err := first.Wait(); err != nil {
		t.Fatalf("first apply: %v\n%s", err, firstErr)
	}
	// Once the apply ended, plans work and find nothing left to do.
	if out := h.must(0, "plan", "cfg"); !strings.Contains(out, "No changes") {
		t.Errorf("plan after the apply:\n%s", out)
	}
	for w, n := range h.effectsLog() {
		if n != 1 {
			t.Errorf("%s was made %d times", w, n)
		}
	}
}

// TestZombieLockHolder: an apply killed while it held the lock, and not yet
// reaped by its parent (a zombie, state Z, its /proc entry still there with
// its start time), is dead: the next apply takes its lock over. It used to
// be refused until the parent reaped the zombie. nlx state list shows the
// lock and that its holder is gone.
func TestZombieLockHolder(t *testing.T) {
	h := newHost(t)
	h.must(0, "plan", "cfg", "--out", "plan.json")
	dying, _, _ := h.start([]string{"NLX_FAULT=apply.locked=sleep:60s"}, "apply", "plan.json")
	pid := dying.Process.Pid
	lockID := h.waitLocked(pid)
	if err := dying.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// Not reaped: wait only until the kernel shows it a zombie.
	for i := 0; ; i++ {
		data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			t.Fatal(err)
		}
		if f := strings.Fields(string(data[bytes.LastIndexByte(data, ')')+1:])); f[0] == "Z" {
			break
		}
		if i == 500 {
			t.Fatal("the killed apply never became a zombie")
		}
		time.Sleep(10 * time.Millisecond)
	}
	defer dying.Wait()

	var l listedLock
	h.json(&l, "state", "list")
	if l.Lock == nil || l.Lock.LockID != lockID || !l.Lock.HolderGone {
		t.Errorf("state list lock = %+v, want lock %s with its holder gone", l.Lock, lockID)
	}
	if _, errOut, _ := h.run(nil, "state", "list"); !strings.Contains(errOut, "locked by apply (lock "+lockID) || !strings.Contains(errOut, "gone") {
		t.Errorf("state list does not show the held lock:\n%s", errOut)
	}
	out, errOut, code := h.run(nil, "apply", "plan.json")
	if code != 0 || !strings.Contains(errOut, "Took over the state lock") {
		t.Fatalf("apply over a zombie's lock: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
}

// TestTakeoverLastLine: an apply whose lock was released under it (nlx
// state unlock) while it slept, and whose state another apply then moved
// on, stops at its next write and names the serial the state is at, not
// the one it had set.
func TestTakeoverLastLine(t *testing.T) {
	h := newHost(t)
	h.must(0, "plan", "cfg", "--out", "p1.json")
	trace := filepath.Join(t.TempDir(), "points")
	first, firstOut, firstErr := h.start([]string{"NLX_FAULT=apply.committed.1=sleep:4s", "NLX_FAULT_TRACE=" + trace}, "apply", "p1.json", "--batch-size", "4")
	lockID := h.waitLocked(first.Process.Pid)
	// Released only once the apply sleeps after its first commit (its
	// fault trace says so): released earlier, it would stop before it set
	// any serial, and there would be no ledger to read.
	for i := 0; ; i++ {
		if data, _ := os.ReadFile(trace); strings.Contains(string(data), "apply.committed.1\n") {
			break
		}
		if i == 1000 {
			t.Fatal("the first apply never reached its first commit")
		}
		time.Sleep(10 * time.Millisecond)
	}
	h.must(0, "state", "unlock", lockID)
	h.must(0, "plan", "cfg", "--out", "p2.json")
	h.must(0, "apply", "p2.json")
	err := first.Wait()
	if err == nil {
		t.Fatalf("the apply whose lock was released finished:\n%s", firstOut)
	}
	out := firstOut.String()
	if !strings.Contains(out, "Apply stopped.") || !strings.Contains(out, "State serial 2.") || !strings.Contains(out, "This apply set serial 1") {
		t.Errorf("the stopped apply's ledger does not name serial 2:\nstdout: %s\nstderr: %s", out, firstErr)
	}
}

// TestForgedPlanFile is the attack through the binary: a plan of
// the unchanged config, edited to make mallory an operator with no risk
// and its plan_hash recomputed, is refused (plan_not_derivable), and the
// state is as it was.
func TestForgedPlanFile(t *testing.T) {
	h := newHost(t)
	h.must(0, "plan", "cfg", "--out", "first.json")
	h.must(0, "apply", "first.json")
	h.must(0, "plan", "cfg", "--out", "empty.json")
	before := h.must(0, "state", "list", "-o", "json")

	p, err := plan.ReadFile(filepath.Join(h.dir, "empty.json"))
	if err != nil {
		t.Fatal(err)
	}
	hostBefore, _ := json.Marshal(schema.Host{Operators: []string{"alice"}, TwoPersonRule: true})
	hostAfter, _ := json.Marshal(schema.Host{Operators: []string{"alice", "mallory"}, TwoPersonRule: true})
	p.Changes = append(p.Changes, plan.Change{Address: "host.config", Kind: schema.KindHost, Name: "config", Action: plan.Update,
		Risks: []plan.Risk{}, Refused: []plan.Refusal{}, Diff: []plan.FieldDiff{{Path: "operators[1]", After: json.RawMessage(`"mallory"`)}},
		Before: hostBefore, After: hostAfter})
	p.Summary = plan.Summarize(p.Changes)
	p.PlanHash = ""
	if err := plan.WriteFile(filepath.Join(h.dir, "forged.json"), p); err != nil { // recomputes plan_hash
		t.Fatal(err)
	}
	out, errOut, code := h.run(nil, "apply", "forged.json")
	if code != 1 || !strings.Contains(errOut, "plan_not_derivable") || !strings.Contains(errOut, "host.config") {
		t.Fatalf("apply of the forged plan: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	if after := h.must(0, "state", "list", "-o", "json"); after != before {
		t.Errorf("the refused apply changed the state:\nbefore %s\nafter  %s", before, after)
	}
	if show := h.must(0, "state", "show", "host.config"); strings.Contains(show, "mallory") {
		t.Errorf("mallory became an operator:\n%s", show)
	}
}

// TestReadingCommandsNeverWrite: nlx state list on another program's
// database (it used to add nlx's tables to it), on a state whose lineage
// row is gone (it used to start a new lineage at serial 0), and on a state
// in a read-only directory (every command failed).
func TestReadingCommandsNeverWrite(t *testing.T) {
	h := newHost(t)
	foreign := filepath.Join(h.dir, "notes.db")
	db, err := sql.Open("sqlite", "file:"+foreign)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE notes (body TEXT); INSERT INTO notes VALUES ('mine')`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	sum := func(p string) string {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	was := sum(foreign)
	for _, args := range [][]string{{"state", "list"}, {"plan", "cfg"}, {"apply", "cfg", "--yes"}} {
		_, errOut, code := h.run(nil, append([]string{"--state", foreign}, args...)...)
		if code != 1 || !strings.Contains(errOut, "not_an_nlx_state") {
			t.Errorf("nlx %v on another program's database: exit %d: %s", args, code, errOut)
		}
	}
	if sum(foreign) != was {
		t.Error("nlx changed another program's database")
	}

	h.must(0, "plan", "cfg", "--out", "plan.json")
	h.must(0, "apply", "plan.json")
	// A read-only state directory (root ignores modes: a read-only bind
	// mount in a mount namespace of the command's own).
	if _, err := exec.LookPath("unshare"); err == nil && os.Geteuid() == 0 {
		dir := filepath.Dir(h.state)
		script := `mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && shift && exec "$@"`
		for _, args := range [][]string{{"state", "list"}, {"state", "history"}, {"plan", "cfg"}, {"ps"}} {
			cmd := exec.Command("unshare", append([]string{"--mount", "sh", "-c", script, "sh", dir, filepath.Join(binDir, "nlx")}, args...)...)
			cmd.Dir = h.dir
			// The image store, which a plan builds into, is not the
			// state: elsewhere, writable.
			cmd.Env = append(os.Environ(), "NLX_STATE="+h.state, "NLX_WORKSPACE_ROOT="+h.root, "GOWORK="+filepath.Join(binDir, "go.work"),
				"NLX_IMAGE_CACHE="+filepath.Join(binDir, "image-cache"), "NLX_IMAGE_STORE="+filepath.Join(h.dir, "images"))
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("nlx %v on a read-only state directory: %v\n%s", args, err, out)
			}
		}
	}

	raw, err := sql.Open("sqlite", "file:"+h.state)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Exec(`DELETE FROM lineage`); err != nil {
		t.Fatal(err)
	}
	raw.Close()
	for _, args := range [][]string{{"state", "list"}, {"plan", "cfg"}, {"apply", "plan.json"}} {
		_, errOut, code := h.run(nil, args...)
		if code != 1 || !strings.Contains(errOut, "state_damaged") {
			t.Errorf("nlx %v on a state without its lineage: exit %d: %s", args, code, errOut)
		}
	}
}
