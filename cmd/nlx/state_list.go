package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/nlx-dev/nlx/internal/procid"
	"github.com/nlx-dev/nlx/state"
)

func newStateListCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the resources in the state",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			return a.readState(ctx, func(db *state.DB) error { return listRun(ctx, a, db) })
		},
	}
	return cmd
}

func listRun(ctx context.Context, a *app, db *state.DB) error {
	lineage, serial, err := db.Meta(ctx)
	if err != nil {
		return err
	}
	rows, err := db.Rows(ctx)
	if err != nil {
		return err
	}
	lock, err := lockView(ctx, db)
	if err != nil {
		return err
	}
	jsonDoc := func() any {
		type item struct {
			Address  string `json:"address"`
			Kind     string `json:"kind"`
			Name     string `json:"name"`
			Status   string `json:"status"`
			Serial   int64  `json:"serial"`
			SpecHash string `json:"spec_hash"`
		}
		items := []item{}
		for _, r := range rows {
			items = append(items, item{r.Address, string(r.Kind), r.Name, string(r.Status), r.Serial, r.Hash})
		}
		return (struct {
			Lineage   string    `json:"lineage"`
			Serial    int64     `json:"serial"`
			Lock      *heldLock `json:"lock"` // null when nobody holds it
			Resources []item    `json:"resources"`
		}{lineage, serial, lock, items})
	}()
	return a.view.Render(document{Version: versionStateList, JSON: jsonDoc, Text: func(w io.Writer) error {
		fmt.Fprintf(a.io.Err, "state %s: lineage %s, serial %d, %d resources\n", db.Path(), lineage, serial, len(rows))
		if lock != nil {
			status := "running"
			if lock.HolderGone {
				status = "gone: the next run takes the lock over"
			}
			fmt.Fprintf(a.io.Err, "locked by %s (lock %s, pid %d on %s, user %s, since %s); holder %s\n",
				lock.Operation, lock.LockID, lock.PID, lock.Host, lock.User, lock.AcquiredAt, status)
		}
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ADDRESS\tSTATUS\tSERIAL\tSPEC HASH")
		for _, r := range rows {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", r.Address, r.Status, r.Serial, shortHash(r.Hash))
		}
		return tw.Flush()
	}})
}

// heldLock is the state lock as nlx state list shows it.
type heldLock struct {
	LockID     string `json:"lock_id"`
	Operation  string `json:"operation"`
	PID        int    `json:"pid"`
	Host       string `json:"host"`
	User       string `json:"user"`
	AcquiredAt string `json:"acquired_at"`
	// HolderGone: the holder is proven dead on this host (the next run
	// that needs the lock takes it over).
	HolderGone bool `json:"holder_gone"`
}

func lockView(ctx context.Context, db *state.DB) (*heldLock, error) {
	h, err := db.LockHolder(ctx)
	if err != nil || h == nil {
		return nil, err
	}
	gone, err := procid.Gone(h.Process)
	if err != nil {
		return nil, err
	}
	return &heldLock{LockID: h.LockID, Operation: h.Operation, PID: h.Process.PID, Host: h.Process.Host,
		User: h.Process.User, AcquiredAt: h.AcquiredAt.UTC().Format(time.RFC3339), HolderGone: gone}, nil
}

func shortHash(h string) string {
	if len(h) > 19 {
		return h[:19]
	}
	return h
}
