package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/nlx-dev/nlx/approval"
	"github.com/nlx-dev/nlx/internal/testgen"
	"github.com/nlx-dev/nlx/internal/testtool"
	"github.com/nlx-dev/nlx/plan"
	"github.com/nlx-dev/nlx/reconcile"
)

// gitops is the world of examples/gitops: a host (its own state), a CI
// machine (no state at all: NLX_STATE names nothing), reviewers with keys,
// and a real docker-registry between them.
type gitops struct {
	t    *testing.T
	dir  string // the config repository's checkout
	keys string // internal/testkeys
	reg  *testtool.RegistryProc
	repo string // REGISTRY/team/pi
	host []string
	ci   []string
}

func newGitops(t *testing.T) *gitops {
	t.Helper()
	reg := testtool.RegistryAt(t)
	g := &gitops{t: t, dir: filepath.Join(t.TempDir(), "repo"), reg: reg, repo: reg.Addr + "/team/pi"}
	keys, err := filepath.Abs("../../internal/testkeys")
	if err != nil {
		t.Fatal(err)
	}
	g.keys = keys
	if err := testgen.CopyTree("../../examples/gitops", g.dir); err != nil {
		t.Fatal(err)
	}
	hostDir := t.TempDir()
	base := []string{"NLX_FAULT=", "NLX_ACTOR=", "GOWORK=off", "NLX_REGISTRY=" + g.repo}
	g.host = append(base, "NLX_STATE="+filepath.Join(hostDir, "state.db"), "NLX_WORKSPACE_ROOT="+filepath.Join(hostDir, "workspaces"))
	g.ci = append(base, "NLX_STATE="+filepath.Join(t.TempDir(), "no-state-here", "state.db"))
	// The reviewers' keys, as the operators would have put them in the
	// config before the host first applied it.
	g.identities(filepath.Join(g.dir, "config"), "alice", "carol")
	return g
}

// identities gives actors their test keys in dir's config.
func (g *gitops) identities(dir string, actors ...string) {
	var b strings.Builder
	b.WriteString("package gitops\n\nhost: actors: {\n")
	for _, a := range actors {
		pub, err := os.ReadFile(filepath.Join(g.keys, a+".pub"))
		if err != nil {
			g.t.Fatal(err)
		}
		fmt.Fprintf(&b, "\t%s: keys: [%q]\n", a, strings.TrimSpace(string(pub)))
	}
	b.WriteString("}\n")
	if err := os.WriteFile(filepath.Join(dir, "zz_identities.cue"), []byte(b.String()), 0o644); err != nil {
		g.t.Fatal(err)
	}
}

// nlx runs the built nlx in the checkout with env and wants exit code want.
func (g *gitops) nlx(env []string, want int, args ...string) string {
	g.t.Helper()
	cmd := exec.Command(filepath.Join(binDir, "nlx"), args...)
	cmd.Dir = g.dir
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		g.t.Fatal(err)
	}
	if code != want {
		g.t.Fatalf("nlx %s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, want, stdout.String(), stderr.String())
	}
	return stdout.String() + stderr.String()
}

// edit replaces old with new in the checkout's config.
func (g *gitops) edit(old, new string) {
	g.t.Helper()
	path := filepath.Join(g.dir, "config", "host.cue")
	data, err := os.ReadFile(path)
	if err != nil || !strings.Contains(string(data), old) {
		g.t.Fatalf("edit %s: %v (or no %q)", path, err, old)
	}
	if err := os.WriteFile(path, []byte(strings.Replace(string(data), old, new, 1)), 0o644); err != nil {
		g.t.Fatal(err)
	}
}

// bootstrap applies the config on the host and publishes its state.
func (g *gitops) bootstrap() {
	g.t.Helper()
	g.nlx(g.host, 0, "apply", "config", "--yes")
	g.nlx(g.host, 0, "state", "publish", g.repo+"/state:latest")
}

// follow is one look of the host at plan:main.
func (g *gitops) follow(want int) followReport {
	g.t.Helper()
	out := g.nlx(g.host, want, "follow", g.repo+"/plan:main", "--once", "-o", "json")
	var r followReport
	if err := json.Unmarshal([]byte(out[:strings.IndexByte(out, '\n')+1]), &r); err != nil {
		g.t.Fatalf("follow -o json: %v\n%s", err, out)
	}
	return r
}

// workflow is the part of a GitHub Actions workflow this test runs.
type workflow struct {
	Env  map[string]string `yaml:"env"`
	Jobs map[string]struct {
		Steps []struct {
			ID   string            `yaml:"id"`
			Uses string            `yaml:"uses"`
			Run  string            `yaml:"run"`
			Env  map[string]string `yaml:"env"`
		} `yaml:"steps"`
	} `yaml:"jobs"`
}

// needsGitHub are the steps that talk to GitHub or install from it; the
// test has nlx on PATH already and reads the comment from plan.md.
var needsGitHub = map[string]bool{"install": true, "comment": true}

// runJob runs the run: steps of job, in order, as GitHub's runner would
// (bash -e -o pipefail, the workflow's and the step's env, the checkout as
// working directory), with event giving the ${{ }} expressions.
func (g *gitops) runJob(job string, event map[string]string) {
	g.t.Helper()
	data, err := os.ReadFile(filepath.Join(g.dir, ".github", "workflows", "nlx.yml"))
	if err != nil {
		g.t.Fatal(err)
	}
	var wf workflow
	if err := yaml.Unmarshal(data, &wf); err != nil {
		g.t.Fatal(err)
	}
	j, ok := wf.Jobs[job]
	if !ok || len(j.Steps) == 0 {
		g.t.Fatalf("the workflow has no job %s with steps", job)
	}
	expr := regexp.MustCompile(`\$\{\{\s*([^}]+?)\s*\}\}`)
	expand := func(v string) string {
		return expr.ReplaceAllStringFunc(v, func(m string) string {
			k := expr.FindStringSubmatch(m)[1]
			val, ok := event[k]
			if !ok {
				g.t.Fatalf("the workflow uses ${{ %s }}, which the test does not provide", k)
			}
			return val
		})
	}
	ran := 0
	for _, s := range j.Steps {
		if s.Run == "" || needsGitHub[s.ID] {
			continue
		}
		cmd := exec.Command("bash", "-e", "-o", "pipefail", "-c", s.Run)
		cmd.Dir = g.dir
		cmd.Env = append(os.Environ(), g.ci...)
		cmd.Env = append(cmd.Env, "PATH="+binDir+string(os.PathListSeparator)+os.Getenv("PATH"))
		for k := range wf.Env {
			if k != "NLX_REGISTRY" { // the test's registry stands in for the example's
				cmd.Env = append(cmd.Env, k+"="+expand(wf.Env[k]))
			}
		}
		for k, v := range s.Env {
			cmd.Env = append(cmd.Env, k+"="+expand(v))
		}
		if out, err := cmd.CombinedOutput(); err != nil {
			g.t.Fatalf("workflow job %s step %s: %v\n%s", job, s.ID, err, out)
		}
		ran++
	}
	if ran == 0 {
		g.t.Fatalf("workflow job %s ran no step", job)
	}
}

// approveCommands are the nlx approve --sign commands of the plan comment.
func (g *gitops) approveCommands() []string {
	data, err := os.ReadFile(filepath.Join(g.dir, "plan.md"))
	if err != nil {
		g.t.Fatal(err)
	}
	var out []string
	for _, m := range regexp.MustCompile(`nlx approve [^\n`+"`"+`]*--sign[^\n`+"`"+`]*`).FindAllString(string(data), -1) {
		out = append(out, m)
	}
	return out
}

// sign runs, as reviewer, an approve command from the comment with the
// reviewer's key, name and reason put in.
func (g *gitops) sign(command, reviewer, why string, want int) string {
	g.t.Helper()
	args := strings.Fields(command)[1:]
	for i, a := range args {
		switch a {
		case "~/.ssh/id_ed25519":
			args[i] = filepath.Join(g.keys, reviewer)
		case "NAME":
			args[i] = reviewer
		case "TEXT":
			args[i] = why
		}
	}
	return g.nlx(g.ci, want, args...)
}

// TestGitopsWorkflow runs the example's pull-request loop for real: the
// host publishes its state, the workflow's run: steps plan against it and
// push the plan, a reviewer signs with her key, the merge moves the tag,
// and the host follows.
func TestGitopsWorkflow(t *testing.T) {
	g := newGitops(t)
	g.bootstrap()
	if r := g.follow(1); r.Status != FollowNone {
		t.Fatalf("before any merge: %+v", r)
	}

	// The pull request: a permission widening in the team workspace.
	g.edit(`policy:    "read_only"`, `policy:    "workspace_write"`)
	event := map[string]string{"github.event.pull_request.number": "7", "github.event.pull_request.user.login": "bob", "github.token": "none"}
	g.runJob("plan", event)
	cmds := g.approveCommands()
	if len(cmds) != 1 || !strings.Contains(cmds[0], g.repo+"/plan@sha256:") || !strings.Contains(cmds[0], "--change workspace.platform") {
		t.Fatalf("the plan comment's approve commands: %q", cmds)
	}
	var p plan.Plan
	data, err := os.ReadFile(filepath.Join(g.dir, "plan.json"))
	if err != nil || json.Unmarshal(data, &p) != nil {
		t.Fatalf("plan.json: %v", err)
	}
	if p.Actor != "bob" || p.State.Serial != 1 || p.State.Basis == "" {
		t.Fatalf("the CI plan: actor %q, state %+v", p.Actor, p.State)
	}

	// bob (the author, and only a member) cannot approve; carol can.
	g.sign(cmds[0], "carol", "the platform team writes its workspace now", 0)

	// Merged before the tag moves: nothing to follow yet.
	if r := g.follow(1); r.Status != FollowNone {
		t.Fatalf("before the promote: %+v", r)
	}
	g.runJob("promote", event)
	r := g.follow(0)
	if r.Status != FollowApplied || r.Serial != 2 || r.PlanHash != p.PlanHash {
		t.Fatalf("follow after the merge: %+v", r)
	}
	out := g.nlx(g.host, 0, "state", "show", "workspace.platform", "-o", "json")
	if !strings.Contains(out, `"policy":"workspace_write"`) {
		t.Fatalf("the host's workspace after the follow:\n%s", out)
	}
	// Never twice, also after a restart (a new process, the same state).
	if r := g.follow(0); r.Status != FollowDone || r.Serial != 2 {
		t.Fatalf("second follow: %+v", r)
	}
	history := g.nlx(g.host, 0, "state", "history", "-o", "json")
	if n := strings.Count(history, p.PlanHash); n != 1 {
		t.Fatalf("the plan appears %d times in the history, want once:\n%s", n, history)
	}
}

// TestGitopsRefusals: what reaches the host through the registry is
// evidence, checked against the applied state; each way it can be wrong is
// refused with its code and applies nothing.
func TestGitopsRefusals(t *testing.T) {
	g := newGitops(t)
	g.bootstrap()
	g.edit(`policy:    "read_only"`, `policy:    "workspace_write"`)
	pushed := func(tag string, extra ...string) (string, *plan.Plan) {
		out := g.nlx(g.ci, 0, append([]string{"plan", "config", "--state-from", g.repo + "/state:latest", "--actor", "bob",
			"--out", "plan-" + tag + ".json", "--push", g.repo + "/plan:" + tag}, extra...)...)
		ref := regexp.MustCompile(`Pushed the plan to (\S+)`).FindStringSubmatch(out)
		p, err := plan.ReadFile(filepath.Join(g.dir, "plan-"+tag+".json"))
		if ref == nil || err != nil {
			t.Fatalf("push: %v\n%s", err, out)
		}
		return ref[1], p
	}
	ref, p := pushed("pr-1")
	serial := func() string { return g.nlx(g.host, 0, "state", "list", "-o", "json") }
	before := serial()
	refused := func(code string, args ...string) {
		t.Helper()
		out := g.nlx(g.host, 3, args...)
		if !strings.Contains(out, code) {
			t.Fatalf("nlx %s: want %s:\n%s", strings.Join(args, " "), code, out)
		}
		if serial() != before {
			t.Fatalf("nlx %s changed the state", strings.Join(args, " "))
		}
	}
	signInto := func(dir, key, actor string, extra ...string) {
		t.Helper()
		g.nlx(g.ci, 0, append([]string{"approve", "plan-pr-1.json", "--sign", "--key", filepath.Join(g.keys, key), "--actor", actor,
			"--reason", "ok", "--out", dir}, extra...)...)
	}

	// No approval at all.
	refused("approval_missing", "apply", ref)
	// A key that is in no identity of the applied state, signing as carol.
	signInto("dave", "dave", "carol")
	refused("approval_key_unknown", "apply", "plan-pr-1.json", "--approvals", "dave")
	// A key that only the plan being approved would add.
	g.identities(filepath.Join(g.dir, "config"), "alice", "carol", "dave")
	_, added := pushed("pr-2")
	if !strings.Contains(string(mustJSON(t, added)), "actor dave gets an identity") {
		t.Fatalf("adding dave's key is not permission_widening")
	}
	g.nlx(g.ci, 0, "approve", "plan-pr-2.json", "--sign", "--key", filepath.Join(g.keys, "dave"), "--actor", "dave", "--reason", "me", "--out", "dave2")
	refused("approval_key_unknown", "apply", "plan-pr-2.json", "--approvals", "dave2")
	// An approval of another plan is ignored, and said so.
	signInto("other", "carol", "carol")
	refused("of other plans were ignored", "apply", "plan-pr-2.json", "--approvals", "other")
	g.identities(filepath.Join(g.dir, "config"), "alice", "carol")
	// Of this plan, but a change or risk it does not have.
	signer, err := approval.LoadSigner(filepath.Join(g.keys, "carol"))
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range []approval.Statement{
		{PlanHash: p.PlanHash, Address: "job.nightly-digest", Risk: plan.RiskDestructive},
		{PlanHash: p.PlanHash, Address: "workspace.platform", Risk: plan.RiskDestructive},
	} {
		st.Version, st.Actor, st.Reason = approval.StatementVersion, "carol", "crafted"
		st.ExpiresAt = time.Now().Add(time.Hour).UTC().Format(approval.ExpiresLayout)
		s, err := approval.Sign(st, signer)
		if err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(g.dir, "crafted-"+string(st.Risk)+"-"+st.Address)
		if _, err := approval.WriteFile(dir, s); err != nil {
			t.Fatal(err)
		}
		refused("approval_mismatch", "apply", "plan-pr-1.json", "--approvals", dir)
	}
	// Expired.
	signInto("expired", "carol", "carol", "--expires", "1s")
	time.Sleep(1100 * time.Millisecond)
	refused("approval_expired", "apply", "plan-pr-1.json", "--approvals", "expired")
	// Signed by the plan's author under the two-person rule (alice is an
	// operator; she authors this one).
	g.nlx(g.ci, 0, "plan", "config", "--state-from", g.repo+"/state:latest", "--actor", "alice", "--out", "own.json")
	g.nlx(g.ci, 0, "approve", "own.json", "--sign", "--key", filepath.Join(g.keys, "alice"), "--actor", "alice", "--reason", "mine", "--out", "own")
	refused("two_person_rule", "apply", "own.json", "--approvals", "own")
	// A tampered signature file does not verify.
	signInto("tampered", "carol", "carol")
	files, _ := filepath.Glob(filepath.Join(g.dir, "tampered", "*.json"))
	data, _ := os.ReadFile(files[0])
	os.WriteFile(files[0], []byte(strings.Replace(string(data), `"reason":"ok"`, `"reason":"ko"`, 1)), 0o644)
	refused("approval_signature_invalid", "apply", "plan-pr-1.json", "--approvals", "tampered")

	// A snapshot edited after publishing (basis recomputed, so it reads as
	// whole): the plan made from it is refused by the host.
	g.nlx(g.host, 0, "state", "export", "--out", filepath.Join(g.dir, "state.json"))
	raw, err := os.ReadFile(filepath.Join(g.dir, "state.json"))
	if err != nil {
		t.Fatal(err)
	}
	snap, _, err := reconcile.DecodeSnapshot(raw)
	if err != nil {
		t.Fatal(err)
	}
	for i := range snap.Resources {
		if snap.Resources[i].Address() == "workspace.platform" {
			snap.Resources[i].Spec = []byte(strings.Replace(string(snap.Resources[i].Spec), `"bob":"member"`, `"bob":"admin"`, 1))
			snap.Resources[i].Hash = reconcile.HashSpec(snap.Resources[i].Spec)
		}
	}
	doctored, _, err := reconcile.EncodeSnapshot(snap)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(g.dir, "doctored.json"), doctored, 0o644)
	g.nlx(g.ci, 0, "plan", "config", "--state-from", "doctored.json", "--actor", "ci", "--out", "doctored-plan.json")
	if out := g.nlx(g.host, 1, "apply", "doctored-plan.json", "--config", "config"); !strings.Contains(out, "state_basis_mismatch") {
		t.Fatalf("the plan of a doctored snapshot: %s", out)
	}
	// Edited without recomputing the basis, it is not even read.
	os.WriteFile(filepath.Join(g.dir, "naive.json"), []byte(strings.Replace(string(raw), `"bob":"member"`, `"bob":"admin"`, 1)), 0o644)
	if out := g.nlx(g.ci, 1, "plan", "config", "--state-from", "naive.json"); !strings.Contains(out, "not an nlx state snapshot") {
		t.Fatalf("a snapshot edited in place: %s", out)
	}

	// A plan made from an older published serial: the host moved on.
	signInto("good", "carol", "carol")
	g.nlx(g.host, 0, "apply", "plan-pr-1.json", "--approvals", "good")
	stale := g.nlx(g.host, 1, "apply", "plan-pr-1.json", "--approvals", "good") // the same approval again
	if !strings.Contains(stale, "stale_plan") {
		t.Fatalf("applying the plan again: %s", stale)
	}
	g.nlx(g.ci, 0, "promote", ref, g.repo+"/plan:main")
	if r := g.follow(0); r.Status != FollowDone {
		t.Fatalf("follow of the applied plan: %+v", r)
	}
	g.edit(`cpu: 1`, `cpu: 2`)
	old, _ := pushed("pr-3") // from state:latest, still serial 1
	g.nlx(g.ci, 0, "promote", old, g.repo+"/plan:main")
	if r := g.follow(1); r.Status != FollowStale || r.Code != "stale_plan" {
		t.Fatalf("follow of a plan from an older published serial: %+v", r)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestFollowSurvivesOutage: a following host reports the registry gone,
// keeps looking, and applies the plan once it is back, exactly once.
func TestFollowSurvivesOutage(t *testing.T) {
	g := newGitops(t)
	g.bootstrap()
	g.edit(`cpu: 1`, `cpu: 2`) // no risk: applies without approvals
	out := g.nlx(g.ci, 0, "plan", "config", "--state-from", g.repo+"/state:latest", "--actor", "bob", "--push", g.repo+"/plan:main")
	if !strings.Contains(out, "Pushed the plan") {
		t.Fatal(out)
	}
	g.reg.Stop()
	if r := g.follow(1); r.Status != FollowUnreachable {
		t.Fatalf("follow with the registry down: %+v", r)
	}
	// The loop, started while the registry is down, applies once it is up.
	cmd := exec.Command(filepath.Join(binDir, "nlx"), "follow", g.repo+"/plan:main", "--interval", "100ms", "-o", "json")
	cmd.Dir = g.dir
	cmd.Env = append(os.Environ(), g.host...)
	outFile := filepath.Join(t.TempDir(), "follow.jsonl")
	f, err := os.Create(outFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd.Stdout = f
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	read := func() string { b, _ := os.ReadFile(outFile); return string(b) }
	time.Sleep(500 * time.Millisecond)
	g.reg.Start()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(read(), `"status":"already_applied"`) {
		if time.Now().After(deadline) {
			t.Fatalf("follow never applied after the registry came back:\n%s", read())
		}
		time.Sleep(100 * time.Millisecond)
	}
	cmd.Process.Kill()
	cmd.Wait()
	lines := read()
	if !strings.Contains(lines, `"status":"unreachable"`) || strings.Count(lines, `"status":"applied"`) != 1 {
		t.Fatalf("follow's reports:\n%s", lines)
	}
}

// TestServePublishesAndFollows: nlx serve --publish keeps the published
// state current and --follow applies what is promoted, in the scheduler's
// process.
func TestServePublishesAndFollows(t *testing.T) {
	g := newGitops(t)
	g.nlx(g.host, 0, "apply", "config", "--yes")
	cmd := exec.Command(filepath.Join(binDir, "nlx"), "serve", "--publish", g.repo+"/state:latest", "--follow", g.repo+"/plan:main", "--follow-interval", "100ms")
	cmd.Dir = g.dir
	cmd.Env = append(os.Environ(), g.host...)
	logFile := filepath.Join(t.TempDir(), "serve.log")
	f, err := os.Create(logFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Signal(os.Interrupt); cmd.Wait() }()
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for !ok() {
			if time.Now().After(deadline) {
				log, _ := os.ReadFile(logFile)
				t.Fatalf("%s never happened; serve said:\n%s", what, log)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	published := func(serial string) func() bool {
		return func() bool {
			log, _ := os.ReadFile(logFile)
			return strings.Contains(string(log), "published state serial "+serial)
		}
	}
	waitFor("the first publish", published("1"))
	g.edit(`policy:    "read_only"`, `policy:    "workspace_write"`)
	out := g.nlx(g.ci, 0, "plan", "config", "--state-from", g.repo+"/state:latest", "--actor", "bob", "--push", g.repo+"/plan:pr-9")
	ref := regexp.MustCompile(`Pushed the plan to (\S+)`).FindStringSubmatch(out)
	g.nlx(g.ci, 0, "promote", g.repo+"/plan:pr-9", g.repo+"/plan:main")
	logged := func(s string) func() bool {
		return func() bool { log, _ := os.ReadFile(logFile); return strings.Contains(string(log), s) }
	}
	waitFor("the follow's report of missing approvals", logged(": awaiting_approvals (approval_missing)"))
	// The approval arrives while serve follows: the next look applies.
	g.nlx(g.ci, 0, "approve", ref[1], "--sign", "--key", filepath.Join(g.keys, "carol"), "--push", "--actor", "carol", "--reason", "ok")
	waitFor("the follow's apply and the publish after it", published("2"))
	if log, _ := os.ReadFile(logFile); strings.Count(string(log), ": applied, state serial 2") != 1 {
		t.Fatalf("serve applied the plan other than once:\n%s", log)
	}
	// CI's next plan is made from serial 2 and changes nothing.
	out = g.nlx(g.ci, 0, "plan", "config", "--state-from", g.repo+"/state:latest", "-o", "json")
	if !strings.Contains(out, `"serial":2`) || !strings.Contains(out, `"add":0,"change":0,"destroy":0`) {
		t.Fatalf("the plan after the follow:\n%s", out)
	}
}
