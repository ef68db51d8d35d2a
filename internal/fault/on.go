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
func Point(name string) {
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
