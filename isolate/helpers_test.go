package isolate

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nlx-dev/nlx/internal/testtool"
)

// fakeRecorder is an in-memory Recorder. RecordFunc, when set, replaces
// Record (to fail it, or to look at the process while it waits).
type fakeRecorder struct {
	RecordFunc func(ctx context.Context, id Identity) error

	mu       sync.Mutex
	live     map[string]Identity
	records  []Identity
	receipts map[string]Receipt
}

var _ Recorder = (*fakeRecorder)(nil)

func (f *fakeRecorder) Record(ctx context.Context, id Identity) error {
	if f.RecordFunc != nil {
		if err := f.RecordFunc(ctx, id); err != nil {
			return err
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.live == nil {
		f.live = map[string]Identity{}
	}
	if _, dup := f.live[id.LaunchID]; dup {
		return fmt.Errorf("launch %s recorded twice", id.LaunchID)
	}
	f.live[id.LaunchID] = id
	f.records = append(f.records, id)
	return nil
}

func (f *fakeRecorder) Receipt(ctx context.Context, launchID string, r Receipt) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.receipts == nil {
		f.receipts = map[string]Receipt{}
	}
	if _, dup := f.receipts[launchID]; dup {
		return fmt.Errorf("launch %s has a receipt already", launchID)
	}
	f.receipts[launchID] = r
	delete(f.live, launchID)
	return nil
}

// released checks that launchID got a receipt and its identity was released.
func (f *fakeRecorder) released(t testing.TB, launchID string) Receipt {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	r, ok := f.receipts[launchID]
	if !ok {
		t.Fatalf("no receipt for launch %s", launchID)
	}
	if _, live := f.live[launchID]; live {
		t.Fatalf("launch %s still recorded as running after its receipt", launchID)
	}
	return r
}

func (f *fakeRecorder) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.records)
}

// fixture is a host layout with two workspaces, two owners' credential
// homes and two teams' skills. It lives under /srv rather than the temp
// dir: a sandbox has its own /tmp, which would hide a leak of /tmp paths.
type fixture struct {
	base       string
	wsRoot, ws string // workspace root and workspace "alpha"
	other      string // workspace "beta" of another team
	credRoot   string
	aliceHome  string // "alice/claude", the selected home
	bobToken   string // credRoot/bob/codex/token
	skillRoot  string
	skills     []SkillMount // team-a's
	hostSecret string       // a host file outside every bind
	tmpSecret  string       // the same in the test's temp dir
}

const (
	aliceSecret = "alice-token-0d2f"
	bobSecret   = "bob-token-7c41"
	hostSecret  = "host-secret-93aa"
	teamASkill  = "team-a-lint-skill"
	teamBSkill  = "team-b-deploy-skill"
)

func newFixture(t testing.TB) *fixture {
	t.Helper()
	base, err := os.MkdirTemp("/srv", "nlx-isolate-test-")
	if err != nil {
		base = t.TempDir()
	} else {
		t.Cleanup(func() { os.RemoveAll(base) })
	}
	// The provider's user must reach what bubblewrap, running as it,
	// binds: searchable, not listable.
	for dir := base; dir != "/"; dir = filepath.Dir(dir) {
		if fi, err := os.Stat(dir); err == nil && fi.Mode().Perm()&0o001 == 0 {
			must(t, os.Chmod(dir, fi.Mode().Perm()|0o111))
		}
	}
	f := &fixture{
		base:      base,
		wsRoot:    filepath.Join(base, "workspaces"),
		credRoot:  filepath.Join(base, "credentials"),
		skillRoot: filepath.Join(base, "skills"),
	}
	f.ws = filepath.Join(f.wsRoot, "alpha")
	f.other = filepath.Join(f.wsRoot, "beta")
	f.aliceHome = "alice/claude"
	f.bobToken = filepath.Join(f.credRoot, "bob", "codex", "token")
	f.hostSecret = filepath.Join(base, "host-secret.txt")
	f.tmpSecret = filepath.Join(t.TempDir(), "tmp-secret.txt")
	files := map[string]string{
		filepath.Join(f.ws, "README"):                         "alpha\n",
		filepath.Join(f.ws, ".git", "HEAD"):                   "ref: refs/heads/main\n",
		filepath.Join(f.ws, ".nlx", "state"):                  "nlx\n",
		filepath.Join(f.other, "secret.txt"):                  hostSecret,
		filepath.Join(f.credRoot, "alice", "claude", "token"): aliceSecret,
		f.bobToken: bobSecret,
		filepath.Join(f.skillRoot, "team-a", "lint", "SKILL.md"):   teamASkill,
		filepath.Join(f.skillRoot, "team-b", "deploy", "SKILL.md"): teamBSkill,
		f.hostSecret: hostSecret,
		f.tmpSecret:  hostSecret,
	}
	for p, data := range files {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Symlinks a provider could have planted in its workspace.
	must(t, os.Symlink(f.bobToken, filepath.Join(f.ws, "link-abs")))
	rel, _ := filepath.Rel(f.ws, f.bobToken)
	must(t, os.Symlink(rel, filepath.Join(f.ws, "link-rel")))
	must(t, os.Symlink(filepath.Join(f.credRoot, "bob"), filepath.Join(f.ws, "link-dir")))
	f.skills = []SkillMount{{Name: "lint", Dir: filepath.Join(f.skillRoot, "team-a", "lint")}}
	// The provider's user owns its workspace and its credential home, as
	// nlx apply makes them; everything else stays root's.
	for _, dir := range []string{f.ws, filepath.Join(f.credRoot, f.aliceHome)} {
		must(t, filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
			if err != nil {
				return err
			}
			return os.Lchown(p, testUID, testUID)
		}))
	}
	return f
}

// testUID is the provider user of the tests: a number without a passwd
// entry, as the backends need none.
const testUID = 61234

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) request(b Backend, policy Policy, command ...string) Request {
	return Request{
		Workspace:      "alpha",
		WorkspaceRoot:  f.wsRoot,
		WorkspaceDir:   f.ws,
		Policy:         policy,
		Egress:         EgressNone,
		CredentialRoot: f.credRoot,
		CredentialHome: f.aliceHome,
		Skills:         f.skills,
		Limits:         Limits{MemoryBytes: 256 << 20, CPU: 1, Pids: 128},
		Command:        command,
		Env:            map[string]string{"CODEX_HOME": CredentialPath},
		HostEnv:        []string{"LANG=C.UTF-8", "SECRET_TOKEN=" + bobSecret, "TERM=dumb"},
		Backend:        b,
		User:           &User{UID: testUID, GID: testUID},
	}
}

// needBackend skips when b is not installed; an installed backend that
// does not work fails the test.
func needBackend(t testing.TB, b Backend) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("isolate tests need root: they create cgroups under /nlx")
	}
	testtool.Need(t, string(b))
	if err := b.Available(context.Background()); err != nil {
		t.Fatalf("%s is installed but does not work: %v", b, err)
	}
}

var backends = []Backend{Bwrap, Runc}

// result is one finished launch.
type result struct {
	out     string // stdout
	errOut  string // stderr
	code    int
	id      Identity
	receipt Receipt
}

// run launches req, waits for it, stops it and checks the receipt.
func run(t testing.TB, req Request) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rec := &fakeRecorder{}
	var out, errOut bytes.Buffer
	p, err := Launch(ctx, req, Options{Recorder: rec, Stdout: &out, Stderr: &errOut})
	if err != nil {
		t.Fatalf("launch: %v", err)
	}
	st, err := p.Wait(ctx)
	if err != nil {
		t.Fatalf("wait: %v", err)
	}
	r, err := Stop(ctx, p.Identity, time.Second, rec)
	if err != nil {
		t.Fatalf("stop: %v", err)
	}
	got := rec.released(t, p.Identity.LaunchID)
	if got != *r {
		t.Fatalf("recorded receipt %+v, Stop returned %+v", got, *r)
	}
	assertCgroupGone(t, p.Identity.Cgroup)
	return result{out: out.String(), errOut: errOut.String(), code: st.ExitCode(), id: p.Identity, receipt: *r}
}

// shells runs script through a shell started in the sandbox, and through
// a grandchild of it. "; exit" keeps each shell from exec'ing its last
// command, so the depth is real.
var shells = []struct {
	name string
	cmd  func(script string) []string
}{
	{"shell", func(s string) []string { return []string{"sh", "-c", s} }},
	{"grandchild", func(s string) []string {
		return []string{"sh", "-c", `sh -c 'sh -c "$1"; exit $?' inner "$1"; exit $?`, "outer", s}
	}},
}

// assertCgroupGone checks that path exists in no hierarchy.
func assertCgroupGone(t testing.TB, path string) {
	t.Helper()
	if path == "" {
		return
	}
	host, err := loadCgroupHost()
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range host.dirs(path) {
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("cgroup %s still exists (%v)", dir, err)
		}
	}
}

// cgroupFile reads a file of the launch cgroup in the hierarchy holding ctrl.
func cgroupFile(t testing.TB, path, ctrl, v1, v2 string) string {
	t.Helper()
	host, err := loadCgroupHost()
	if err != nil {
		t.Fatal(err)
	}
	dir, onV2 := host.dir(ctrl, path)
	name := v1
	if onV2 {
		name = v2
	}
	data, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(data))
}
