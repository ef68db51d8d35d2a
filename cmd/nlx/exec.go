package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/spf13/cobra"

	"github.com/nlx-dev/nlx/host"
	"github.com/nlx-dev/nlx/images"
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
namespaces (and no network when egress is none), and the workspace's cgroup
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
$NLX_CREDENTIAL_ROOT (default: credentials/ beside the state); skill packages
under $NLX_SKILL_ROOT (default: skills/ beside the state; nlx apply installs
them).`,
		Args: cobra.MinimumNArgs(1),
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

// credentialRoot is $NLX_CREDENTIAL_ROOT, else "credentials" beside the
// state file.
func credentialRoot(statePath string) string {
	if r := os.Getenv("NLX_CREDENTIAL_ROOT"); r != "" {
		return r
	}
	return filepath.Join(filepath.Dir(statePath), "credentials")
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
	paths, err := launchHost(statePath)
	if err != nil {
		return err
	}
	l, err := launch.Resolve(ctx, appliedState{db}, paths, launch.Target{Workspace: opts.workspace, Connection: opts.connection})
	if err != nil {
		return err
	}
	req := &l.Request
	if os.Geteuid() == 0 {
		// Providers never run as root: as the host's provider user.
		u, err := host.ProviderUser(ctx)
		if err != nil {
			return err
		}
		req.User = &isolate.User{UID: u.UID, GID: u.GID}
	}
	req.Command = command
	req.HostEnv = os.Environ()
	req.Backend = isolate.Backend(opts.backend)
	if opts.inImage {
		if l.ImageDigest == "" {
			return &isolate.Refusal{Code: isolate.CodeInvalidRequest, Msg: fmt.Sprintf("workspace %s has no image", opts.workspace)}
		}
		if req.RootFS, err = imageRootFS(ctx, a, l.ImageDigest); err != nil {
			return err
		}
	}
	// SIGINT, SIGTERM or SIGHUP to nlx exec stops the launch as nlx stop
	// would. The sandbox is in its own process group and session, so a
	// terminal's Ctrl-C, or its hangup, reaches nlx only; dying of SIGHUP
	// would leave a runc container running, recorded but unattended.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	rec := &processRecorder{db: db}
	reapGone(ctx, a, db, rec)
	p, err := isolate.Launch(ctx, *req, isolate.Options{Recorder: rec, LaunchID: opts.launchID,
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

// reapGone writes the receipts of launches recorded as running whose tree
// is proven gone: an nlx that died (killed, or its terminal gone) left
// them so. Failures only leave them for the next run.
func reapGone(ctx context.Context, a *app, db *state.DB, rec *processRecorder) {
	rows, err := db.Processes(ctx, false)
	if err != nil {
		return
	}
	for _, r := range rows {
		var id isolate.Identity
		if json.Unmarshal([]byte(r.Identity), &id) != nil {
			continue
		}
		if gone, err := isolate.Gone(id); err != nil || !gone {
			continue
		}
		if _, err := isolate.Stop(ctx, id, 0, rec); err == nil {
			fmt.Fprintf(a.io.Err, "nlx: launch %s had ended unrecorded (the nlx that ran it died); its receipt is written\n", r.LaunchID)
		}
	}
}

// launchHost is where this host keeps what launches mount, beside the
// state unless the environment says otherwise.
func launchHost(statePath string) (launch.Host, error) {
	var h launch.Host
	var err error
	if h.WorkspaceRoot, err = filepath.Abs(host.DefaultWorkspaceRoot(statePath)); err != nil {
		return h, err
	}
	if h.CredentialRoot, err = filepath.Abs(credentialRoot(statePath)); err != nil {
		return h, err
	}
	if h.SkillRoot, err = filepath.Abs(host.DefaultSkillRoot(statePath)); err != nil {
		return h, err
	}
	return h, nil
}

// appliedState is the state as launch reads it.
type appliedState struct{ db *state.DB }

var _ launch.Applied = appliedState{}

func (s appliedState) Resource(ctx context.Context, address string) ([]byte, string, bool, error) {
	r, err := s.db.Resource(ctx, address)
	if err != nil || r == nil {
		return nil, "", false, err
	}
	return r.Spec, string(r.Status), true, nil
}

// processRecorder keeps launch identities and stop receipts in the state.
type processRecorder struct {
	db *state.DB
}

var _ isolate.Recorder = (*processRecorder)(nil)

func (r *processRecorder) Record(ctx context.Context, id isolate.Identity) error {
	data, err := json.Marshal(id)
	if err != nil {
		return err
	}
	return r.db.RecordProcess(ctx, state.ProcessRow{LaunchID: id.LaunchID, Workspace: id.Workspace, PID: id.PID,
		StartedAt: id.Started.UTC().Format(time.RFC3339Nano), Identity: string(data)})
}

func (r *processRecorder) Receipt(ctx context.Context, launchID string, rc isolate.Receipt) error {
	data, err := json.Marshal(rc)
	if err != nil {
		return err
	}
	err = r.db.StopProcess(ctx, launchID, string(data), rc.Stopped.UTC().Format(time.RFC3339Nano))
	if errors.Is(err, state.ErrNoProcess) {
		// Two stoppers (nlx stop, and the nlx exec whose process it ended)
		// both proved the tree gone; the first receipt stands.
		if row, rerr := r.db.Process(ctx, launchID); rerr == nil && row.Status == state.ProcessStopped {
			return nil
		}
	}
	return err
}

// imageRootFS unpacks the image the applied workspace is pinned to, from
// the store, for this host's platform, once per digest, with the mount
// points a launch needs.
func imageRootFS(ctx context.Context, a *app, digest string) (string, error) {
	store, err := a.imageStore()
	if err != nil {
		return "", err
	}
	d, err := v1.NewHash(digest)
	if err != nil {
		return "", &isolate.Refusal{Code: launch.CodeInvalidSpec, Msg: fmt.Sprintf("image digest %q: %v", digest, err)}
	}
	p, err := images.ParsePlatform("linux/" + runtime.GOARCH)
	if err != nil {
		return "", err
	}
	dir := filepath.Join(store.Dir, "rootfs", d.Hex, strings.ReplaceAll(p.String(), "/", "-"))
	if _, err := os.Stat(dir); err == nil {
		// Unpacked by an nlx that may not have made the mount points.
		return dir, isolate.PrepareRootFS(dir)
	}
	idx, err := store.Index(d)
	if err != nil {
		return "", err
	}
	img, err := images.PlatformImage(idx, p)
	if err != nil {
		return "", err
	}
	tmp := dir + ".tmp"
	os.RemoveAll(tmp)
	if err := images.Unpack(ctx, img, tmp); err != nil {
		return "", err
	}
	// The mount points bubblewrap, as the provider's user, cannot make.
	if err := isolate.PrepareRootFS(tmp); err != nil {
		return "", err
	}
	return dir, os.Rename(tmp, dir)
}
