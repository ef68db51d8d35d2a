package schema

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"cuelang.org/go/cue/token"

	"github.com/nlx-dev/nlx/internal/bytesize"
	"github.com/nlx-dev/nlx/internal/reason"
)

// Budget bounds what evaluating a config may cost. CUE has no limits of its
// own: a few lines can ask it for a terabyte, a trillion steps or a stack
// deeper than Go allows (which kills the process with a fatal error no
// recover sees). LoadBudgeted therefore evaluates in a child process, the
// running binary re-executed, under these limits; exceeding one is a
// config_too_complex error, never a crash or a hang.
type Budget struct {
	// Memory caps the child's private writable memory (RLIMIT_DATA), in
	// bytes; 0 is no limit.
	Memory int64
	// CPU caps the child's CPU time (RLIMIT_CPU, whole seconds, all
	// threads); 0 is no limit.
	CPU time.Duration
	// Timeout is how long the parent waits before it kills the child; 0 is
	// no limit.
	Timeout time.Duration
	// Stack caps each goroutine's stack in the child (debug.SetMaxStack),
	// in bytes; 0 leaves Go's default of 1 GB.
	Stack int64

	err error // a setting DefaultBudget could not read
}

// The settings DefaultBudget reads, and their defaults.
const (
	EnvConfigMemory  = "NLX_CONFIG_MEMORY"
	EnvConfigCPU     = "NLX_CONFIG_CPU"
	EnvConfigTimeout = "NLX_CONFIG_TIMEOUT"

	// The 14,002-resource benchmark fleet needs 300 to 350 MiB of private
	// memory (~214 MiB resident) and ~2 s of CPU in ~1.2 s on two cores
	// (a Raspberry Pi 4 is about three times slower per core): the defaults
	// leave it a margin of about 6x in memory and more than 10x in time
	// while keeping an 8 GB Pi's memory for the providers it runs.
	DefaultConfigMemory  = 2 << 30
	DefaultConfigCPU     = 2 * time.Minute
	DefaultConfigTimeout = time.Minute
	// The fleet needs less than 256 KiB of stack; 64 MiB is enough for any
	// config a person writes and lets a runaway recursion fail in a second
	// instead of after 1 GB.
	DefaultConfigStack = 64 << 20
)

// DefaultBudget is the budget nlx loads configs with: the defaults above,
// each overridden by its environment variable when set. A malformed
// setting is not replaced by its default: LoadBudgeted refuses it.
func DefaultBudget() Budget {
	b := Budget{Memory: DefaultConfigMemory, CPU: DefaultConfigCPU, Timeout: DefaultConfigTimeout, Stack: DefaultConfigStack}
	if v := os.Getenv(EnvConfigMemory); v != "" {
		n, err := bytesize.Parse(v)
		if err != nil {
			b.err = fmt.Errorf("%s: %w", EnvConfigMemory, err)
		}
		b.Memory = n
	}
	for _, s := range []struct {
		env string
		d   *time.Duration
	}{{EnvConfigCPU, &b.CPU}, {EnvConfigTimeout, &b.Timeout}} {
		v := os.Getenv(s.env)
		if v == "" {
			continue
		}
		d, err := time.ParseDuration(v)
		if err == nil && d < 0 {
			err = errors.New("negative")
		}
		if err != nil && b.err == nil {
			b.err = fmt.Errorf("%s: %q is not a duration (such as 90s or 2m): %v", s.env, v, err)
		}
		*s.d = d
	}
	return b
}

// childEnv marks the load child; childArg0 names it in ps.
const (
	childEnv  = "_NLX_SCHEMA_LOAD_CHILD"
	childArg0 = "nlx-config-load"
	resultFD  = 3
	// exitCPU is the child's exit status when RLIMIT_CPU's soft limit
	// signals it; Go's own fatal errors exit 2.
	exitCPU = 75
)

// serving records that ServeChild ran in this process: without it the child
// would run the program's main again, not the load.
var serving atomic.Bool

// LoadBudgeted is Load in a child process held to b. The result is what
// Load returns (the Config, or Errors with their positions); a budget
// exceeded is Errors holding one config_too_complex error, at the
// expression or file most likely responsible. When ctx ends, the child is
// killed at once and the error says why. The program's main must call
// ServeChild first.
func LoadBudgeted(ctx context.Context, dir string, b Budget) (*Config, error) {
	if b.err != nil {
		return nil, b.err
	}
	if !serving.Load() {
		return nil, errors.New("schema.LoadBudgeted: the program's main (or TestMain) must call schema.ServeChild first")
	}
	if err := ctx.Err(); err != nil {
		return nil, stopped(ctx, dir)
	}
	exe, err := executable()
	if err != nil {
		return nil, fmt.Errorf("load config %s: %w", dir, err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("load config %s: %w", dir, err)
	}
	defer r.Close()
	stderr := &headBuffer{max: 16 << 10}
	cmd := &exec.Cmd{
		Path:        exe,
		Args:        []string{childArg0, dir, strconv.FormatInt(b.Memory, 10), strconv.FormatInt(cpuSeconds(b.CPU), 10), strconv.FormatInt(b.Stack, 10)},
		Env:         childEnviron(),
		Stderr:      stderr,
		ExtraFiles:  []*os.File{w},
		SysProcAttr: childAttr(),
	}
	// The child dies with the thread that started it (Pdeathsig); a
	// locked thread lives until the wait is over.
	lockThread()
	defer unlockThread()
	err = cmd.Start()
	w.Close()
	if err != nil {
		return nil, fmt.Errorf("load config %s: start the evaluating process: %w", dir, err)
	}
	read := make(chan readResult, 1)
	go func() {
		// The child's memory budget bounds what it can send.
		data, err := io.ReadAll(r)
		read <- readResult{data, err}
	}()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	var deadline <-chan time.Time
	if b.Timeout > 0 {
		t := time.NewTimer(b.Timeout)
		defer t.Stop()
		deadline = t.C
	}
	var (
		waitErr error
		killed  string // why the parent killed the child
	)
	// The child ends the result before it exits: take it at end of file,
	// without waiting for the kernel to tear the child's memory down, and
	// reap the child after.
	select {
	case res := <-read:
		if r, ok := decodeResult(res.data); ok && res.err == nil {
			exiting.Add(1)
			go func() {
				<-exited
				exiting.Done()
			}()
			return r.cfg, r.err
		}
		// No result: the child failed, and how it ended says why.
		select {
		case waitErr = <-exited:
		case <-ctx.Done():
			cmd.Process.Kill()
			<-exited
			return nil, stopped(ctx, dir)
		case <-deadline:
			killed = causeTimeout
			cmd.Process.Kill()
			waitErr = <-exited
		}
	case <-ctx.Done():
		cmd.Process.Kill()
		<-exited
		return nil, stopped(ctx, dir)
	case <-deadline:
		killed = causeTimeout
		cmd.Process.Kill()
		waitErr = <-exited
	}
	if ctx.Err() != nil {
		// Ctrl-C reaches the child too (one process group): it died of
		// the same signal nlx was told to stop by.
		return nil, stopped(ctx, dir)
	}
	cause := classify(cmd.ProcessState, stderr.String(), killed, b)
	if cause == "" {
		if waitErr == nil {
			return nil, fmt.Errorf("load config %s: the evaluating process ended without a result", dir)
		}
		return nil, fmt.Errorf("load config %s: the evaluating process failed (%v)%s", dir, waitErr, firstFatal(stderr.String()))
	}
	return nil, Errors{tooComplex(dir, cause, b)}
}

// exiting counts children that handed their result over and are still
// exiting.
var exiting sync.WaitGroup

// Reap waits (a few seconds at most) for the load children LoadBudgeted
// returned before they had exited. main calls it before it exits: a child
// reaped is counted in the process's resource usage (getrusage and wait4
// report its CPU time and peak memory), one left to init is not.
func Reap() {
	done := make(chan struct{})
	go func() {
		exiting.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(3 * time.Second):
	}
}

type readResult struct {
	data []byte
	err  error
}

func stopped(ctx context.Context, dir string) error {
	if cause := context.Cause(ctx); cause != nil && cause != ctx.Err() {
		return fmt.Errorf("load config %s: stopped (%v): %w", dir, cause, ctx.Err())
	}
	return fmt.Errorf("load config %s: stopped: %w", dir, ctx.Err())
}

func cpuSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return max(1, int64((d+time.Second-1)/time.Second))
}

// childEnviron is the parent's environment, so CUE evaluates exactly as it
// would in process, marked as the load child and never as isolate's.
func childEnviron() []string {
	env := os.Environ()
	out := env[:0:0]
	for _, kv := range env {
		if strings.HasPrefix(kv, childEnv+"=") || strings.HasPrefix(kv, "_NLX_ISOLATE_CHILD=") {
			continue
		}
		out = append(out, kv)
	}
	return append(out, childEnv+"=1")
}

// Why a child exceeded its budget.
const (
	causeMemory  = "memory"
	causeCPU     = "cpu"
	causeTimeout = "timeout"
	causeStack   = "stack"
)

// classify tells which budget a failed child exceeded, "" for none (a
// failure of another kind). The Go runtime says what killed it on stderr:
// "fatal error: stack overflow" after "goroutine stack exceeds", and "out
// of memory" when the kernel refuses memory beyond RLIMIT_DATA.
func classify(ps *os.ProcessState, stderr, killed string, b Budget) string {
	if killed != "" {
		return killed
	}
	if ps == nil {
		return ""
	}
	ws, _ := ps.Sys().(syscall.WaitStatus)
	switch {
	case ps.ExitCode() == exitCPU:
		return causeCPU
	case ws.Signaled() && (ws.Signal() == syscall.SIGXCPU || ws.Signal() == syscall.SIGKILL) &&
		b.CPU > 0 && ps.UserTime()+ps.SystemTime() >= time.Duration(cpuSeconds(b.CPU))*time.Second:
		return causeCPU // RLIMIT_CPU's hard limit, when the soft one went unheard
	case strings.Contains(stderr, "goroutine stack exceeds") || strings.Contains(stderr, "fatal error: stack overflow"):
		return causeStack
	}
	for _, s := range memoryExhausted {
		if strings.Contains(stderr, s) {
			return causeMemory
		}
	}
	return ""
}

// memoryExhausted are what the runtime says when RLIMIT_DATA refuses it
// memory: for the heap, for a thread's stack (through cgo's pthread_create
// too, where cgo is linked in), for the race detector's shadow.
var memoryExhausted = []string{
	"out of memory",
	"cannot allocate memory",
	"errno=12",
	"cannot map pages",
	"failed to create new OS thread",
	"pthread_create failed",
	"ThreadSanitizer failed to allocate",
}

// firstFatal is the runtime's one-line reason from a child's stderr, never
// its stack trace.
func firstFatal(stderr string) string {
	for _, line := range strings.Split(stderr, "\n") {
		if strings.HasPrefix(line, "panic: ") || strings.HasPrefix(line, "fatal error: ") {
			return ": " + line
		}
	}
	return ""
}

// tooComplex is the error of a budget exceeded, positioned where the config
// most likely asks for too much (locate).
func tooComplex(dir, cause string, b Budget) *Error {
	s := locate(dir, cause == causeStack)
	e := &Error{Pos: s.pos, Code: reason.ConfigTooComplex}
	switch cause {
	case causeStack:
		if s.depth > 0 {
			e.Msg = fmt.Sprintf("an expression nested about %d deep: evaluating it needs more than the %s stack budget; split it into named parts",
				s.depth, bytesize.Format(b.Stack))
		} else {
			e.Msg = fmt.Sprintf("evaluating the config recursed deeper than its %s stack budget allows", bytesize.Format(b.Stack))
		}
	case causeMemory:
		e.Msg = fmt.Sprintf("evaluating the config needs more than its memory budget of %s (%s raises it)", bytesize.Format(b.Memory), EnvConfigMemory)
	case causeCPU:
		e.Msg = fmt.Sprintf("evaluating the config needs more than its CPU budget of %v (%s raises it)", time.Duration(cpuSeconds(b.CPU))*time.Second, EnvConfigCPU)
	case causeTimeout:
		e.Msg = fmt.Sprintf("evaluating the config takes longer than its time budget of %v (%s raises it)", b.Timeout, EnvConfigTimeout)
	}
	if s.pos.Filename == "" {
		e.Pos = token.Position{Filename: dir}
	}
	return e
}

// headBuffer keeps the first max bytes written to it and drops the rest:
// the runtime's reason comes first, the stack trace after it.
type headBuffer struct {
	mu  sync.Mutex
	max int
	b   bytes.Buffer
}

func (h *headBuffer) Write(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if room := h.max - h.b.Len(); room > 0 {
		h.b.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (h *headBuffer) String() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.b.String()
}
