package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/nlx-dev/nlx/isolate"
	"github.com/nlx-dev/nlx/launch"
	"github.com/nlx-dev/nlx/reconcile"
	"github.com/nlx-dev/nlx/serve"
	"github.com/nlx-dev/nlx/state"
	"github.com/nlx-dev/nlx/turn"
)

type serveOptions struct {
	grace          time.Duration
	late           time.Duration
	poll           time.Duration
	permissionWait time.Duration
	idleTimeout    time.Duration
	timeout        time.Duration
	revalidate     time.Duration
	backend        string
	publish        string
	follow         string
	followEvery    time.Duration
	refreshTimeout time.Duration
}

func newServeCmd(a *app) *cobra.Command {
	opts := &serveOptions{}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the applied jobs on their schedules, in the foreground",
		Long: `Serve runs the jobs of the applied state (never a config directory) on
their schedules and picks up every serial nlx apply writes while it runs,
without a restart. One serve per state: it takes the serve lock, apart from
the apply lock, so applies go on while it runs.

Every occurrence is claimed in the state before anything is launched for
it (unique by job and instant), dispatched with its binding in the
transaction that begins its turn, and ended in the transaction that ends
the turn. One turn runs at a time per conversation (a job's conversation,
default its name); independent conversations run at once, with no global
cap. concurrency skip drops an occurrence due while the job's previous one
runs (recorded as skipped), queue runs it after. catchUp skip runs nothing
missed while serve was down; latest runs the most recent missed
occurrence once.

On start serve settles what an nlx that died left: a dispatched occurrence
whose process is proven gone without a recorded end is unknown. It is
never retried, and nothing else runs in its conversation until a person
resolves it (nlx resolve claim); plans show it, and changes to its job,
workspace or connection carry unknown_claim.

SIGTERM (or Ctrl-C) stops admitting, lets running turns finish for
--grace, then interrupts them and stops their process trees: they are
recorded interrupted, not done. Under systemd (Type=notify) serve says
READY once it serves. Progress goes to stderr, one line per event.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return serveRun(cmd.Context(), a, opts)
		},
	}
	f := cmd.Flags()
	f.DurationVar(&opts.grace, "grace", serve.DefaultGrace, "how long running turns may take to finish after SIGTERM")
	f.DurationVar(&opts.late, "late", serve.DefaultLate, "how far behind its instant an occurrence still runs; older ones were missed (catchUp decides)")
	f.DurationVar(&opts.poll, "poll", serve.DefaultPoll, "how often serve looks for a new applied serial")
	f.DurationVar(&opts.permissionWait, "permission-wait", serve.DefaultPermissionWait, "how long a job's permission request waits for an admin's decision (nlx permissions allow|deny) before it is denied")
	f.DurationVar(&opts.idleTimeout, "idle-timeout", serve.DefaultIdleTimeout, "interrupt a turn whose provider sends nothing this long (0: never)")
	f.DurationVar(&opts.timeout, "timeout", 0, "interrupt a turn after this long (0: never)")
	f.DurationVar(&opts.revalidate, "revalidate-every", turn.DefaultRevalidate, "how often a running turn's binding is checked against the applied state")
	f.StringVar(&opts.backend, "backend", "", "bwrap or runc (default: bwrap where it works, else runc)")
	f.StringVar(&opts.publish, "publish", "", "publish the state to registry `REF` at start and whenever its content changes (nlx state publish)")
	f.StringVar(&opts.follow, "follow", "", "follow registry `REF` as nlx follow does: apply the plans published there once approved")
	f.DurationVar(&opts.followEvery, "follow-interval", 30*time.Second, "how often --follow and --publish look")
	f.DurationVar(&opts.refreshTimeout, "refresh-timeout", turn.DefaultRefreshTimeout, "how long a worker has to answer each request of a catalog refresh; an unanswered write or reload is unknown")
	return cmd
}

// runner is the turn runner of a command on db: this host's roots beside
// the state, nlx's adapters, and pool (nil but in nlx serve).
func runner(db *state.DB, pool *turn.Pool) (*turn.Runner, error) {
	paths, err := launch.HostFor(db.Path())
	if err != nil {
		return nil, err
	}
	return &turn.Runner{DB: db, Host: paths, Adapters: adapters(), Pool: pool}, nil
}

func serveRun(ctx context.Context, a *app, opts *serveOptions) error {
	db, err := a.openState(ctx, true)
	if err != nil {
		return err
	}
	defer db.Close()
	logf := func(format string, args ...any) {
		fmt.Fprintf(a.io.Err, "nlx serve: "+format+"\n", args...)
	}
	r, err := runner(db, &turn.Pool{Log: logf})
	if err != nil {
		return err
	}
	r.RefreshTimeout = opts.refreshTimeout
	s := &serve.Server{DB: db, Runner: r, Opts: serve.Options{
		Grace: opts.grace, Late: opts.late, Poll: opts.poll, PermissionWait: opts.permissionWait,
		IdleTimeout: opts.idleTimeout, Timeout: opts.timeout, Revalidate: opts.revalidate,
		HostEnv: os.Environ(), Backend: isolate.Backend(opts.backend),
		Log:     logf,
		Ready:   func() { sdNotify("READY=1") },
		Release: r.Pool.Close,
		Changed: func(serial int64, addresses []string) { r.Applied(ctx, serial, addresses) },
		Refresh: func(ctx context.Context, q state.RefreshRequestRow) []state.RefreshRow {
			_, serial, _ := db.Meta(ctx)
			return r.Refresh(ctx, q.Workspace, turn.Trigger{Kind: state.RefreshManual, RequestID: q.ID, Actor: q.Actor, Serial: serial})
		},
	}}
	gctx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	if opts.follow != "" {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = followLoop(gctx, a, opts.follow, opts.followEvery, a.io.Err)
		}()
	}
	if opts.publish != "" {
		wg.Add(1)
		go func() {
			defer wg.Done()
			publishLoop(gctx, db, opts.publish, opts.followEvery, logf)
		}()
	}
	err = s.Serve(ctx)
	stop()
	wg.Wait()
	sdNotify("STOPPING=1")
	return err
}

// publishLoop publishes the state to ref at start and whenever its content
// hash changes (an apply, an outcome that became unknown, a resolution),
// looking every interval; a failed push is logged and retried.
func publishLoop(ctx context.Context, db *state.DB, ref string, interval time.Duration, logf func(string, ...any)) {
	published := ""
	for {
		// One read and one encoding per look; pushed only when the basis
		// moved.
		if snap, err := db.Snapshot(ctx); err == nil {
			if data, basis, err := reconcile.EncodeSnapshot(snap); err == nil && basis != published {
				if _, err := pushSnapshot(ctx, snap, data, basis, ref); err != nil {
					logf("publish the state to %s: %v (retried in %s)", ref, err, interval)
				} else {
					published = basis
					logf("published state serial %d (basis %s) to %s", snap.Serial, basis, ref)
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(interval):
		}
	}
}

// sdNotify tells systemd (Type=notify) how serve is: a datagram to
// $NOTIFY_SOCKET, as sd_notify(3) sends it. Without the variable it does
// nothing.
func sdNotify(state string) {
	path := os.Getenv("NOTIFY_SOCKET")
	if path == "" {
		return
	}
	if path[0] == '@' {
		path = "\x00" + path[1:] // an abstract socket
	}
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		return
	}
	defer conn.Close()
	conn.Write([]byte(state))
}
