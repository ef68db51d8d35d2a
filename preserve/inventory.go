package preserve

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"slices"
)

// Inventory is what an OpenClaw installation holds, read-only.
type Inventory struct {
	Source  string `json:"source"`
	Era     Era    `json:"era"`
	Version string `json:"version,omitempty"` // meta.lastTouchedVersion of openclaw.json
	// Counts and Hashes are per record kind (every kind, 0 where none): the
	// keys a preservation's expected.counts and expected.hashes name. A
	// kind's hash is the SHA-256 of its records' "id NUL sha256-hex LF"
	// lines in canonical order.
	Counts      map[Kind]int64  `json:"counts"`
	Hashes      map[Kind]string `json:"hashes"`
	Files       int64           `json:"files"`
	Bytes       int64           `json:"bytes"`
	Decisions   []Decision      `json:"decisions"`
	Unsupported []Item          `json:"unsupported"`
	Secrets     []Secret        `json:"secrets"`

	facts facts
}

// tally hashes records per kind, in the order they come.
type tally struct {
	counts map[Kind]int64
	h      map[Kind]hash.Hash
	out    *bufio.Writer // records.tsv, when exporting
}

func newTally(out io.Writer) *tally {
	t := &tally{counts: map[Kind]int64{}, h: map[Kind]hash.Hash{}}
	for _, k := range Kinds {
		t.h[k] = sha256.New()
	}
	if out != nil {
		t.out = bufio.NewWriterSize(out, 256<<10)
	}
	return t
}

func (t *tally) add(r Record) error {
	h, ok := t.h[r.Kind]
	if !ok {
		return fmt.Errorf("record %s of no kind %q", r.ID, r.Kind)
	}
	var hexSum [64]byte
	hex.Encode(hexSum[:], r.Sum[:])
	h.Write([]byte(r.ID))
	h.Write([]byte{0})
	h.Write(hexSum[:])
	h.Write([]byte{'\n'})
	t.counts[r.Kind]++
	if t.out != nil {
		t.out.WriteString(string(r.Kind))
		t.out.WriteByte('\t')
		t.out.WriteString(r.ID)
		t.out.WriteByte('\t')
		t.out.Write(hexSum[:])
		if err := t.out.WriteByte('\n'); err != nil {
			return err
		}
	}
	return nil
}

func (t *tally) result() (map[Kind]int64, map[Kind]string) {
	counts := map[Kind]int64{}
	hashes := map[Kind]string{}
	for _, k := range Kinds {
		counts[k] = t.counts[k]
		hashes[k] = "sha256:" + hex.EncodeToString(t.h[k].Sum(nil))
	}
	return counts, hashes
}

// Take inventories the installation at dir without writing to it: files
// are only read, and state/openclaw.sqlite is read from an online-backup
// copy in a scratch directory of nlx's own.
func Take(ctx context.Context, dir string) (*Inventory, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	era, err := DetectEra(abs)
	if err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp("", "nlx-preserve-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	return scanTree(ctx, abs, abs, era, tmp, nil, "", nil)
}

// scanTree scans root (the installation at source, or a raw copy of it);
// with raw set, root is copied there as it is read, each file's stat as
// copied recorded in seen.
func scanTree(ctx context.Context, root, source string, era Era, tmp string, records io.Writer, raw string, seen map[string]fileStat) (*Inventory, error) {
	inv := &Inventory{Source: source, Era: era, Unsupported: []Item{}, Secrets: []Secret{}}
	t := newTally(records)
	s := &scanner{root: root, source: source, era: era, tmp: tmp, emit: t.add,
		secret:      func(sec Secret) { inv.Secrets = append(inv.Secrets, sec) },
		unsupported: func(it Item) { inv.Unsupported = append(inv.Unsupported, it) },
	}
	s.raw, s.seen = raw, seen
	if err := s.run(ctx); err != nil {
		return nil, err
	}
	if t.out != nil {
		if err := t.out.Flush(); err != nil {
			return nil, err
		}
	}
	inv.Counts, inv.Hashes = t.result()
	inv.Files, inv.Bytes = s.files, s.bytes
	inv.Version = s.facts.Version
	inv.facts = s.facts
	for _, k := range Kinds {
		inv.Decisions = append(inv.Decisions, decisions[k])
	}
	// Jobs nlx cannot carry are unsupported records too.
	for _, j := range project(&inv.facts).Jobs {
		if len(j.Unsupported) > 0 {
			inv.Unsupported = append(inv.Unsupported, Item{Kind: KindJobs, ID: j.SourceID, Reason: fmt.Sprint(j.Unsupported)})
		}
	}
	slices.SortStableFunc(inv.Unsupported, func(a, b Item) int {
		return slices.Index(Kinds, a.Kind) - slices.Index(Kinds, b.Kind)
	})
	return inv, nil
}
