//go:build nlxfault

package fault

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"
)

// Enabled reports whether this binary honours NLX_FAULT.
const Enabled = true

// Point acts on NLX_FAULT, a comma-separated list of point=action where
// action is "kill" (SIGKILL, no cleanup), "sleep:DURATION" or "exit:CODE".
// With NLX_FAULT_TRACE set to a file, every point passed is appended to it,
// so a test can list the points of a run and then stop at each.
func Point(name string) {
	if trace := os.Getenv("NLX_FAULT_TRACE"); trace != "" {
		if f, err := os.OpenFile(trace, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644); err == nil {
			fmt.Fprintln(f, name)
			f.Close()
		}
	}
	for _, spec := range strings.Split(os.Getenv("NLX_FAULT"), ",") {
		point, action, ok := strings.Cut(spec, "=")
		if !ok || point != name {
			continue
		}
		switch {
		case action == "kill":
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
			time.Sleep(time.Hour) // the signal is on its way
		case strings.HasPrefix(action, "sleep:"):
			d, err := time.ParseDuration(strings.TrimPrefix(action, "sleep:"))
			if err == nil {
				time.Sleep(d)
			}
		case strings.HasPrefix(action, "exit:"):
			var code int
			fmt.Sscan(strings.TrimPrefix(action, "exit:"), &code)
			os.Exit(code)
		}
	}
}
