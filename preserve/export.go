package preserve

import (
	"bufio"
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
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nlx-dev/nlx/internal/fault"
	"github.com/nlx-dev/nlx/internal/reason"
	"github.com/nlx-dev/nlx/state"
)

// ManifestVersion is the version of manifest.json; readers refuse others.
const ManifestVersion = 1

// Manifest is an export's table of contents and its proof: per kind the
// counts and hashes of the raw records, the per-record hashes (in
// records.tsv, hashed here), the hashes of the other files it holds, and
// what was dropped or is unsupported and why. It holds no clock reading:
// the same installation exports to the same manifest, whose SHA-256 is
// the source revision a preservation's import pins.
type Manifest struct {
	FormatVersion int             `json:"format_version"`
	Source        ManifestSource  `json:"source"`
	Counts        map[Kind]int64  `json:"counts"`
	Hashes        map[Kind]string `json:"hashes"`
	Records       string          `json:"records"` // "sha256:..." of records.tsv
	// Files are the export's other files (projections, schemas, the
	// unsupported list), by path, with their SHA-256.
	Files       map[string]string `json:"files"`
	Decisions   []Decision        `json:"decisions"`
	Dropped     []Item            `json:"dropped"`
	Unsupported int               `json:"unsupported"` // records listed in unsupported.json
	Secrets     []Secret          `json:"secrets"`     // where secrets stay: never a value
}

// ManifestSource is what was exported.
type ManifestSource struct {
	Kind    string `json:"kind"` // "openclaw"
	Path    string `json:"path"`
	Era     Era    `json:"era"`
	Version string `json:"version,omitempty"`
	Files   int64  `json:"files"`
	Bytes   int64  `json:"bytes"`
}

// The files of an export.
const (
	manifestFile    = "manifest.json"
	recordsFile     = "records.tsv"
	rawDir          = "raw"
	exportedFile    = "exported.json" // when and by whom: not part of the revision
	unsupportedFile = "unsupported.json"
)

// ExportOptions tune Export.
type ExportOptions struct {
	LockDir  string        // where the gateway's locks are; DefaultLockDir by default
	Drain    bool          // wait for OpenClaw to stop instead of refusing
	Timeout  time.Duration // how long --drain waits
	Replace  bool          // replace an existing export
	Progress func(string)  // a line per step
	Now      func() time.Time
}

// fileStat is what proves a file unchanged between two looks.
type fileStat struct {
	size        int64
	mtime, ctim syscall.Timespec
	ino         uint64
}

func statOf(fi fs.FileInfo) fileStat {
	st, _ := fi.Sys().(*syscall.Stat_t)
	if st == nil {
		return fileStat{size: fi.Size()}
	}
	return fileStat{size: st.Size, mtime: st.Mtim, ctim: st.Ctim, ino: st.Ino}
}

// Write writes a consistent snapshot of the installation at source into
// dir: first into a sibling directory, renamed into place once complete
// and proved unchanged, so dir holds a whole export or none. The source is
// only read.
func Write(ctx context.Context, source, dir string, o ExportOptions) (*Manifest, error) {
	progress := o.Progress
	if progress == nil {
		progress = func(string) {}
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	src, err := filepath.Abs(source)
	if err != nil {
		return nil, err
	}
	era, err := DetectEra(src)
	if err != nil {
		return nil, err
	}
	if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 && !o.Replace {
		return nil, reason.New(reason.ExportExists, "%s already holds an export (or other files); nlx never overwrites one: export with --replace, or to another directory", dir)
	}
	lockDir := o.LockDir
	if lockDir == "" {
		lockDir = DefaultLockDir(src)
	}
	if _, err := Gate(ctx, src, lockDir, o.Drain, o.Timeout, progress); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
		return nil, fmt.Errorf("export directory: %w", err)
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), "."+filepath.Base(dir)+".partial-")
	if err != nil {
		return nil, fmt.Errorf("export directory: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			os.RemoveAll(tmp)
		}
	}()
	scratch := filepath.Join(tmp, ".scratch")
	if err := os.Mkdir(scratch, 0o700); err != nil {
		return nil, err
	}

	// One read of each file makes its copy and its records: the bytes
	// hashed are the bytes written (JSONL files teed line by line, the
	// others copied, secrets replaced, then read), and each file's stat
	// is the same before and after.
	progress(fmt.Sprintf("copying %s (%s)", src, era))
	rec, err := os.Create(filepath.Join(tmp, recordsFile))
	if err != nil {
		return nil, err
	}
	sum := sha256.New()
	raw, seen := filepath.Join(tmp, rawDir), map[string]fileStat{}
	if err := os.Mkdir(raw, 0o700); err != nil {
		return nil, err
	}
	inv, err := scanTree(ctx, src, src, era, scratch, io.MultiWriter(rec, sum), raw, seen)
	if cerr := rec.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	fault.Point("preserve.copied")
	progress("checking that the source did not change while copied")
	if err := unchanged(src, seen); err != nil {
		return nil, err
	}
	if err := os.RemoveAll(scratch); err != nil {
		return nil, err
	}
	m := &Manifest{FormatVersion: ManifestVersion,
		Source: ManifestSource{Kind: "openclaw", Path: src, Era: era, Version: inv.Version, Files: inv.Files, Bytes: inv.Bytes},
		Counts: inv.Counts, Hashes: inv.Hashes, Records: "sha256:" + hex.EncodeToString(sum.Sum(nil)),
		Files: map[string]string{}, Decisions: inv.Decisions, Dropped: []Item{}, Unsupported: len(inv.Unsupported), Secrets: inv.Secrets}
	for _, it := range inv.Unsupported {
		if it.Kind == KindLeftovers {
			m.Dropped = append(m.Dropped, it)
		}
	}
	pr := project(&inv.facts)
	write := func(rel string, v any) error {
		data, err := indented(v)
		if err != nil {
			return err
		}
		p := filepath.Join(tmp, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			return err
		}
		if err := os.WriteFile(p, data, 0o600); err != nil {
			return err
		}
		s := sha256.Sum256(data)
		m.Files[rel] = "sha256:" + hex.EncodeToString(s[:])
		return nil
	}
	for rel, v := range map[string]any{"projections/jobs.json": pr.Jobs, "projections/conversations.json": pr.Conversations,
		"projections/skills.json": pr.Skills, "projections/connections.json": pr.Connections, unsupportedFile: inv.Unsupported} {
		if err := write(rel, v); err != nil {
			return nil, fmt.Errorf("write %s: %w", rel, err)
		}
	}
	// The JSON stores' versions are their schemas.
	if err := write("schemas/formats.json", inv.facts.Formats); err != nil {
		return nil, fmt.Errorf("write schemas/formats.json: %w", err)
	}
	for db, sql := range inv.facts.Schemas {
		rel := "schemas/" + strings.ReplaceAll(db, "/", "_") + ".sql"
		p := filepath.Join(tmp, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			return nil, err
		}
		if err := os.WriteFile(p, []byte(sql), 0o600); err != nil {
			return nil, err
		}
		s := sha256.Sum256([]byte(sql))
		m.Files[rel] = "sha256:" + hex.EncodeToString(s[:])
	}
	data, err := indented(m)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(tmp, manifestFile), data, 0o600); err != nil {
		return nil, err
	}
	stamp, _ := indented(map[string]any{"exported_at": o.Now().UTC().Format(time.RFC3339), "nlx_pid": os.Getpid()})
	if err := os.WriteFile(filepath.Join(tmp, exportedFile), stamp, 0o600); err != nil {
		return nil, err
	}
	fault.Point("preserve.written")
	if o.Replace {
		if err := os.RemoveAll(dir); err != nil {
			return nil, fmt.Errorf("replace %s: %w", dir, err)
		}
	} else {
		os.Remove(dir) // an empty directory made for it
	}
	if err := os.Rename(tmp, dir); err != nil {
		return nil, fmt.Errorf("put the export in place: %w", err)
	}
	ok = true
	return m, nil
}

// ManifestHash is the source revision: the SHA-256 of manifest.json.
func ManifestHash(data []byte) string {
	s := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(s[:])
}

// unchanged proves that every file copied is as it was, and that none
// appeared or vanished.
func unchanged(src string, seen map[string]fileStat) error {
	now := map[string]bool{}
	var changed []string
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		rel, _ := filepath.Rel(src, p)
		rel = filepath.ToSlash(rel)
		now[rel] = true
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		if was, ok := seen[rel]; !ok {
			changed = append(changed, rel+" appeared")
		} else if statOf(fi) != was {
			changed = append(changed, rel+" changed")
		}
		return nil
	})
	if err != nil {
		return reason.New(reason.SourceChanged, "the source changed while it was exported: %v", err)
	}
	for rel := range seen {
		if !now[rel] {
			changed = append(changed, rel+" vanished")
		}
	}
	if len(changed) > 0 {
		slices.Sort(changed)
		if len(changed) > 5 {
			changed = append(changed[:5], "and "+strconv.Itoa(len(changed)-5)+" more")
		}
		return reason.New(reason.SourceChanged, "%s changed while it was exported (%s); nothing was kept: stop whatever writes it and export again", src, strings.Join(changed, ", "))
	}
	return nil
}

// redactCopier writes the raw copy of each file: its bytes, or, for a file
// holding secrets, its JSON again with each secret replaced by a marker
// (the same marker scanning puts in the canonical record, so the copy
// hashes as the source does).
type redactCopier struct {
	source string
}

func (r *redactCopier) copy(ctx context.Context, rel, src, dst string) error {
	c := classify(rel)
	switch {
	case c == classStateDB:
		if err := state.ForeignCopy(ctx, src, dst); err != nil {
			return err
		}
		return r.redactDB(ctx, rel, dst)
	case c == classSessions:
		return r.sessions(rel, src, dst)
	case c == classConfig, c == classChannelCredential, c == classSecretsAll, c == classSystemSecrets,
		c == classAuthProfiles, c == classCronJobs, c == classCronState, c == classCronQuarantine:
		data, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		out, err := r.redactFile(rel, c, data)
		if err != nil {
			return err
		}
		return os.WriteFile(dst, out, 0o600)
	}
	return copyFile(src, dst)
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// redactFile returns the raw copy of a secret-bearing file: its bytes when
// it holds no secret, else its JSON with markers.
func (r *redactCopier) redactFile(rel string, c class, data []byte) ([]byte, error) {
	s := &scanner{source: r.source}
	found := false
	s.secret = func(Secret) { found = true }
	switch c {
	case classConfig, classChannelCredential, classSecretsAll, classSystemSecrets:
		canon, err := s.fileRecord(rel, c, data)
		if err != nil {
			return nil, err
		}
		if !found {
			return data, nil
		}
		if rel == ".env" {
			return canon, nil
		}
		v, err := decodeJSON(canon)
		if err != nil {
			return nil, err
		}
		return indented(v)
	}
	// A JSON document whose records are members: redacted whole.
	v, err := decodeJSON(data)
	if err != nil {
		return data, nil // malformed: scanning it refuses, with its position
	}
	red := (&redactor{file: rel, source: r.source, found: func(Secret) { found = true }}).redact(v, nil, false)
	if !found {
		return data, nil
	}
	return indented(red)
}

// sessions copies sessions.json member by member (it can be tens of
// megabytes), redacted; its bytes when it holds no secret.
func (r *redactCopier) sessions(rel, src, dst string) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	tmp := dst + ".redacting"
	out, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	w := bufio.NewWriter(out)
	found := false
	red := &redactor{file: rel, source: r.source, found: func(Secret) { found = true }}
	w.WriteString("{")
	first := true
	_, err = members(bufio.NewReader(f), "", func(key string, raw json.RawMessage) error {
		v, err := decodeJSON(raw)
		if err != nil {
			return err
		}
		c, err := canonical(red.redact(v, []string{key}, false))
		if err != nil {
			return err
		}
		k, _ := json.Marshal(key)
		if !first {
			w.WriteString(",")
		}
		first = false
		w.WriteString("\n  ")
		w.Write(k)
		w.WriteString(": ")
		_, err = w.Write(c)
		return err
	})
	if err != nil {
		out.Close()
		return copyFile(src, dst) // malformed: scanning the copy refuses it
	}
	w.WriteString("\n}\n")
	if err := w.Flush(); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	if !found {
		return copyFile(src, dst)
	}
	return os.Rename(tmp, dst)
}

// redactDB replaces the values of secret tables in the copy of
// state/openclaw.sqlite, as scanning marks them.
func (r *redactCopier) redactDB(ctx context.Context, rel, dst string) error {
	db, err := state.OpenForeign(ctx, dst)
	if err != nil {
		return err
	}
	tables, err := db.Tables(ctx)
	db.Close()
	if err != nil {
		return err
	}
	for _, t := range tables {
		if !secretTables[t.Name] {
			continue
		}
		var cols []string
		for _, c := range t.Columns {
			if !slices.Contains(t.Key, c) {
				cols = append(cols, c)
			}
		}
		err := state.ForeignRedact(ctx, dst, t.Name, cols, func(_ int64, column string) string {
			return secretKey + ":" + rel + "#" + t.Name + "." + column
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// errNoExport is an export directory without a manifest.
var errNoExport = errors.New("no manifest.json")
