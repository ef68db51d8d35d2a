package preserve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nlx-dev/nlx/internal/procid"
	"github.com/nlx-dev/nlx/internal/reason"
)

// The gate: an export is taken only while no OpenClaw process writes the
// installation. OpenClaw's gateway holds lock files in its lock directory
// ($TMPDIR/openclaw-<uid>/gateway.<hash>.lock and gateway.state.lock, a
// JSON payload {pid, createdAt, configPath, stateDir?, startTime?}), and a
// session being written has <transcript>.lock beside it. A lock counts as
// held while its pid runs and, when the payload gives the process's start
// time, that pid is still that process (a recycled pid is not the
// gateway); a lock whose process is gone is stale and reported.

// Holder is a lock found on the installation.
type Holder struct {
	File  string `json:"file"`
	PID   int    `json:"pid"`
	Live  bool   `json:"live"`
	Why   string `json:"why"`
	Stale bool   `json:"stale,omitempty"`
}

type lockPayload struct {
	PID        int    `json:"pid"`
	CreatedAt  string `json:"createdAt"`
	ConfigPath string `json:"configPath"`
	StateDir   string `json:"stateDir"`
	StartTime  *int64 `json:"startTime"`
}

// DefaultLockDir is where OpenClaw's gateway keeps its locks for the
// installation at source: os.TempDir()/openclaw-<uid of its owner>.
func DefaultLockDir(source string) string {
	uid := os.Getuid()
	if fi, err := os.Stat(source); err == nil {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			uid = int(st.Uid)
		}
	}
	return filepath.Join(os.TempDir(), "openclaw-"+strconv.Itoa(uid))
}

// Holders lists the locks on the installation at source: the gateway's in
// lockDir that name it, and the session locks inside it.
func Holders(source, lockDir string) []Holder {
	var out []Holder
	gw, _ := filepath.Glob(filepath.Join(lockDir, "gateway*.lock"))
	for _, f := range gw {
		h, relevant := readLock(f, source)
		if relevant {
			out = append(out, h)
		}
	}
	sessions, _ := filepath.Glob(filepath.Join(source, "agents", "*", "sessions", "*.lock"))
	for _, f := range sessions {
		h, _ := readLock(f, "")
		out = append(out, h)
	}
	return out
}

// readLock reads one lock file; relevant is false for a gateway lock of
// another installation.
func readLock(file, source string) (Holder, bool) {
	h := Holder{File: file}
	data, err := os.ReadFile(file)
	if err != nil {
		h.Live, h.Why = true, "unreadable ("+err.Error()+"): taken as held"
		return h, true
	}
	var p lockPayload
	if err := json.Unmarshal(data, &p); err != nil || p.PID <= 0 {
		h.Live, h.Why = true, "its payload names no pid: taken as held"
		return h, true
	}
	if source != "" {
		within := func(p string) bool {
			return p != "" && (p == source || strings.HasPrefix(p, strings.TrimSuffix(source, "/")+"/"))
		}
		if !within(p.StateDir) && !within(p.ConfigPath) {
			return h, false
		}
	}
	h.PID = p.PID
	start, err := procid.StartTime(p.PID)
	switch {
	case errors.Is(err, procid.ErrNoProcess):
		h.Stale, h.Why = true, fmt.Sprintf("pid %d is gone: a stale lock", p.PID)
	case err != nil:
		h.Live, h.Why = true, fmt.Sprintf("pid %d cannot be looked at (%v): taken as held", p.PID, err)
	case p.StartTime != nil && strconv.FormatInt(*p.StartTime, 10) != start:
		h.Stale, h.Why = true, fmt.Sprintf("pid %d is another process now (started at %s, the lock's at %d): a stale lock", p.PID, start, *p.StartTime)
	default:
		h.Live, h.Why = true, fmt.Sprintf("pid %d runs", p.PID)
	}
	return h, true
}

// Gate refuses with source_busy while a live process holds a lock on the
// installation; with drain it waits, up to timeout, for every holder to
// go. progress is told of each wait.
func Gate(ctx context.Context, source, lockDir string, drain bool, timeout time.Duration, progress func(string)) ([]Holder, error) {
	deadline := time.Now().Add(timeout)
	told := false
	for {
		holders := Holders(source, lockDir)
		var live []string
		for _, h := range holders {
			if h.Live {
				live = append(live, h.File+" ("+h.Why+")")
			}
		}
		if len(live) == 0 {
			return holders, nil
		}
		if !drain {
			return holders, reason.New(reason.SourceBusy, "OpenClaw still writes %s: %s; stop its gateway (openclaw gateway stop), or export with --drain to wait for it", source, strings.Join(live, ", "))
		}
		if time.Now().After(deadline) {
			return holders, reason.New(reason.SourceBusy, "OpenClaw still writes %s after waiting %s: %s", source, timeout, strings.Join(live, ", "))
		}
		if !told && progress != nil {
			progress(fmt.Sprintf("waiting for OpenClaw to stop writing %s: %s", source, strings.Join(live, ", ")))
			told = true
		}
		select {
		case <-ctx.Done():
			return holders, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}
