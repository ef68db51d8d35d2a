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
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/nlx-dev/nlx/images"
	"github.com/nlx-dev/nlx/isolate"
	"github.com/nlx-dev/nlx/provision"
	"github.com/nlx-dev/nlx/reconcile/state"
	"github.com/nlx-dev/nlx/schema"
)

type execOptions struct {
	config     string
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
connection C: only the workspace (read-only or read-write by its policy),
only C's credential home, only the workspace's skills, a private /tmp, new
namespaces (and no network when egress is none), and the workspace's cgroup
limits. The process is recorded in the state before it runs and, once it
exits, its whole tree is stopped and a stop receipt written. The exit code is
CMD's. SIGINT (Ctrl-C), SIGTERM or SIGHUP to nlx exec stops the launch as
nlx stop does (SIGTERM to the tree, --grace, then SIGKILL), writes the
receipt and exits 128 + the signal's number (130 for Ctrl-C).

The workspace directory is $NLX_WORKSPACE_ROOT/W (default: workspaces/ beside
the state; nlx apply creates it); credential homes live under
$NLX_CREDENTIAL_ROOT (default: credentials/ beside the state).`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return execRun(cmd.Context(), a, opts, args)
		},
	}
	cmd.Flags().StringVar(&opts.config, "config", ".", "config `DIR`")
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
	cfg, err := schema.Load(ctx, opts.config)
	if err != nil {
		return err
	}
	req, err := launchRequest(cfg, opts)
	if err != nil {
		return err
	}
	statePath, err := a.resolveState()
	if err != nil {
		return err
	}
	req.WorkspaceRoot, err = filepath.Abs(provision.DefaultWorkspaceRoot(statePath))
	if err != nil {
		return err
	}
	req.WorkspaceDir = filepath.Join(req.WorkspaceRoot, opts.workspace)
	if req.CredentialRoot, err = filepath.Abs(credentialRoot(statePath)); err != nil {
		return err
	}
	req.Command = command
	req.HostEnv = os.Environ()
	if opts.inImage {
		if req.RootFS, err = imageRootFS(ctx, a, cfg, opts.workspace); err != nil {
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
	return a.withState(ctx, func(db *state.DB) error {
		rec := &processRecorder{db: db}
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
		if row, err := db.Process(bg, p.Identity.LaunchID); err != nil || row.Status == "running" {
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
	})
}

// launchRequest resolves what a provider of the workspace and connection
// gets: policy, egress, limits, the connection's credential home, the
// workspace's team skills and the connection owner's personal ones, and the
// provider's own environment.
func launchRequest(cfg *schema.Config, opts *execOptions) (*isolate.Request, error) {
	w := cfg.Workspaces[opts.workspace]
	if w == nil {
		return nil, &isolate.Refusal{Code: "unknown_workspace", Msg: fmt.Sprintf("the config has no workspace %q", opts.workspace)}
	}
	c := cfg.Connections[opts.connection]
	switch {
	case c == nil:
		return nil, &isolate.Refusal{Code: "unknown_connection", Msg: fmt.Sprintf("the config has no connection %q", opts.connection)}
	case c.Workspace != opts.workspace:
		return nil, &isolate.Refusal{Code: schema.CodeWrongWorkspace, Msg: fmt.Sprintf("connection %s belongs to workspace %s, not %s", opts.connection, c.Workspace, opts.workspace)}
	case c.Scope == "personal" && w.Kind == "team":
		return nil, &isolate.Refusal{Code: schema.CodePersonalOnTeam, Msg: fmt.Sprintf("personal connection %s cannot run in team workspace %s", opts.connection, opts.workspace)}
	}
	mem, err := memoryBytes(w.Limits.Memory)
	if err != nil {
		return nil, err
	}
	req := &isolate.Request{
		Workspace:      opts.workspace,
		Policy:         isolate.Policy(w.Policy),
		Egress:         isolate.Egress(w.Network.Egress),
		CredentialHome: c.CredentialHome,
		Limits:         isolate.Limits{MemoryBytes: mem, CPU: w.Limits.CPU, Pids: w.Limits.Pids},
		Backend:        isolate.Backend(opts.backend),
		Env:            map[string]string{},
	}
	if p := cfg.Providers[c.Provider]; p != nil {
		for k, v := range p.Env {
			req.Env[k] = v
		}
		switch p.Kind {
		case "codex-app-server":
			req.Env["CODEX_HOME"] = isolate.CredentialPath
		case "claude-code":
			req.Env["CLAUDE_CONFIG_DIR"] = isolate.CredentialPath
		}
	}
	for _, name := range w.Skills {
		sk := cfg.Skills[name]
		if sk == nil || (sk.Scope == "personal" && sk.Owner != c.Owner) {
			continue // another owner's personal skill stays invisible
		}
		dir, err := filepath.Abs(filepath.Join(opts.config, filepath.FromSlash(sk.Path)))
		if err != nil {
			return nil, err
		}
		req.Skills = append(req.Skills, isolate.SkillMount{Name: name, Dir: dir})
	}
	return req, nil
}

// memoryBytes reads a workspace memory limit: bytes, or Ki, Mi, Gi.
func memoryBytes(s string) (int64, error) {
	mult := int64(1)
	for suffix, m := range map[string]int64{"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30} {
		if strings.HasSuffix(s, suffix) {
			s, mult = strings.TrimSuffix(s, suffix), m
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("memory limit %q: %w", s, err)
	}
	return n * mult, nil
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
		if row, rerr := r.db.Process(ctx, launchID); rerr == nil && row.Status == "stopped" {
			return nil
		}
	}
	return err
}

// imageRootFS unpacks the workspace's image, as the last plan pinned it in
// the store, for this host's platform, once per digest.
func imageRootFS(ctx context.Context, a *app, cfg *schema.Config, workspace string) (string, error) {
	w := cfg.Workspaces[workspace]
	if w.Image == "" {
		return "", &isolate.Refusal{Code: isolate.CodeInvalidRequest, Msg: fmt.Sprintf("workspace %s has no image", workspace)}
	}
	store, err := a.imageStore()
	if err != nil {
		return "", err
	}
	d, err := store.Named(w.Image)
	if err != nil {
		return "", err
	}
	p, err := images.ParsePlatform("linux/" + runtime.GOARCH)
	if err != nil {
		return "", err
	}
	dir := filepath.Join(store.Dir, "rootfs", d.Hex, strings.ReplaceAll(p.String(), "/", "-"))
	if _, err := os.Stat(dir); err == nil {
		return dir, nil
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
	return dir, os.Rename(tmp, dir)
}
