// Command nlx reconciles a self-hosted agent runtime host with its
// configuration: nlx plan diffs CUE files against the host's state, nlx apply
// carries out a saved plan.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	_ "time/tzdata" // schedules name IANA zones; a scratch image has no zoneinfo

	"golang.org/x/term"

	"github.com/nlx-dev/nlx/isolate"
)

func main() {
	// On kernels that cannot create a process inside a cgroup, a launch
	// re-executes nlx to join its cgroup before the sandbox starts; in
	// that child this never returns.
	isolate.Reexec()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := Main(ctx, os.Args[1:], &IO{
		In:          os.Stdin,
		Out:         os.Stdout,
		Err:         os.Stderr,
		InTerminal:  term.IsTerminal(int(os.Stdin.Fd())),
		OutTerminal: term.IsTerminal(int(os.Stdout.Fd())),
		ErrTerminal: term.IsTerminal(int(os.Stderr.Fd())),
	})
	stop()
	os.Exit(int(code))
}
