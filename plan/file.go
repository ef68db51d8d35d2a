package plan

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"

	"github.com/nlx-dev/nlx/internal/bytesize"
	"github.com/nlx-dev/nlx/internal/reason"
	"github.com/nlx-dev/nlx/schema"
)

// Reason codes for plan files.
const ()

// JSON encodes v compactly without HTML escaping: the one encoding nlx
// hashes, stores and writes.
func JSON(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// Encode fills p.PlanHash and returns the plan file's bytes: the canonical
// encoding, which is also what the hash is taken over with PlanHash empty.
func Encode(p *Plan) ([]byte, error) {
	if err := checkUTF8(p); err != nil {
		return nil, fmt.Errorf("encode plan: %w", err)
	}
	p.PlanHash = ""
	canon, hash, err := hashed(p)
	if err != nil {
		return nil, fmt.Errorf("encode plan: %w", err)
	}
	p.PlanHash = hash
	// PlanHash is the last field: splice it in rather than encode twice.
	const tail = `"plan_hash":""}`
	if !bytes.HasSuffix(canon, []byte(tail)) {
		return nil, fmt.Errorf("encode plan: plan_hash is not the last field")
	}
	// In place: canonical allocates room to spare, and copying an 11 MB
	// plan costs its page faults on the first plan's critical path.
	out := canon[:len(canon)-len(tail)]
	out = append(out, `"plan_hash":"`...)
	out = append(out, p.PlanHash...)
	out = append(out, "\"}\n"...)
	return out, nil
}

// Hash returns the plan hash p should carry.
func Hash(p *Plan) (string, error) {
	_, hash, err := hashed(p)
	if err != nil {
		return "", fmt.Errorf("encode plan: %w", err)
	}
	return hash, nil
}

// hashed returns the canonical encoding of p with PlanHash empty, and the
// plan hash p should carry (the hash of that encoding). p is not changed.
func hashed(p *Plan) (canon []byte, hash string, err error) {
	c := *p
	c.PlanHash = ""
	if canon, err = canonical(&c); err != nil {
		return nil, "", err
	}
	return canon, hashOf(canon), nil
}

// hashOf is the plan hash of a canonical encoding with PlanHash empty:
// "sha256:" and the hex SHA-256 of it.
func hashOf(canon []byte) string {
	sum := sha256.Sum256(canon)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// WriteFile writes p to path, filling its hash.
func WriteFile(path string, p *Plan) error {
	data, err := Encode(p)
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return fmt.Errorf("write plan: %w", err)
	}
	return nil
}

// EnvMaxPlanBytes overrides DefaultMaxPlanBytes.
const EnvMaxPlanBytes = "NLX_MAX_PLAN_BYTES"

// DefaultMaxPlanBytes is the largest plan file nlx reads. The 14,002-
// resource benchmark fleet's first plan is 11 MB, so this holds ten times
// that fleet; reading a plan takes about five times its size in memory, so
// the largest one still fits an 8 GB Raspberry Pi beside its providers.
const DefaultMaxPlanBytes = 128 << 20

// MaxPlanBytes is the plan size limit: $NLX_MAX_PLAN_BYTES (bytes, or with
// a Ki, Mi or Gi suffix), else DefaultMaxPlanBytes.
func MaxPlanBytes() (int64, error) {
	v := os.Getenv(EnvMaxPlanBytes)
	if v == "" {
		return DefaultMaxPlanBytes, nil
	}
	n, err := bytesize.Parse(v)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", EnvMaxPlanBytes, err)
	}
	return n, nil
}

// ReadFile reads and verifies the plan file at path. Only a regular file is
// read, and only up to MaxPlanBytes: a device, a FIFO or a directory is
// refused (invalid_plan_file) before a byte of it is read, a larger file
// with plan_too_large.
func ReadFile(path string) (*Plan, error) {
	limit, err := MaxPlanBytes()
	if err != nil {
		return nil, err
	}
	// O_NONBLOCK: opening a FIFO with no writer would block until one
	// came, whatever signal nlx got meanwhile.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("read plan: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("read plan: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, reason.New(reason.InvalidPlanFile, "%s is not a regular file (%s); a plan file is one that nlx plan --out wrote", path, fileKind(fi.Mode()))
	}
	if fi.Size() > limit {
		return nil, tooLarge(path, limit)
	}
	data, over, err := readLimited(f, limit, fi.Size())
	switch {
	case err != nil:
		return nil, fmt.Errorf("read plan: %w", err)
	case over: // it grew since the stat
		return nil, tooLarge(path, limit)
	}
	return readBytes(data)
}

// Read decodes a plan file and verifies its version, its shape and its hash.
// The file must be the canonical encoding (whitespace aside): unknown,
// repeated, reordered or differently cased keys are refused, so what a
// reviewer reads in the file is what apply does. It reads at most
// MaxPlanBytes; more is plan_too_large.
func Read(r io.Reader) (*Plan, error) {
	limit, err := MaxPlanBytes()
	if err != nil {
		return nil, err
	}
	data, over, err := readLimited(r, limit, 0)
	switch {
	case err != nil:
		return nil, fmt.Errorf("read plan: %w", err)
	case over:
		return nil, tooLarge("the plan", limit)
	}
	return readBytes(data)
}

// readLimited reads r to its end, or reports that it holds more than limit
// bytes; size, when known, saves growing the buffer.
func readLimited(r io.Reader, limit, size int64) (data []byte, over bool, err error) {
	var b bytes.Buffer
	if size > 0 {
		b.Grow(int(size) + bytes.MinRead)
	}
	n, err := b.ReadFrom(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, false, err
	}
	return b.Bytes(), n > limit, nil
}

func tooLarge(what string, limit int64) error {
	return reason.New(reason.PlanTooLarge, "%s is larger than %s, the largest plan nlx reads; set %s higher (a byte count, or with a Ki, Mi or Gi suffix) to read it",
		what, bytesize.Format(limit), EnvMaxPlanBytes)
}

// fileKind names a file type that is not a plan file.
func fileKind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a device"
	case m&fs.ModeSocket != 0:
		return "a socket"
	}
	return "not a regular file"
}

func readBytes(data []byte) (*Plan, error) {
	data = bytes.TrimSuffix(data, []byte("\n"))
	// A file as nlx writes it decodes on the fast path, which proves its
	// decoding by re-encoding it to exactly its bytes; anything else takes
	// the strict path below, which says what is wrong with it.
	if p := decodeCanonical(data); p != nil {
		if err := p.validate(); err != nil {
			return nil, reason.New(reason.InvalidPlanFile, "plan file: %v", err)
		}
		return p, nil
	}
	return readStrict(data)
}

// readStrict decodes and verifies a plan file strictly, naming the first
// thing wrong with it.
func readStrict(data []byte) (*Plan, error) {
	if !isCompact(data) {
		var compact bytes.Buffer
		if err := json.Compact(&compact, data); err != nil {
			return nil, reason.New(reason.InvalidPlanFile, "not a plan file: %v", err)
		}
		data = compact.Bytes()
	}
	version, ok, err := formatVersion(data)
	switch {
	case err != nil:
		return nil, reason.New(reason.InvalidPlanFile, "not a plan file: %v", err)
	case !ok:
		return nil, reason.New(reason.InvalidPlanFile, "not a plan file: no format_version")
	case version != FormatVersion:
		return nil, reason.New(reason.UnknownPlanFormat, "plan format_version %d is not supported (this nlx reads %d)", version, FormatVersion)
	}
	p, err := decodePlan(data)
	if err != nil {
		return nil, reason.New(reason.InvalidPlanFile, "plan file: %v", err)
	}
	hashOK, formOK, err := canonicalMatch(data, p)
	switch {
	case err != nil:
		return nil, reason.New(reason.InvalidPlanFile, "plan file: %v", err)
	case !hashOK:
		return nil, reason.New(reason.PlanHashMismatch, "plan file content does not match its plan_hash %s; it was changed after nlx wrote it", p.PlanHash)
	case !formOK:
		return nil, reason.New(reason.InvalidPlanFile, "plan file is not in canonical form (repeated, reordered or extra keys); nlx does not write such files")
	}
	if err := p.validate(); err != nil {
		return nil, reason.New(reason.InvalidPlanFile, "plan file: %v", err)
	}
	return p, nil
}

// canonicalMatch reports whether p's plan_hash is the hash of p's
// canonical encoding and whether data, compact, is exactly that encoding.
func canonicalMatch(data []byte, p *Plan) (hashOK, formOK bool, err error) {
	canon, want, err := hashed(p)
	if err != nil {
		return false, false, err
	}
	if p.PlanHash != want {
		return false, false, nil
	}
	const tail = `"plan_hash":""}`
	expect := append(canon[:len(canon)-len(tail):len(canon)-len(tail)], `"plan_hash":"`+p.PlanHash+`"}`...)
	return true, bytes.Equal(data, expect), nil
}

// validate checks what a well-formed plan must hold, so that a hand-made
// file with a correct hash still cannot ask apply for nonsense.
func (p *Plan) validate() error {
	seen := make(map[string]bool, len(p.Changes))
	for i, c := range p.Changes {
		if !c.Action.Valid() {
			return fmt.Errorf("change %d: unknown action %q", i, c.Action)
		}
		if c.Kind.Rank() < 0 {
			return fmt.Errorf("change %d: unknown kind %q", i, c.Kind)
		}
		if !schema.ValidName(c.Name) {
			return fmt.Errorf("change %d: invalid name %q", i, c.Name)
		}
		if c.Address != string(c.Kind)+"."+c.Name {
			return fmt.Errorf("change %d: address %q does not match kind %q and name %q", i, c.Address, c.Kind, c.Name)
		}
		if seen[c.Address] {
			return fmt.Errorf("change %d: %s changed twice", i, c.Address)
		}
		seen[c.Address] = true
		hasBefore := len(c.Before) > 0 && string(c.Before) != "null"
		hasAfter := len(c.After) > 0 && string(c.After) != "null"
		if hasBefore != c.Action.Destroys() && c.Action != Update || hasAfter != c.Action.Creates() && c.Action != Update {
			return fmt.Errorf("change %d (%s): before/after do not fit action %s", i, c.Address, c.Action)
		}
		if c.Action == Update && (!hasBefore || !hasAfter) {
			return fmt.Errorf("change %d (%s): an update needs before and after", i, c.Address)
		}
	}
	if s := Summarize(p.Changes); s != p.Summary {
		return fmt.Errorf("summary %+v does not count the changes (%+v)", p.Summary, s)
	}
	return nil
}
