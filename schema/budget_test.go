package schema

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nlx-dev/nlx/internal/reason"
	"github.com/nlx-dev/nlx/internal/testgen"
)

// TestMain lets LoadBudgeted re-execute the test binary as its load child.
func TestMain(m *testing.M) {
	ServeChild()
	os.Exit(m.Run())
}

// testBudget is small enough that every bomb is refused in seconds.
var testBudget = Budget{Memory: 512 << 20, CPU: time.Minute, Timeout: 3 * time.Second, Stack: DefaultConfigStack}

// slowBudget is testBudget for a bomb that must exceed another limit than
// time: the race detector slows the stack bombs past 3 s.
func slowBudget() Budget {
	b := testBudget
	if raceDetector {
		b.Timeout = 30 * time.Second
	}
	return b
}

func writeBomb(t *testing.T, dir, kind, pkg string) string {
	t.Helper()
	file := filepath.Join(dir, "x.cue")
	if err := os.WriteFile(file, testgen.Bombs[kind](pkg), 0o644); err != nil {
		t.Fatal(err)
	}
	return file
}

// TestBombsRefused: each of these files crashed nlx with a Go stack trace
// (stack), exhausted the memory (double) or ran for minutes (comprehension,
// fields). Through LoadBudgeted each is one config_too_complex error, at
// the chain itself when depth is the cause, else at the file, in seconds.
func TestBombsRefused(t *testing.T) {
	tests := []struct {
		bomb  string
		alone bool   // the bomb is the whole config; else it joins testdata/base
		msg   string // says which budget ran out
		line  int    // 0: the file, at 1:1
		col   int
	}{
		{"plus", true, "an expression nested about 999999 deep", 3, 4},
		{"and", true, "an expression nested about 999999 deep", 3, 4},
		{"double", true, "memory budget of 512 MiB (NLX_CONFIG_MEMORY raises it)", 1, 1},
		{"comprehension", true, "time budget of 3s (NLX_CONFIG_TIMEOUT raises it)", 1, 1},
		{"fields", true, "time budget of 3s", 1, 1},
		// Among other files, the suspect is still found.
		{"plus", false, "an expression nested about 999999 deep", 3, 4},
		{"double", false, "memory budget", 1, 1},
		{"comprehension", false, "time budget", 1, 1},
	}
	for _, tt := range tests {
		name := tt.bomb
		if !tt.alone {
			name += " among other files"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dir, pkg := t.TempDir(), "x"
			if !tt.alone {
				dir, pkg = copyTree(t, "testdata/base"), "base"
			}
			file := writeBomb(t, dir, tt.bomb, pkg)
			b := testBudget
			if !strings.Contains(tt.msg, "time budget") {
				b = slowBudget()
			}
			start := time.Now()
			cfg, err := LoadBudgeted(context.Background(), dir, b)
			took := time.Since(start)
			var errs Errors
			if !errors.As(err, &errs) || len(errs) != 1 || cfg != nil {
				t.Fatalf("got %v (%T), want one config_too_complex error", err, err)
			}
			e := errs[0]
			if e.Code != reason.ConfigTooComplex || e.Pos.Filename != file || e.Pos.Line != tt.line || e.Pos.Column != tt.col {
				t.Errorf("got %s at %s:%d:%d, want %s at %s:%d:%d", e.Code, e.Pos.Filename, e.Pos.Line, e.Pos.Column, reason.ConfigTooComplex, file, tt.line, tt.col)
			}
			if !strings.Contains(e.Msg, tt.msg) {
				t.Errorf("message %q does not say %q", e.Msg, tt.msg)
			}
			if s := err.Error(); strings.Contains(s, "goroutine") || strings.Contains(s, "runtime.") {
				t.Errorf("the error carries the child's trace:\n%s", s)
			}
			if took > b.Timeout+10*time.Second {
				t.Errorf("refused after %v", took)
			}
		})
	}
}

// TestBudgetCPU: RLIMIT_CPU stops the child when the wall-clock deadline is
// further away, and is reported as the CPU budget.
func TestBudgetCPU(t *testing.T) {
	dir := t.TempDir()
	writeBomb(t, dir, "comprehension", "x")
	_, err := LoadBudgeted(context.Background(), dir, Budget{Memory: 1 << 30, CPU: time.Second, Timeout: time.Minute})
	var errs Errors
	if !errors.As(err, &errs) || len(errs) != 1 || errs[0].Code != reason.ConfigTooComplex || !strings.Contains(errs[0].Msg, "CPU budget of 1s (NLX_CONFIG_CPU raises it)") {
		t.Fatalf("got %v, want config_too_complex naming the CPU budget", err)
	}
}

// TestLoadBudgetedStopsWhenCancelled: SIGINT and SIGTERM were ignored while
// CUE evaluated; LoadBudgeted kills the child as soon as ctx ends.
func TestLoadBudgetedStopsWhenCancelled(t *testing.T) {
	dir := t.TempDir()
	writeBomb(t, dir, "comprehension", "x")
	ctx, cancel := context.WithCancelCause(context.Background())
	time.AfterFunc(300*time.Millisecond, func() { cancel(errors.New("terminated signal received")) })
	start := time.Now()
	_, err := LoadBudgeted(ctx, dir, Budget{Timeout: time.Minute})
	if took := time.Since(start); took > 1300*time.Millisecond {
		t.Errorf("returned %v after the start, 1 s after the cancellation", took)
	}
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "terminated signal received") {
		t.Errorf("got %v, want the cancellation and its cause", err)
	}
}

// TestLoadBudgetedMatchesLoad is the oracle: through the child or in process,
// a config loads to the same Config, or to the same errors at the same
// positions.
func TestLoadBudgetedMatchesLoad(t *testing.T) {
	fleet := filepath.Join(t.TempDir(), "fleet")
	if err := (testgen.Fleet{Workspaces: 40, JobsPerSpace: 3}).Write(fleet); err != nil {
		t.Fatal(err)
	}
	edited := func(edits ...edit) func(t *testing.T) string {
		return func(t *testing.T) string {
			dir := copyTree(t, "testdata/base")
			applyEdits(t, dir, edits)
			return dir
		}
	}
	fixed := func(dir string) func(*testing.T) string { return func(*testing.T) string { return dir } }
	tests := []struct {
		name string
		dir  func(t *testing.T) string
		ok   bool
	}{
		{"base", fixed("testdata/base"), true},
		{"pi-team example", fixed("../examples/pi-team"), true},
		{"fleet", fixed(fleet), true},
		{"through CUE unification", edited(edit{"connections.cue", `billing:        "api"`, `billing:        *"api" | "subscription"`}), true},
		{"schema and cross-reference errors", edited(
			edit{"connections.cue", `billing:        "api"`, `billing:        "monthly"`},
			edit{"jobs.cue", `connection: "core-codex"`, `connection: "nope"`},
		), false},
		{"raw secret", edited(edit{"connections.cue", `billing:        "api"`, `billing:        "api"
	secret:         "sk-live-abcdef"`}), false},
		{"syntax error", edited(edit{"jobs.cue", "", "jobs: {\n"}), false},
		{"no config", func(t *testing.T) string { return t.TempDir() }, false},
		{"no directory", fixed("testdata/missing"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := tt.dir(t)
			want, werr := Load(context.Background(), dir)
			got, gerr := LoadBudgeted(context.Background(), dir, DefaultBudget())
			if (werr == nil) != tt.ok {
				t.Fatalf("Load: %v, want ok %v", werr, tt.ok)
			}
			if !reflect.DeepEqual(gerr, werr) {
				t.Fatalf("errors differ:\nLoadBudgeted: %#v\nLoad:         %#v", gerr, werr)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("configs differ:\nLoadBudgeted: %+v\nLoad:         %+v", got, want)
			}
		})
	}
}

func TestDefaultBudget(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want Budget
		bad  string // the variable LoadBudgeted names
	}{
		{"defaults", nil, Budget{Memory: 2 << 30, CPU: 2 * time.Minute, Timeout: time.Minute, Stack: 64 << 20}, ""},
		{"overrides", map[string]string{"NLX_CONFIG_MEMORY": "512Mi", "NLX_CONFIG_CPU": "30s", "NLX_CONFIG_TIMEOUT": "5m"},
			Budget{Memory: 512 << 20, CPU: 30 * time.Second, Timeout: 5 * time.Minute, Stack: 64 << 20}, ""},
		{"zero turns a limit off", map[string]string{"NLX_CONFIG_MEMORY": "0", "NLX_CONFIG_TIMEOUT": "0s"},
			Budget{CPU: 2 * time.Minute, Stack: 64 << 20}, ""},
		{"bad memory", map[string]string{"NLX_CONFIG_MEMORY": "2GB"}, Budget{}, "NLX_CONFIG_MEMORY"},
		{"bad timeout", map[string]string{"NLX_CONFIG_TIMEOUT": "60"}, Budget{}, "NLX_CONFIG_TIMEOUT"},
		{"negative CPU", map[string]string{"NLX_CONFIG_CPU": "-1s"}, Budget{}, "NLX_CONFIG_CPU"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, k := range []string{EnvConfigMemory, EnvConfigCPU, EnvConfigTimeout} {
				t.Setenv(k, tt.env[k])
			}
			b := DefaultBudget()
			if tt.bad != "" {
				_, err := LoadBudgeted(context.Background(), "testdata/base", b)
				if err == nil || !strings.HasPrefix(err.Error(), tt.bad+": ") {
					t.Fatalf("LoadBudgeted with a bad %s: %v, want an error naming it", tt.bad, err)
				}
				return
			}
			if b != tt.want {
				t.Errorf("got %+v, want %+v", b, tt.want)
			}
		})
	}
}

// TestEscapingSymlinkRefused: a .cue file that was a symbolic link out of
// the config directory was read, and its content showed in errors. Load
// and Rehash refuse it with escaping_symlink and never read it; a link that
// stays inside still works, as skill packages' parents may.
func TestEscapingSymlinkRefused(t *testing.T) {
	outside := filepath.Join(t.TempDir(), "outside.cue")
	if err := os.WriteFile(outside, []byte("package base\n\nsecret: \"hunter2\" & 5\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		target func(dir string) string
		code   reason.Code
	}{
		{"absolute, outside", func(string) string { return outside }, reason.EscapingSymlink},
		{"relative, outside", func(dir string) string { r, _ := filepath.Rel(dir, outside); return r }, reason.EscapingSymlink},
		{"out and back in", func(dir string) string { return filepath.Join("..", filepath.Base(dir), "jobs.cue") }, reason.EscapingSymlink},
		{"absolute, inside", func(dir string) string { return filepath.Join(dir, "inner", "x.txt") }, reason.EscapingSymlink},
		{"relative, inside", func(string) string { return "inner/x.txt" }, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := copyTree(t, "testdata/base")
			if err := os.MkdirAll(filepath.Join(dir, "inner"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "inner", "x.txt"), []byte("package base\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			link := filepath.Join(dir, "x.cue")
			if err := os.Symlink(tt.target(dir), link); err != nil {
				t.Fatal(err)
			}
			for _, load := range []struct {
				name string
				f    func() error
			}{
				{"Load", func() error { _, err := Load(context.Background(), dir); return err }},
				{"LoadBudgeted", func() error { _, err := LoadBudgeted(context.Background(), dir, DefaultBudget()); return err }},
				{"Rehash", func() error { _, err := Rehash(dir, nil); return err }},
			} {
				err := load.f()
				if tt.code == "" {
					if err != nil {
						t.Errorf("%s: %v", load.name, err)
					}
					continue
				}
				var errs Errors
				if !errors.As(err, &errs) || len(errs) != 1 {
					t.Fatalf("%s: got %v, want one %s error", load.name, err, tt.code)
				}
				if e := errs[0]; e.Code != tt.code || e.Pos.Filename != link || e.Pos.Line != 1 {
					t.Errorf("%s: got %s at %s:%d, want %s at %s:1", load.name, e.Code, e.Pos.Filename, e.Pos.Line, tt.code, link)
				}
				if strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), outside) {
					t.Errorf("%s: the error shows what is outside: %v", load.name, err)
				}
			}
		})
	}
}

// TestNonRegularCueFileRefused: a FIFO named x.cue blocked the load for
// ever; it is refused at once, as a device is.
func TestNonRegularCueFileRefused(t *testing.T) {
	dir := copyTree(t, "testdata/base")
	if err := syscall.Mkfifo(filepath.Join(dir, "x.cue"), 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 2)
	go func() { _, err := Load(context.Background(), dir); done <- err }()
	go func() { _, err := Rehash(dir, nil); done <- err }()
	for range 2 {
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), "x.cue is not a regular file") {
				t.Errorf("got %v, want a refusal of the FIFO", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("reading a FIFO blocked")
		}
	}
}

func TestScanStats(t *testing.T) {
	tests := []struct {
		name      string
		src       string
		depth     int
		line, col int
		fors, ops int
	}{
		{"flat", "package x\na: 1\nb: 2\n", 0, 0, 0, 0, 0},
		{"a chain", "package x\na: 1\nb: 1 + 2 + 3 + 4\n", 3, 3, 4, 0, 3},
		{"a chain in a struct", "package x\na: {\n\tb: [x & int & >0]\n}\n", 4, 3, 6, 0, 2},
		{"unary minus and a default are no operators", "package x\na: -1\nb: *1 | 2\n", 1, 3, 4, 0, 1},
		{"a comprehension", "package x\nx: [for i in [1, 2] for j in [3] {i * j}]\n", 3, 2, 35, 2, 1},
		{"brackets", "package x\na: [[[[1]]]]\n", 4, 2, 7, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := scanStats("x.cue", []byte(tt.src))
			if st.depth != tt.depth || st.fors != tt.fors || st.operators != tt.ops {
				t.Errorf("depth %d, fors %d, operators %d; want %d, %d, %d", st.depth, st.fors, st.operators, tt.depth, tt.fors, tt.ops)
			}
			if tt.depth > 0 && (st.depthStart.Line != tt.line || st.depthStart.Column != tt.col) {
				t.Errorf("deepest at %d:%d, want %d:%d", st.depthStart.Line, st.depthStart.Column, tt.line, tt.col)
			}
		})
	}
}
