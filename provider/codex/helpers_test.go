package codex

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
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

func (tr *transcript) Entries() []entry {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return append([]entry(nil), tr.entries...)
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

// sent returns the messages nlx sent.
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

// sentMethods lists the methods of the requests and notifications nlx
// sent, in order.
func (tr *transcript) sentMethods() []string {
	var out []string
	for _, m := range tr.sent() {
		if s, ok := m["method"].(string); ok {
			out = append(out, s)
		}
	}
	return out
}

// codexProc is a real `codex app-server`, driven directly (no sandbox).
type codexProc struct {
	cmd    *exec.Cmd
	pipes  provider.Pipes
	tr     *transcript
	stderr *bytes.Buffer
	home   string
	cwd    string
	start  time.Time
}

// startCodex starts the pinned codex app-server against the fake model,
// with home as CODEX_HOME (a new one when "") and cwd as its working
// directory, the adapter's Args for t added.
func startCodex(t testing.TB, fake *fakemodel.Server, home, cwd string, turn provider.Turn) *codexProc {
	t.Helper()
	return startProgram(t, testtool.NeedProvider(t, "codex"), fake, home, cwd, turn)
}

// startProgram starts bin (codex, or the stand-in) as startCodex does.
func startProgram(t testing.TB, bin string, fake *fakemodel.Server, home, cwd string, turn provider.Turn) *codexProc {
	t.Helper()
	if home == "" {
		home = t.TempDir()
	}
	extra, env := (&Adapter{}).Args(turn)
	args := append(append([]string{"app-server"}, FakeModelArgs(fake.URL())...), extra...)
	cmd := exec.Command(bin, args...)
	cmd.Dir = cwd
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "CODEX_HOME=" + home,
		"OPENAI_API_KEY=" + testSecret, "LANG=C.UTF-8"}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	p := &codexProc{cmd: cmd, tr: &transcript{}, stderr: &bytes.Buffer{}, home: home, cwd: cwd}
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
	p.pipes = providertest.Tap(stdin, stdout, func(b []byte) { p.tr.add(fromNLX, b) }, func(b []byte) { p.tr.add(fromCodex, b) })
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			p.cmd.Process.Kill()
			p.cmd.Wait()
		}
	})
	return p
}

// testSecret is the API key the tests give Codex.
const testSecret = "sk-nlx-test-secret"

// wait waits for the program to exit after Run (Run closes stdin) and
// checks what nlx sent against the schema.
func (p *codexProc) wait(t testing.TB) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("codex app-server: %v\nstderr:\n%s", err, clip(p.stderr.String(), 4000))
		}
	case <-time.After(10 * time.Second):
		p.cmd.Process.Kill()
		<-done
		t.Errorf("codex app-server did not exit within 10s of its stdin closing")
	}
	p.check(t)
}

// check validates the transcript against the schema, and saves it where
// NLX_CODEX_RECORD names a directory (to make fixtures from).
func (p *codexProc) check(t testing.TB) {
	t.Helper()
	entries := p.tr.Entries()
	// What Codex sends is checked too: the schema is its own.
	for _, bad := range loadSchema(t).validateTranscript(entries) {
		t.Errorf("%s sent what the schema does not allow: %v", bad.dir, bad)
	}
	if dir := os.Getenv("NLX_CODEX_RECORD"); dir != "" {
		var b bytes.Buffer
		for _, e := range entries {
			line, _ := json.Marshal(e)
			b.Write(line)
			b.WriteByte('\n')
		}
		name := strings.NewReplacer("/", "-", " ", "_").Replace(t.Name()) + ".jsonl"
		if err := os.WriteFile(filepath.Join(dir, name), b.Bytes(), 0o644); err != nil {
			t.Errorf("record: %v", err)
		}
	}
}

// readTranscript reads a JSONL file of entries.
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
