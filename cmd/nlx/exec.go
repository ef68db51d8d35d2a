package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/nlx-dev/nlx/isolate"
	"github.com/nlx-dev/nlx/launch"
	"github.com/nlx-dev/nlx/state"
)

type execOptions struct {
	workspace  string
	connection string
	backend    string
	grace      time.Duration
	launchID   string
	inImage    bool
}

func newExecCmd(a *app) *cobra.Command {
	opts := &execOptions{}
	cmd := &cobra.Command{
		Use:   "exec --workspace W --connection C [--backend bwrap|runc] -- CMD [ARGS...]",
		Short: "Run a command exactly as a provider of that workspace and connection runs",
		Long: `Exec runs CMD in the sandbox a provider process of workspace W gets with
connection C, as the last apply left them in the state (never from a config
directory): only the workspace (read-only or read-write by its policy),
only C's credential home, only the workspace's skills, a private /tmp, new
namespaces (no network when egress is none; with egress inference only the
provider's inference endpoints, through a proxy of the launch's own that
records every connection), and the workspace's cgroup
limits. The process is recorded in the state before it runs and, once it
exits, its whole tree is stopped and a stop receipt written. The exit code is
CMD's. SIGINT (Ctrl-C), SIGTERM or SIGHUP to nlx exec stops the launch as
nlx stop does (SIGTERM to the tree, --grace, then SIGKILL), writes the
receipt and exits 128 + the signal's number (130 for Ctrl-C).

A workspace, connection, provider or skill that is not applied is refused
(not_applied), as is a held one (held) and a connection on a disabled
provider (provider_disabled). The command runs as the provider user
($NLX_PROVIDER_USER, a name or UID:GID; default nlx-provider, created when
missing), never as root, under every launch's seccomp filter.

The workspace directory is $NLX_WORKSPACE_ROOT/W (default: workspaces/ beside
the state; nlx apply creates it); credential homes live under
$NLX_CREDENTIAL_ROOT (default: credentials/ beside the state; nlx apply
creates each connection's, and nlx doctor lists those not signed in; one
that is gone is credential_home_missing); skill packages
under $NLX_SKILL_ROOT (default: skills/ beside the state; nlx apply installs
them).`,
		Args:        cobra.MinimumNArgs(1),
		Annotations: textOnly,
		RunE: func(cmd *cobra.Command, args []string) error {
			return execRun(cmd.Context(), a, opts, args)
		},
	}
	cmd.Flags().StringVar(&opts.workspace, "workspace", "", "workspace (required)")
	cmd.Flags().StringVar(&opts.connection, "connection", "", "connection of that workspace (required)")
	cmd.Flags().StringVar(&opts.backend, "backend", "", "bwrap or runc (default: bwrap where it works, else runc)")
	cmd.Flags().DurationVar(&opts.grace, "grace", 5*time.Second, "how long the tree may take to end after SIGTERM")
	cmd.Flags().StringVar(&opts.launchID, "launch-id", "", "name the launch (default: a random id), for nlx stop")
	cmd.Flags().BoolVar(&opts.inImage, "in-image", false, "run in the workspace's native image (unpacked for this host's platform) instead of a read-only view of the host")
	_ = cmd.MarkFlagRequired("workspace")
	_ = cmd.MarkFlagRequired("connection")
	return cmd
}

func execRun(ctx context.Context, a *app, opts *execOptions, command []string) error {
	statePath, err := a.resolveState()
	if err != nil {
		return err
	}
	db, err := a.openState(ctx, true)
	if err != nil {
		return err
	}
	defer db.Close()
	paths, err := launch.HostFor(statePath)
	if err != nil {
		return err
	}
	store, err := a.imageStore()
	if err != nil {
		return err
	}
	l, err := launch.Prepare(ctx, db, paths, launch.Spec{
		Target:  launch.Target{Workspace: opts.workspace, Connection: opts.connection},
		Command: command, HostEnv: os.Environ(), Backend: isolate.Backend(opts.backend),
		InImage: opts.inImage, Images: store,
	})
	if err != nil {
		return err
	}
	// SIGINT, SIGTERM or SIGHUP to nlx exec stops the launch as nlx stop
	// would. The sandbox is in its own process group and session, so a
	// terminal's Ctrl-C, or its hangup, reaches nlx only; dying of SIGHUP
	// would leave a runc container running, recorded but unattended.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	rec := launch.Recorder{DB: db}
	if reaped, err := launch.ReapGone(ctx, rec); err == nil {
		for _, id := range reaped {
			fmt.Fprintf(a.io.Err, "nlx: launch %s had ended unrecorded (the nlx that ran it died); its receipt is written\n", id)
		}
	}
	launchID := opts.launchID
	if launchID == "" {
		launchID = isolate.NewLaunchID()
	}
	// A workspace with egress inference reaches its provider's endpoints
	// through a proxy of its own, and nothing else.
	px, err := launch.StartEgress(ctx, l, launchID, db)
	if err != nil {
		return err
	}
	defer px.Stop()
	p, err := isolate.Launch(ctx, l.Request, isolate.Options{Recorder: rec, LaunchID: launchID,
		Stdin: a.io.In, Stdout: a.io.Out, Stderr: a.io.Err})
	if err != nil {
		return err
	}
	bg := context.WithoutCancel(ctx)
	var ps *os.ProcessState
	var waitErr error
	exited := make(chan struct{})
	go func() {
		ps, waitErr = p.Wait(bg)
		close(exited)
	}()
	var interrupted os.Signal
	select {
	case <-exited:
	case interrupted = <-sigs:
	case <-ctx.Done():
		// main's signal context, which may have seen the signal just
		// before sigs did; else whoever called Main cancelled.
		select {
		case interrupted = <-sigs:
		case <-time.After(100 * time.Millisecond):
			interrupted = syscall.SIGTERM
		}
	}
	if interrupted != nil {
		fmt.Fprintf(a.io.Err, "nlx: %v: stopping launch %s\n", interrupted, p.Identity.LaunchID)
	}
	// The provider has exited (or is to be stopped), but what it
	// started may not have: stop the tree and write the receipt,
	// unless nlx stop already did.
	if row, err := db.Process(bg, p.Identity.LaunchID); err != nil || row.Status == state.ProcessRunning {
		if _, err := isolate.Stop(bg, p.Identity, opts.grace, rec); err != nil {
			return fmt.Errorf("stop launch %s: %w", p.Identity.LaunchID, err)
		}
	}
	<-exited
	if s, ok := interrupted.(syscall.Signal); ok {
		return exitStatus(128 + int(s))
	}
	if waitErr != nil {
		return waitErr
	}
	if code := ps.ExitCode(); code != 0 {
		return exitStatus(code)
	}
	if !ps.Success() {
		return exitStatus(ExitError)
	}
	return nil
}
