package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/nlx-dev/nlx/internal/reason"
	"github.com/nlx-dev/nlx/preserve"
	"github.com/nlx-dev/nlx/reconcile"
	"github.com/nlx-dev/nlx/schema"
)

func newPreserveCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "preserve",
		Short: "Inventory, export and verify an OpenClaw installation a preservations entry names",
		Long: `Preserve reads the OpenClaw installation a preservations entry of the config
names, never writing to it. inventory counts and hashes its records per kind
and says what nlx will import, keep raw or not support, and where secrets
are (by location, never by value). export writes a consistent snapshot to
the entry's export directory, refusing while an OpenClaw gateway still
writes the installation (--drain waits for it). verify proves an export
whole against its manifest and the entry's expected counts and hashes.
The import itself is nlx plan and nlx apply of the config: it creates every
imported job held, for an admin's reviewed plan to release.`,
	}
	cmd.AddCommand(newPreserveInventoryCmd(a), newPreserveExportCmd(a), newPreserveVerifyCmd(a))
	return cmd
}

const (
	versionPreserveInventory = 1 // nlx preserve inventory
	versionPreserveExport    = 1 // nlx preserve export
	versionPreserveVerify    = 1 // nlx preserve verify
)

// preservation loads the config in DIR (args[1], default ".") and
// returns its entry NAME (args[0]).
func preservation(ctx context.Context, args []string) (*schema.Preservation, error) {
	name, dir := args[0], "."
	if len(args) > 1 {
		dir = args[1]
	}
	cfg, err := loadConfig(ctx, dir)
	if err != nil {
		return nil, err
	}
	p := cfg.Preservations[name]
	if p == nil {
		return nil, reason.New(reason.NoSuchPreservation, "the config in %s has no preservations entry %q (it has: %v)", dir, name, slices.Sorted(maps.Keys(cfg.Preservations)))
	}
	return p, nil
}

func newPreserveInventoryCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "inventory NAME [DIR]",
		Short: "Count and hash an OpenClaw installation's records, read-only",
		Args:  cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			p, err := preservation(ctx, args)
			if err != nil {
				return err
			}
			prog := a.newProgress()
			prog.Line(fmt.Sprintf("inventory of %s", p.Source.Path))
			inv, err := preserve.Take(ctx, p.Source.Path)
			prog.Wait()
			if err != nil {
				return err
			}
			return a.view.Render(document{Version: versionPreserveInventory, JSON: inv, Text: func(w io.Writer) error {
				return inventoryText(w, inv)
			}})
		},
	}
}

func inventoryText(w io.Writer, inv *preserve.Inventory) error {
	version := inv.Version
	if version == "" {
		version = "unknown version"
	}
	fmt.Fprintf(w, "OpenClaw installation %s: %s (%s), %d files, %d bytes\n\n", inv.Source, inv.Era, version, inv.Files, inv.Bytes)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KIND\tCOUNT\tSHA-256\tNLX WILL\tWHY")
	for _, d := range inv.Decisions {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", d.Kind, inv.Counts[d.Kind], inv.Hashes[d.Kind], d.Action, d.Reason)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(inv.Unsupported) > 0 {
		fmt.Fprintf(w, "\nNot supported (%d, kept in the export's own section):\n", len(inv.Unsupported))
		for _, it := range inv.Unsupported {
			fmt.Fprintf(w, "  %s %s: %s\n", it.Kind, it.ID, it.Reason)
		}
	}
	if len(inv.Secrets) > 0 {
		fmt.Fprintf(w, "\nSecrets (%d; they stay where they are, the export holds references):\n", len(inv.Secrets))
		for _, s := range inv.Secrets {
			fmt.Fprintf(w, "  %s\n", s.Location)
		}
	}
	return nil
}

func newPreserveExportCmd(a *app) *cobra.Command {
	var drain, replace bool
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "export NAME [DIR]",
		Short: "Write a consistent snapshot of an OpenClaw installation to the entry's export directory",
		Args:  cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			p, err := preservation(ctx, args)
			if err != nil {
				return err
			}
			prog := a.newProgress()
			m, err := preserve.Write(ctx, p.Source.Path, p.Export, preserve.ExportOptions{LockDir: p.Source.LockDir,
				Drain: drain, Timeout: timeout, Replace: replace, Progress: prog.Line})
			prog.Wait()
			if err != nil {
				return err
			}
			e, err := preserve.ReadExport(p.Export)
			if err != nil {
				return err
			}
			doc := map[string]any{"export": p.Export, "manifest": e.ManifestHash, "era": m.Source.Era, "counts": m.Counts, "hashes": m.Hashes,
				"jobs": len(e.Projections.Jobs), "conversations": len(e.Projections.Conversations), "unsupported": m.Unsupported}
			return a.view.Render(document{Version: versionPreserveExport, JSON: doc, Text: func(w io.Writer) error {
				fmt.Fprintf(w, "Exported %s (%s) to %s: source revision %s\n", m.Source.Path, m.Source.Era, p.Export, e.ManifestHash)
				fmt.Fprintf(w, "%d jobs, %d conversations, %d records not supported. nlx plan shows what the import creates.\n",
					len(e.Projections.Jobs), len(e.Projections.Conversations), m.Unsupported)
				return nil
			}})
		},
	}
	cmd.Flags().BoolVar(&drain, "drain", false, "wait for OpenClaw to stop writing the installation instead of refusing")
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Minute, "how long --drain waits")
	cmd.Flags().BoolVar(&replace, "replace", false, "replace an existing export")
	return cmd
}

func newPreserveVerifyCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "verify NAME [DIR]",
		Short: "Prove an export whole against its manifest and the entry's expected counts and hashes",
		Args:  cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			p, err := preservation(ctx, args)
			if err != nil {
				return err
			}
			prog := a.newProgress()
			prog.Line(fmt.Sprintf("verifying %s", p.Export))
			e, err := preserve.Verify(ctx, p.Export)
			prog.Wait()
			if err != nil {
				return err
			}
			m := e.Manifest
			if bad := reconcile.CheckExpected(p, e.Import(args[0], p)); len(bad) > 0 {
				return reason.New(bad[0].Code, "%s", bad[0].Reason)
			}
			doc := map[string]any{"export": p.Export, "manifest": e.ManifestHash, "verified": true, "counts": m.Counts}
			return a.view.Render(document{Version: versionPreserveVerify, JSON: doc, Text: func(w io.Writer) error {
				fmt.Fprintf(w, "Export %s verified: every record as its manifest says (source revision %s), counts and hashes as expected.\n", p.Export, e.ManifestHash)
				return nil
			}})
		},
	}
}
