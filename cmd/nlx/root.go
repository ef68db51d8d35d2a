package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/nlx-dev/nlx/images"
	"github.com/nlx-dev/nlx/reconcile"
	"github.com/nlx-dev/nlx/state"
)

// IO is where a command reads and writes: results on Out, diagnostics and
// prompts on Err.
type IO struct {
	In          io.Reader
	Out         io.Writer
	Err         io.Writer
	InTerminal  bool
	OutTerminal bool
	ErrTerminal bool // progress goes to stderr only when it is a terminal
}

// app holds what every command shares.
type app struct {
	io        *IO
	statePath string // --state
	noColor   bool   // --no-color
	// outputFlag is --output; view prints in that format, chosen once
	// for the running command (and errors through it too).
	outputFlag string
	view       view
}

// Main runs nlx with args and returns its exit code.
func Main(ctx context.Context, args []string, streams *IO) ExitCode {
	a := &app{io: streams}
	root := newRootCmd(a)
	root.SetArgs(args)
	root.SetIn(streams.In)
	root.SetOut(streams.Out)
	root.SetErr(streams.Err)
	err := root.ExecuteContext(ctx)
	return a.report(err)
}

func newRootCmd(a *app) *cobra.Command {
	root := &cobra.Command{
		Use:   "nlx",
		Short: "Declarative reconciliation for a self-hosted agent runtime",
		Long: `nlx keeps an agent runtime host in the state its CUE configuration describes.

  nlx plan DIR --out plan.json   show what would change and save the plan
  nlx apply plan.json            carry out exactly that plan

Exit codes: 0 success or no changes, 1 error, 2 changes present (plan
--detailed-exitcode), 3 approval required or refused (or a turn blocked on
a permission), 4 state locked.`,
		SilenceErrors: true,
		SilenceUsage:  true,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("unknown command %q for %q", args[0], cmd.CommandPath())
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error { return cmd.Help() },
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			if err := a.chooseView(cmd); err != nil {
				return err
			}
			return checkRequired(cmd)
		},
	}
	root.PersistentFlags().StringVar(&a.statePath, "state", "", "state file (default $NLX_STATE, else $XDG_STATE_HOME/nlx/state.db)")
	root.PersistentFlags().BoolVar(&a.noColor, "no-color", false, "never colour output")
	root.PersistentFlags().StringVarP(&a.outputFlag, "output", "o", "text", "output `FORMAT`: text, json, or (plan, show) markdown")
	root.AddCommand(
		newPlanCmd(a),
		newApplyCmd(a),
		newApproveCmd(a),
		newResolveCmd(a),
		newShowCmd(a),
		newValidateCmd(a),
		newStateCmd(a),
		newSchemaCmd(a),
		newVersionCmd(a),
		newImageCmd(a),
		newDoctorCmd(a),
		newExecCmd(a),
		newPsCmd(a),
		newStopCmd(a),
		newTurnCmd(a),
		newTurnsCmd(a),
		newRefreshCmd(a),
		newRefreshesCmd(a),
		newPermissionsCmd(a),
		newPromoteCmd(a),
		newFollowCmd(a),
		newWhoamiCmd(a),
		newPreserveCmd(a),
		newServeCmd(a),
		newJobsCmd(a),
		newRunCmd(a),
		newGCCmd(a),
	)
	usageCodes(root)
	return root
}

// resolveState returns the state path from --state or the defaults.
func (a *app) resolveState() (string, error) {
	if a.statePath != "" {
		return a.statePath, nil
	}
	return state.DefaultPath()
}

// openState opens the state; mustExist refuses to create it.
func (a *app) openState(ctx context.Context, mustExist bool) (*state.DB, error) {
	path, err := a.resolveState()
	if err != nil {
		return nil, err
	}
	return state.Open(ctx, path, state.Options{MustExist: mustExist})
}

// withState runs fn with the existing state open for writing.
func (a *app) withState(ctx context.Context, fn func(db *state.DB) error) error {
	db, err := a.openState(ctx, true)
	if err != nil {
		return err
	}
	defer db.Close()
	return fn(db)
}

// readState runs fn with the existing state open read-only: reading
// commands never create, migrate or repair a state, and work where the
// state's directory is read-only.
func (a *app) readState(ctx context.Context, fn func(db *state.DB) error) error {
	path, err := a.resolveState()
	if err != nil {
		return err
	}
	db, err := state.Open(ctx, path, state.Options{ReadOnly: true})
	if err != nil {
		return err
	}
	defer db.Close()
	return fn(db)
}

// planSnapshot reads the applied state a plan diffs against, read-only.
// Where there is no state yet the plan is made against an empty one with
// no lineage, which only a state that was never applied matches (apply
// creates it).
func (a *app) planSnapshot(ctx context.Context) (*reconcile.Snapshot, error) {
	var snap *reconcile.Snapshot
	err := a.readState(ctx, func(db *state.DB) error {
		var err error
		snap, err = db.Snapshot(ctx)
		return err
	})
	if errors.Is(err, state.ErrNoState) {
		return &reconcile.Snapshot{}, nil
	}
	return snap, err
}

// buildInputs are what every image build takes from the host: the image
// store (and its layer cache) and the time every file gets
// (SOURCE_DATE_EPOCH).
func (a *app) buildInputs() (*images.Store, time.Time, error) {
	store, err := a.imageStore()
	if err != nil {
		return nil, time.Time{}, err
	}
	epoch, err := images.EpochFromEnv()
	return store, epoch, err
}

// imageStore is the local image store beside the state.
func (a *app) imageStore() (*images.Store, error) {
	path, err := a.resolveState()
	if err != nil {
		return nil, err
	}
	if d := os.Getenv("NLX_IMAGE_STORE"); d != "" {
		return &images.Store{Dir: d}, nil
	}
	return &images.Store{Dir: images.DefaultStoreDir(path)}, nil
}

// color reports whether the text view may use ANSI colour.
func (a *app) color() bool {
	return a.io.OutTerminal && !a.noColor && os.Getenv("NO_COLOR") == ""
}
