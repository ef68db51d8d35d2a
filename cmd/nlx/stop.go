package main

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/nlx-dev/nlx/internal/reason"
	"github.com/nlx-dev/nlx/isolate"
	"github.com/nlx-dev/nlx/launch"
	"github.com/nlx-dev/nlx/state"
	"github.com/spf13/cobra"
)

func newStopCmd(a *app) *cobra.Command {
	var grace time.Duration
	cmd := &cobra.Command{
		Use:   "stop LAUNCH_ID",
		Short: "Stop a recorded provider process and its whole tree",
		Long: `Stop sends SIGTERM to the launch's process tree (only while its pid still
has the recorded start time: a recycled pid is never signalled), waits up
to --grace, then kills everything left in its cgroup. Once the tree is
proven gone it writes a stop receipt and releases the identity.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			return a.withState(ctx, func(db *state.DB) error {
				row, err := db.Process(ctx, args[0])
				if err != nil {
					return err
				}
				if row.Status != state.ProcessRunning {
					return reason.New(reason.LaunchStopped, "launch %s already stopped at %s", args[0], row.StoppedAt)
				}
				var id isolate.Identity
				if err := json.Unmarshal([]byte(row.Identity), &id); err != nil {
					return fmt.Errorf("launch %s: %w", args[0], err)
				}
				rc, err := isolate.Stop(ctx, id, grace, launch.Recorder{DB: db})
				if err != nil {
					return err
				}
				return a.say(versionStop, map[string]any{"launch_id": args[0], "receipt": rc},
					"Stopped %s: %s (%d terminated, %d killed).", args[0], rc.Outcome, rc.Terminated, rc.Killed)
			})
		},
	}
	cmd.Flags().DurationVar(&grace, "grace", 10*time.Second, "how long the tree may take to end after SIGTERM")
	return cmd
}
