package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/nlx-dev/nlx/state"
)

// versionGC is the format_version of nlx gc's JSON document (beside the
// others in view.go).
const versionGC = 1

// exportManifest is the file that makes a directory a preservation's
// export: gc removes no directory without it.
const exportManifest = "manifest.json"

type gcOptions struct {
	dryRun bool
}

func newGCCmd(a *app) *cobra.Command {
	opts := &gcOptions{}
	cmd := &cobra.Command{
		Use:   "gc [--dry-run]",
		Short: "Remove settled state older than the applied host.retention.days",
		Long: `Gc removes what settled longer ago than host.retention.days (of the applied
host.config; 90 days by default): the journal of finished applies whose
every effect has a known outcome, stop receipts, ended occurrence claims,
and the export directories of imports that are released. It never removes
what is live or unknown: an apply without an outcome, a launch recorded
running, a claim claimed, dispatched or unknown and unresolved, the claim
that is a job's last outcome or keeps a one-time job done, an export whose
imported jobs are held. Every item older than the cutoff that stays is
listed with why.

--dry-run lists exactly what gc would remove, and removes nothing. Gc
takes the state lock: it never runs beside an apply (exit 4 while one
holds it).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return gcRun(cmd.Context(), a, opts) },
	}
	cmd.Flags().BoolVar(&opts.dryRun, "dry-run", false, "list what gc would remove and why the rest stays; remove nothing")
	return cmd
}

// gcDoc is nlx gc's result.
type gcDoc struct {
	DryRun        bool `json:"dry_run"`
	RetentionDays int  `json:"retention_days"`
	*state.GCReport
}

func gcRun(ctx context.Context, a *app, opts *gcOptions) error {
	return a.withState(ctx, func(db *state.DB) error {
		lock, err := db.Lock(ctx, "gc")
		if err != nil {
			return err
		}
		// Held until the export directories are removed too: an apply
		// importing into one of them waits.
		defer db.Unlock(context.WithoutCancel(ctx), lock.ID)
		if lock.TookOverFrom != nil {
			fmt.Fprintf(a.io.Err, "Took over the state lock from %s: that process is gone.\n", lock.TookOverFrom)
		}
		days, cutoff, err := db.Retention(ctx)
		if err != nil {
			return err
		}
		rep, err := db.GC(ctx, lock.ID, cutoff, opts.dryRun)
		if err != nil {
			return err
		}
		checkExports(rep)
		var failed error
		if !opts.dryRun {
			failed = removeExports(rep)
		}
		doc := gcDoc{DryRun: opts.dryRun, RetentionDays: days, GCReport: rep}
		if err := a.view.Render(document{Version: versionGC, JSON: doc, Text: func(w io.Writer) error { return gcText(w, doc) }}); err != nil {
			return err
		}
		return failed
	})
}

func gcText(w io.Writer, doc gcDoc) error {
	fmt.Fprintf(w, "Retention %d day(s) (host.retention.days of the applied host.config): cutoff %s.\n",
		doc.RetentionDays, state.FormatInstant(doc.Cutoff))
	removed, kept := "removed", "kept"
	if doc.DryRun {
		removed, kept = "would remove", "keep"
	}
	if len(doc.Removed)+len(doc.Kept) > 0 {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ACTION\tKIND\tID\tENDED\tWHY")
		row := func(action string, it state.GCItem) {
			why := it.Why
			if it.Path != "" {
				why = it.Path + ": " + why
			}
			if it.Code != "" {
				why += " [" + string(it.Code) + "]"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", action, it.Kind, it.ID, dash(it.At), why)
		}
		for _, it := range doc.Removed {
			row(removed, it)
		}
		for _, it := range doc.Kept {
			row(kept, it)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	verb := "Removed"
	if doc.DryRun {
		verb = "Would remove"
	}
	n := doc.Newer
	fmt.Fprintf(w, "%s %d item(s); kept %d older than the cutoff. Newer than the cutoff, kept: %d apply(ies), %d launch(es), %d claim(s), %d import(s), %d refresh(es).\n",
		verb, len(doc.Removed), len(doc.Kept), n[state.GCJournal], n[state.GCReceipt], n[state.GCClaim], n[state.GCExport], n[state.GCRefresh])
	if doc.DryRun {
		fmt.Fprintln(w, "Dry run: nothing was removed.")
	}
	return nil
}

// checkExports looks at each expired export directory before anything is
// removed, in a dry run as in a run: it must be a directory, not a
// symbolic link nor reached through one, holding a regular manifest.json
// whose SHA-256 is the one imported. Any other stays, saying why; one
// already gone (an earlier gc removed it) is left out of the report.
func checkExports(rep *state.GCReport) {
	removed := []state.GCItem{}
	for _, it := range rep.Removed {
		if it.Kind != state.GCExport {
			removed = append(removed, it)
			continue
		}
		why, gone := exportRefusal(it)
		switch {
		case gone:
		case why != "":
			it.Why = why
			rep.Kept = append(rep.Kept, it)
		default:
			removed = append(removed, it)
		}
	}
	rep.Removed = removed
}

// exportRefusal is why the export directory of it may not be removed (""
// when it may); gone reports that it is not there at all.
func exportRefusal(it state.GCItem) (why string, gone bool) {
	if !filepath.IsAbs(it.Path) {
		return fmt.Sprintf("the export directory %q is not an absolute path: gc cannot tell where it is", it.Path), false
	}
	dir := filepath.Clean(it.Path)
	fi, err := os.Lstat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", true
	case err != nil:
		return fmt.Sprintf("the export directory cannot be read: %v", err), false
	case fi.Mode()&fs.ModeSymlink != 0:
		return "a symbolic link, not the export directory itself: gc never follows one", false
	case !fi.IsDir():
		return "not a directory: gc removes only export directories", false
	}
	if resolved, err := filepath.EvalSymlinks(dir); err != nil || resolved != dir {
		return fmt.Sprintf("its path leads through a symbolic link (to %q): gc never follows one", resolved), false
	}
	if it.Manifest == "" {
		return "the import records no manifest digest to check the directory against", false
	}
	sum, err := manifestDigest(filepath.Join(dir, exportManifest))
	if err != nil {
		return fmt.Sprintf("holds no readable %s of its own (%v): not an export, and gc removes only exports", exportManifest, err), false
	}
	if sum != it.Manifest {
		return fmt.Sprintf("holds another export than the one imported (%s %s, imported %s): it waits for its own import", exportManifest, sum, it.Manifest), false
	}
	return "", false
}

// manifestDigest is "sha256:" and the hex SHA-256 of the regular file at
// path, opened without following a symbolic link.
func manifestDigest(path string) (string, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return "", err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", err
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("%s is not a regular file", filepath.Base(path))
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

// removeExports removes the export directories the report lists as
// removed, each only after the report listed it; os.RemoveAll removes the
// links inside without following them. One that cannot be removed moves
// to the kept list with the error, and gc fails.
func removeExports(rep *state.GCReport) error {
	var errs []error
	removed := []state.GCItem{}
	for _, it := range rep.Removed {
		if it.Kind != state.GCExport {
			removed = append(removed, it)
			continue
		}
		if err := os.RemoveAll(filepath.Clean(it.Path)); err != nil {
			it.Why = fmt.Sprintf("removing it failed (what is left stays): %v", err)
			rep.Kept = append(rep.Kept, it)
			errs = append(errs, fmt.Errorf("remove export directory %s of %s: %w", it.Path, it.ID, err))
			continue
		}
		removed = append(removed, it)
	}
	rep.Removed = removed
	return errors.Join(errs...)
}
