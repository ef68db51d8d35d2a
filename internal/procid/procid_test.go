package procid

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// startTimeByComm reads field 22 of /proc/PID/stat by another route than
// StartTime: it takes the command name from /proc/PID/comm, strips the exact
// "PID (COMM) " prefix and counts fields from there, so it does not rely on
// finding the last ')'.
func startTimeByComm(t *testing.T, pid int) string {
	t.Helper()
	dir := "/proc/" + strconv.Itoa(pid)
	comm, err := os.ReadFile(dir + "/comm")
	if err != nil {
		t.Fatal(err)
	}
	stat, err := os.ReadFile(dir + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	prefix := fmt.Sprintf("%d (%s) ", pid, strings.TrimSuffix(string(comm), "\n"))
	rest, ok := strings.CutPrefix(string(stat), prefix)
	if !ok {
		t.Fatalf("stat %q does not start with %q", stat, prefix)
	}
	// rest starts at field 3; field 22 is the 20th of rest.
	fields := strings.Split(strings.TrimSpace(rest), " ")
	if len(fields) < 20 {
		t.Fatalf("stat %q: %d fields after the command", stat, len(fields))
	}
	if _, err := strconv.ParseUint(fields[19], 10, 64); err != nil {
		t.Fatalf("field 22 of %q is %q, not a number", stat, fields[19])
	}
	return fields[19]
}

// startSleeper starts sleep under the given file name (a symlink to sleep,
// so that the kernel's command name is that name) and stops it when the test
// ends. os/exec returns from Start only once the exec has happened.
func startSleeper(t *testing.T, name string) *exec.Cmd {
	t.Helper()
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal("no sleep binary:", err)
	}
	path := sleep
	if name != "" {
		path = filepath.Join(t.TempDir(), name)
		if err := os.Symlink(sleep, path); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(path, "600")
	cmd.Args[0] = "sleep" // a multi-call coreutils dispatches on argv[0]
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	return cmd
}

// killedChild starts a child, notes its identity and kills it, leaving it
// unreaped.
func killedChild(t *testing.T) (Identity, *exec.Cmd) {
	t.Helper()
	self, err := Self()
	if err != nil {
		t.Fatal(err)
	}
	cmd := startSleeper(t, "")
	id := self
	id.PID = cmd.Process.Pid
	if id.Start, err = StartTime(id.PID); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	return id, cmd
}

// exited returns the identity a child had while it ran; the child has been
// killed and reaped, so its pid names no process (or, recycled, one that
// started at another time).
func exited(t *testing.T) Identity {
	t.Helper()
	id, cmd := killedChild(t)
	cmd.Wait()
	return id
}

// unreaped returns the identity of a child that has exited but that nobody
// has reaped yet: its /proc/PID/stat is still there, in state Z, with the
// start time it had while it ran.
func unreaped(t *testing.T) Identity {
	t.Helper()
	id, _ := killedChild(t)
	for i := 0; ; i++ {
		st, err := stat(id.PID)
		if err != nil {
			t.Fatal(err)
		}
		if st.state == 'Z' {
			if st.start != id.Start {
				t.Fatalf("zombie start %s, want %s", st.start, id.Start)
			}
			return id
		}
		if i == 1000 {
			t.Fatalf("child %d never became a zombie (state %c)", id.PID, st.state)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestSelf(t *testing.T) {
	id, err := Self()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := id.PID, os.Getpid(); got != want {
		t.Errorf("PID = %d, want %d", got, want)
	}
	if got, want := id.Start, startTimeByComm(t, os.Getpid()); got != want {
		t.Errorf("Start = %q, want %q", got, want)
	}
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	if id.Host != host {
		t.Errorf("Host = %q, want %q", id.Host, host)
	}
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := id.Boot, strings.TrimSpace(string(boot)); got != want || got == "" {
		t.Errorf("Boot = %q, want %q", got, want)
	}
	if id.User == "" {
		t.Error("User is empty")
	}
}

func TestStartTimeOddCommandNames(t *testing.T) {
	// Command names hold at most 15 bytes; each of these would fool a parser
	// that splits on spaces or stops at the first ')'.
	for _, name := range []string{
		"a) (b",
		"x) S 1 2 (y",
		") ) ) ) ) ) )",
		"sp ace",
		"((",
	} {
		t.Run(name, func(t *testing.T) {
			cmd := startSleeper(t, name)
			pid := cmd.Process.Pid
			comm, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.TrimSuffix(string(comm), "\n"); got != name {
				t.Fatalf("fixture: command name is %q, want %q", got, name)
			}
			got, err := StartTime(pid)
			if err != nil {
				t.Fatal(err)
			}
			if want := startTimeByComm(t, pid); got != want {
				t.Errorf("StartTime(%d) = %q, want %q", pid, got, want)
			}
		})
	}
}

func TestStartTimeNoProcess(t *testing.T) {
	data, err := os.ReadFile("/proc/sys/kernel/pid_max")
	if err != nil {
		t.Fatal(err)
	}
	max, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		t.Fatal(err)
	}
	// No pid is ever above pid_max.
	got, err := StartTime(max + 1)
	if !errors.Is(err, ErrNoProcess) {
		t.Errorf("StartTime(pid_max+1) = %q, %v; want error %v", got, err, ErrNoProcess)
	}
}

func TestGone(t *testing.T) {
	self, err := Self()
	if err != nil {
		t.Fatal(err)
	}
	dead := exited(t)
	zombie := unreaped(t)
	tests := []struct {
		name string
		id   func() Identity
		want bool
	}{
		{"this process", func() Identity { return self }, false},
		{"exited child", func() Identity { return dead }, true},
		{"zombie: exited, not reaped", func() Identity { return zombie }, true},
		{"pid reused: start differs", func() Identity {
			id := self
			id.Start += "0"
			return id
		}, true},
		{"other host, running pid", func() Identity {
			id := self
			id.Host += ".elsewhere"
			return id
		}, false},
		{"other host, exited pid", func() Identity {
			id := dead
			id.Host += ".elsewhere"
			return id
		}, false},
		{"other host, other boot", func() Identity {
			id := dead
			id.Host += ".elsewhere"
			id.Boot = "00000000-0000-4000-8000-000000000000"
			return id
		}, false},
		{"same host, earlier boot", func() Identity {
			id := self
			id.Boot = "00000000-0000-4000-8000-000000000000"
			return id
		}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := tt.id()
			got, err := Gone(id)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("Gone(%+v) = %v, want %v", id, got, tt.want)
			}
		})
	}
}
