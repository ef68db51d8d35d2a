package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nlx-dev/nlx/internal/testgen"
)

// TestCLISignalStopsConfigLoad: nlx ignored SIGINT and SIGTERM while CUE
// evaluated (minutes, for this config). Now it kills the evaluating child
// and exits within a second, through its usual error path, leaving no
// process behind.
func TestCLISignalStopsConfigLoad(t *testing.T) {
	tests := []struct {
		name  string
		sig   syscall.Signal
		group bool // to nlx's process group, as Ctrl-C on a terminal
	}{
		{"SIGTERM", syscall.SIGTERM, false},
		{"SIGINT", syscall.SIGINT, false},
		{"Ctrl-C", syscall.SIGINT, true},
	}
	for _, tt := range tests {
		sig := tt.sig
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.MkdirAll(filepath.Join(dir, "slow"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "slow", "x.cue"), testgen.Bombs["comprehension"]("x"), 0o644); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(filepath.Join(binDir, "nlx"), "validate", "slow")
			cmd.Dir = dir
			cmd.Env = append(os.Environ(), "NLX_CONFIG_TIMEOUT=10m", "NLX_CONFIG_CPU=10m")
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer cmd.Process.Kill()
			child := waitChild(t, cmd.Process.Pid)
			time.Sleep(300 * time.Millisecond) // well into the evaluation

			sent := time.Now()
			target := cmd.Process.Pid
			if tt.group {
				target = -target
			}
			if err := syscall.Kill(target, sig); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			var err error
			select {
			case err = <-exited:
			case <-time.After(10 * time.Second):
				cmd.Process.Kill()
				<-exited
				syscall.Kill(child, syscall.SIGKILL)
				t.Fatalf("nlx still running 10 s after %v", sig)
			}
			if took := time.Since(sent); took > time.Second {
				t.Errorf("nlx exited %v after %v, want within 1 s", took, sig)
			}
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 1 {
				t.Errorf("nlx ended with %v, want exit status 1", err)
			}
			want := map[syscall.Signal]string{syscall.SIGTERM: "terminated", syscall.SIGINT: "interrupt"}[sig]
			if s := stderr.String(); !strings.HasPrefix(s, "Error: load config slow: stopped ("+want+" signal received)") || strings.Contains(s, "goroutine") {
				t.Errorf("stderr:\n%s\nwant the stop and its signal, no trace", s)
			}
			if err := syscall.Kill(child, 0); !errors.Is(err, syscall.ESRCH) {
				syscall.Kill(child, syscall.SIGKILL)
				t.Errorf("the evaluating child %d outlived nlx (kill 0: %v)", child, err)
			}
		})
	}
}

// waitChild returns the pid of the first child of pid to appear.
func waitChild(t *testing.T, pid int) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		tasks, _ := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/children")
		for _, f := range tasks {
			data, _ := os.ReadFile(f)
			if fields := strings.Fields(string(data)); len(fields) > 0 {
				child, err := strconv.Atoi(fields[0])
				if err == nil {
					return child
				}
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("nlx %d started no child", pid)
	return 0
}
