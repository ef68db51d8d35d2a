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

	"github.com/nlx-dev/nlx/egress"
	"github.com/nlx-dev/nlx/isolate"
	"github.com/nlx-dev/nlx/schema"
	"github.com/nlx-dev/nlx/toolproxy"
)

func main() {
	// On kernels that cannot create a process inside a cgroup, a launch
	// re-executes nlx to join its cgroup before the sandbox starts; in
	// that child this never returns.
	isolate.Reexec()
	// A launch with egress inference runs nlx as its proxy (host side),
	// its bridge (inside the sandbox) and runc's loopback hook; in those
	// this never returns.
	egress.Main()
	// A provider's MCP server is nlx too: the bridge to the launch's tool
	// proxy, inside the sandbox; there this never returns.
	toolproxy.Main()
	// nlx evaluates configs in a re-executed child under a budget (see
	// schema.LoadBudgeted); in that child this never returns.
	schema.ServeChild()
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
	schema.Reap()
	os.Exit(int(code))
}
