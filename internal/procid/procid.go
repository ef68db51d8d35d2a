// Package procid identifies processes so that a recycled pid is never
// mistaken for the process that once held it: a pid together with its start
// time (field 22 of /proc/PID/stat) and the boot id names one process.
package procid

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/user"
	"strconv"
	"strings"
	"syscall"
)

// Identity names one process on one host during one boot.
type Identity struct {
	PID   int    `json:"pid"`
	Start string `json:"start"`  // clock ticks since boot, as in /proc/PID/stat
	PidNS string `json:"pid_ns"` // the pid namespace, as /proc/self/ns/pid names it
	Boot  string `json:"boot_id"`
	Host  string `json:"host"`
	User  string `json:"user"`
}

func (id Identity) String() string {
	return fmt.Sprintf("pid %d (user %s) on %s", id.PID, id.User, id.Host)
}

// Self returns the identity of the calling process.
func Self() (Identity, error) {
	id := Identity{PID: os.Getpid()}
	var err error
	if id.Start, err = StartTime(id.PID); err != nil {
		return id, err
	}
	if id.Boot, err = BootID(); err != nil {
		return id, err
	}
	if id.PidNS, err = os.Readlink("/proc/self/ns/pid"); err != nil {
		return id, fmt.Errorf("read pid namespace: %w", err)
	}
	if id.Host, err = os.Hostname(); err != nil {
		return id, fmt.Errorf("hostname: %w", err)
	}
	id.User = strconv.Itoa(os.Getuid())
	if u, err := user.Current(); err == nil {
		id.User = u.Username
	}
	return id, nil
}

// ErrNoProcess means no process has the pid.
var ErrNoProcess = errors.New("no such process")

// StartTime returns field 22 of /proc/PID/stat: when the process started, in
// clock ticks since boot.
func StartTime(pid int) (string, error) {
	st, err := stat(pid)
	return st.start, err
}

// procStat holds the fields of /proc/PID/stat nlx reads.
type procStat struct {
	state byte   // field 3: R, S, D, T, t, Z (zombie), X (dead), ...
	start string // field 22
}

func stat(pid int) (procStat, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
		return procStat{}, ErrNoProcess
	}
	if err != nil {
		return procStat{}, fmt.Errorf("read process %d stat: %w", pid, err)
	}
	// The command name (field 2) is in parentheses and may hold spaces or
	// parentheses itself: fields resume after the last ')'.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return procStat{}, fmt.Errorf("process %d stat: no command field", pid)
	}
	fields := strings.Fields(string(data[i+1:]))
	// fields[0] is field 3 (state), so field 22 is fields[19].
	if len(fields) < 20 || len(fields[0]) != 1 {
		return procStat{}, fmt.Errorf("process %d stat: %d fields", pid, len(fields)+2)
	}
	return procStat{state: fields[0][0], start: fields[19]}, nil
}

// BootID returns the kernel's id of the current boot.
func BootID() (string, error) {
	data, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return "", fmt.Errorf("read boot id: %w", err)
	}
	return strings.TrimSpace(string(data)), nil
}

// Gone reports whether the process id named is proven not to run any more:
// same host and boot with the pid absent, started at another time, or a
// zombie (it has exited and only waits for its parent to reap it), or the
// same host after a reboot. A process on another host, or in another pid
// namespace (another container on this host), is never proven gone.
func Gone(id Identity) (bool, error) {
	self, err := Self()
	if err != nil {
		return false, err
	}
	if id.Host != self.Host {
		return false, nil
	}
	if id.Boot != self.Boot {
		return true, nil
	}
	if id.PidNS != self.PidNS {
		return false, nil
	}
	st, err := stat(id.PID)
	if errors.Is(err, ErrNoProcess) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	// A zombie has run its last instruction: it holds nothing but its
	// exit status, whoever is slow to reap it.
	return st.start != id.Start || st.state == 'Z' || st.state == 'X', nil
}
