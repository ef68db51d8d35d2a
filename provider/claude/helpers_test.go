package claude

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nlx-dev/nlx/internal/fakemodel"
	"github.com/nlx-dev/nlx/internal/testtool"
	"github.com/nlx-dev/nlx/provider"
	"github.com/nlx-dev/nlx/provider/providertest"
)

// recorder is the conformance suite's Handler; allow and deny decide.
type recorder = providertest.Recorder

var allow, deny = providertest.Allow, providertest.Deny

// direction is who wrote a transcript line.
type direction string

const (
	fromClaude direction = "claude"
	fromNLX    direction = "nlx"
	cancelHere direction = "cancel" // replay: the turn's ctx ends here
	eofHere    direction = "eof"    // replay: Claude Code's output ends here
)

// entry is one line of a transcript.
type entry struct {
	Dir direction       `json:"dir"`
	Msg json.RawMessage `json:"msg,omitempty"`
	// Subset, on an nlx line, lets the adapter's line have more members.
	Subset bool `json:"subset,omitempty"`
	// AfterText, on a cancel line, waits for the text events to end so.
	AfterText string `json:"after_text,omitempty"`

	at time.Time // when it was seen (recordings)
}

// transcript records both directions of a session, line by line.
type transcript struct {
	mu      sync.Mutex
	entries []entry
}

func (tr *transcript) add(dir direction, line []byte) {
	line = bytes.TrimSpace(line)
	if len(line) == 0 {
		return
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.entries = append(tr.entries, entry{Dir: dir, Msg: append(json.RawMessage(nil), line...), at: time.Now()})
}

// when is when the first line from dir containing s was seen.
func (tr *transcript) when(dir direction, s string) time.Time {
	for _, e := range tr.Entries() {
		if e.Dir == dir && bytes.Contains(e.Msg, []byte(s)) {
			return e.at
		}
	}
	return time.Time{}
}

func (tr *transcript) Entries() []entry {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return append([]entry(nil), tr.entries...)
}

// sent returns the lines nlx sent, decoded.
func (tr *transcript) sent() []map[string]any {
	var out []map[string]any
	for _, e := range tr.Entries() {
		if e.Dir != fromNLX {
			continue
		}
		var m map[string]any
		if json.Unmarshal(e.Msg, &m) == nil {
			out = append(out, m)
		}
	}
	return out
}

// testSecret is the API key the tests give Claude Code.
const testSecret = "sk-nlx-test-secret"

// claudeProc is a real claude, driven directly (no sandbox).
type claudeProc struct {
	cmd    *exec.Cmd
	pipes  provider.Pipes
	tr     *transcript
	stderr *bytes.Buffer
	config string // CLAUDE_CONFIG_DIR
	home   string
	cwd    string
	start  time.Time
	waited bool
}

// env is a claude's environment: PATH, HOME and CLAUDE_CONFIG_DIR, the
// fake model and the key, and the adapter's variables.
func claudeEnv(a *Adapter, fake *fakemodel.Server, home, config string, env map[string]string) []string {
	out := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "CLAUDE_CONFIG_DIR=" + config,
		"ANTHROPIC_API_KEY=" + testSecret, "ANTHROPIC_BASE_URL=" + fake.URL(), "LANG=C.UTF-8"}
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	return out
}

// startClaude starts the pinned claude against the fake model with config
// as CLAUDE_CONFIG_DIR and cwd as its working directory (new ones when
// ""), the registration's command being just the program and the
// adapter's Args for turn added.
func startClaude(t testing.TB, fake *fakemodel.Server, config, cwd string, turn provider.Turn) *claudeProc {
	t.Helper()
	return startClaudeCmd(t, fake, config, cwd, nil, turn)
}

// startClaudeWith is startClaude with the registration's command
// carrying flags of its own.
func startClaudeWith(t testing.TB, fake *fakemodel.Server, flags []string, turn provider.Turn) *claudeProc {
	t.Helper()
	return startClaudeCmd(t, fake, "", "", flags, turn)
}

func startClaudeCmd(t testing.TB, fake *fakemodel.Server, config, cwd string, flags []string, turn provider.Turn) *claudeProc {
	t.Helper()
	bin := testtool.NeedProvider(t, "claude")
	if config == "" {
		config = t.TempDir()
	}
	if cwd == "" {
		cwd = t.TempDir()
	}
	if turn.Cwd == "" {
		turn.Cwd = cwd
	}
	home := t.TempDir()
	a := &Adapter{}
	args, env := a.Args(turn)
	cmd := exec.Command(bin, append(append([]string(nil), flags...), args...)...)
	cmd.Dir = cwd
	cmd.Env = claudeEnv(a, fake, home, config, env)
	p := &claudeProc{cmd: cmd, tr: &transcript{}, stderr: &bytes.Buffer{}, config: config, home: home, cwd: cwd}
	cmd.Stderr = p.stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p.start = time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p.pipes = providertest.Tap(stdin, stdout, func(b []byte) { p.tr.add(fromNLX, b) }, func(b []byte) { p.tr.add(fromClaude, b) })
	t.Cleanup(func() {
		if !p.waited {
			p.cmd.Process.Kill()
			p.cmd.Wait()
		}
	})
	return p
}

// run runs turn through the adapter on p (Cwd defaults to p's).
func (p *claudeProc) run(ctx context.Context, turn provider.Turn, h provider.Handler) (provider.Result, error) {
	if turn.Cwd == "" {
		turn.Cwd = p.cwd
	}
	return (&Adapter{}).Run(ctx, p.pipes, turn, h)
}

// wait waits for the program to exit after Run (Run closes stdin); a
// non-zero exit is what wantExit says (Claude Code exits 1 after a failed
// or interrupted turn).
func (p *claudeProc) wait(t testing.TB, wantFail bool) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case err := <-done:
		p.waited = true
		var exit *exec.ExitError
		switch {
		case err == nil && wantFail:
			t.Errorf("claude exited 0, want a failure")
		case err != nil && !(wantFail && errors.As(err, &exit)):
			t.Errorf("claude: %v\nstderr:\n%s", err, clip(p.stderr.String(), 4000))
		}
	case <-time.After(10 * time.Second):
		p.cmd.Process.Kill()
		<-done
		p.waited = true
		t.Errorf("claude did not exit within 10s of its stdin closing")
	}
	p.record(t)
}

// record saves the transcript where NLX_CLAUDE_RECORD names a directory,
// normalized (to make fixtures from: see testdata/transcripts/README).
func (p *claudeProc) record(t testing.TB) {
	t.Helper()
	dir := os.Getenv("NLX_CLAUDE_RECORD")
	if dir == "" {
		return
	}
	var b bytes.Buffer
	for _, e := range p.tr.Entries() {
		e.Msg = normalize(e.Msg, map[string]string{p.cwd: "/workspace", p.config: "/claude-config", p.home: "/home"})
		line, _ := json.Marshal(e)
		b.Write(line)
		b.WriteByte('\n')
	}
	name := strings.NewReplacer("/", "-", " ", "_").Replace(t.Name()) + ".jsonl"
	if err := os.WriteFile(filepath.Join(dir, name), b.Bytes(), 0o644); err != nil {
		t.Errorf("record: %v", err)
	}
}

// initKept are the members of the init line a fixture keeps (the rest is
// kilobytes of slash commands, skills, plugins and capabilities).
var initKept = []string{"type", "subtype", "cwd", "session_id", "tools", "mcp_servers", "model", "permissionMode",
	"apiKeySource", "claude_code_version", "uuid"}

// normalize replaces the run's paths in a line and trims its init line.
func normalize(msg json.RawMessage, paths map[string]string) json.RawMessage {
	s := string(msg)
	for from, to := range paths {
		s = strings.ReplaceAll(s, from, to)
	}
	var m map[string]json.RawMessage
	if json.Unmarshal([]byte(s), &m) == nil && string(m["type"]) == `"system"` && string(m["subtype"]) == `"init"` {
		kept := map[string]json.RawMessage{}
		for _, k := range initKept {
			if v, ok := m[k]; ok {
				kept[k] = v
			}
		}
		b, _ := json.Marshal(kept)
		return b
	}
	return json.RawMessage(s)
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}

// readTranscript reads a JSONL file of entries (# lines are comments).
func readTranscript(t testing.TB, path string) []entry {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []entry
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for n := 1; sc.Scan(); n++ {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 || bytes.HasPrefix(bytes.TrimSpace(sc.Bytes()), []byte("#")) {
			continue
		}
		var e entry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("%s:%d: %v", path, n, err)
		}
		out = append(out, e)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// sameJSON compares two JSON texts as values; with subset, got may have
// more object members than want.
func sameJSON(got string, want []byte, subset bool) error {
	var g, w any
	if err := json.Unmarshal([]byte(got), &g); err != nil {
		return fmt.Errorf("not JSON: %w", err)
	}
	if err := json.Unmarshal(want, &w); err != nil {
		return fmt.Errorf("the fixture's line is not JSON: %w", err)
	}
	if subset && contains(g, w) || !subset && reflect.DeepEqual(g, w) {
		return nil
	}
	return errors.New("different")
}

// contains reports whether got has every member of want, recursively.
func contains(got, want any) bool {
	wm, ok := want.(map[string]any)
	if !ok {
		return reflect.DeepEqual(got, want)
	}
	gm, ok := got.(map[string]any)
	if !ok {
		return false
	}
	for k, v := range wm {
		if gv, ok := gm[k]; !ok || !contains(gv, v) {
			return false
		}
	}
	return true
}
