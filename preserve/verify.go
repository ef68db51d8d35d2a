package preserve

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/nlx-dev/nlx/internal/reason"
)

// Export is an export as read back: its manifest, the manifest's hash (the
// source revision) and its projections. ReadExport checks the manifest's
// own files; Verify checks every record too.
type Export struct {
	Dir          string
	Manifest     *Manifest
	ManifestHash string
	Projections  *Projections
}

// ReadExport reads the export in dir: its manifest and projections, each
// file checked against the manifest's hash of it. It does not re-hash the
// raw records (Verify does).
func ReadExport(dir string) (*Export, error) {
	data, err := os.ReadFile(filepath.Join(dir, manifestFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, reason.New(reason.ExportMissing, "%s holds no export (%v): run nlx preserve export", dir, errNoExport)
	}
	if err != nil {
		return nil, reason.New(reason.ExportCorrupt, "read %s: %v", filepath.Join(dir, manifestFile), err)
	}
	var m Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, reason.New(reason.ExportCorrupt, "%s: %v", filepath.Join(dir, manifestFile), err)
	}
	if m.FormatVersion != ManifestVersion {
		return nil, reason.New(reason.ExportCorrupt, "%s has format_version %d; this nlx reads %d", filepath.Join(dir, manifestFile), m.FormatVersion, ManifestVersion)
	}
	for _, rel := range sortedKeys(m.Files) {
		got, err := fileSum(filepath.Join(dir, filepath.FromSlash(rel)))
		if err != nil || got != m.Files[rel] {
			return nil, reason.New(reason.ExportCorrupt, "%s of the export %s does not match its manifest (%v)", rel, dir, orMismatch(err))
		}
	}
	e := &Export{Dir: dir, Manifest: &m, ManifestHash: ManifestHash(data), Projections: &Projections{}}
	for rel, v := range map[string]any{"projections/jobs.json": &e.Projections.Jobs, "projections/conversations.json": &e.Projections.Conversations,
		"projections/skills.json": &e.Projections.Skills, "projections/connections.json": &e.Projections.Connections} {
		data, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(rel)))
		if err != nil {
			return nil, reason.New(reason.ExportCorrupt, "read %s: %v", rel, err)
		}
		if err := json.Unmarshal(data, v); err != nil {
			return nil, reason.New(reason.ExportCorrupt, "%s: %v", rel, err)
		}
	}
	return e, nil
}

func orMismatch(err error) string {
	if err != nil {
		return err.Error()
	}
	return "its SHA-256 differs"
}

func fileSum(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

// Verify reads the export in dir back and proves it whole: its files
// match the manifest, and every raw record hashes as the manifest says
// (the counts, each kind's hash, and records.tsv, whose first differing
// record is named).
func Verify(ctx context.Context, dir string) (*Export, error) {
	e, err := ReadExport(dir)
	if err != nil {
		return nil, err
	}
	m := e.Manifest
	if got, err := fileSum(filepath.Join(dir, recordsFile)); err != nil || got != m.Records {
		return nil, reason.New(reason.ExportCorrupt, "%s of the export %s does not match its manifest (%v)", recordsFile, dir, orMismatch(err))
	}
	scratch, err := os.MkdirTemp("", "nlx-verify-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(scratch)
	again := filepath.Join(scratch, recordsFile)
	out, err := os.Create(again)
	if err != nil {
		return nil, err
	}
	sum := sha256.New()
	inv, err := scanTree(ctx, filepath.Join(dir, rawDir), m.Source.Path, m.Source.Era, scratch, io.MultiWriter(out, sum), "", nil)
	out.Close()
	if err != nil {
		return nil, reason.New(reason.ExportCorrupt, "the export %s cannot be read as its manifest says: %v", dir, err)
	}
	for _, k := range Kinds {
		if inv.Counts[k] != m.Counts[k] {
			return nil, reason.New(reason.ExportCorrupt, "the export %s holds %d %s records; its manifest says %d%s", dir, inv.Counts[k], k, m.Counts[k], firstDiff(filepath.Join(dir, recordsFile), again))
		}
		if inv.Hashes[k] != m.Hashes[k] {
			return nil, reason.New(reason.ExportCorrupt, "the %s records of the export %s do not hash as its manifest says%s", k, dir, firstDiff(filepath.Join(dir, recordsFile), again))
		}
	}
	if got := "sha256:" + hex.EncodeToString(sum.Sum(nil)); got != m.Records {
		return nil, reason.New(reason.ExportCorrupt, "the records of the export %s differ from its records.tsv%s", dir, firstDiff(filepath.Join(dir, recordsFile), again))
	}
	return e, nil
}

// firstDiff names the first record where two records.tsv files differ.
func firstDiff(a, b string) string {
	fa, err := os.Open(a)
	if err != nil {
		return ""
	}
	defer fa.Close()
	fb, err := os.Open(b)
	if err != nil {
		return ""
	}
	defer fb.Close()
	sa, sb := bufio.NewScanner(fa), bufio.NewScanner(fb)
	sa.Buffer(nil, 1<<20)
	sb.Buffer(nil, 1<<20)
	for {
		okA, okB := sa.Scan(), sb.Scan()
		if !okA && !okB {
			return ""
		}
		if !bytes.Equal(sa.Bytes(), sb.Bytes()) || okA != okB {
			want, got := firstField(sa.Bytes(), okA), firstField(sb.Bytes(), okB)
			return fmt.Sprintf(" (first difference: the manifest has %s, the export %s)", want, got)
		}
	}
}

func firstField(line []byte, ok bool) string {
	if !ok {
		return "nothing more"
	}
	parts := bytes.SplitN(line, []byte("\t"), 3)
	if len(parts) < 3 {
		return string(line)
	}
	return fmt.Sprintf("%s %s (%.12s)", parts[0], parts[1], parts[2])
}
