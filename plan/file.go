package plan

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"github.com/nlx-dev/nlx/schema"
	"io"
	"os"
)

// Refusal is an error with a stable reason code. Every refusal nlx makes is
// one: the code appears in text and JSON output and scripts branch on it.
type Refusal struct {
	Code string
	Msg  string
}

func (r *Refusal) Error() string { return r.Code + ": " + r.Msg }

// Refusef returns a Refusal with a formatted message.
func Refusef(code, format string, args ...any) *Refusal {
	return &Refusal{Code: code, Msg: fmt.Sprintf(format, args...)}
}

// Reason codes for plan files.
const (
	CodePlanHashMismatch = "plan_hash_mismatch" // the file was changed after it was written
	CodeUnknownFormat    = "unknown_plan_format"
	CodeInvalidPlan      = "invalid_plan_file"
)

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
	canon, err := canonical(p)
	if err != nil {
		return nil, fmt.Errorf("encode plan: %w", err)
	}
	sum := sha256.Sum256(canon)
	p.PlanHash = "sha256:" + hex.EncodeToString(sum[:])
	// PlanHash is the last field: splice it in rather than encode twice.
	const tail = `"plan_hash":""}`
	if !bytes.HasSuffix(canon, []byte(tail)) {
		return nil, fmt.Errorf("encode plan: plan_hash is not the last field")
	}
	out := make([]byte, 0, len(canon)+80)
	out = append(out, canon[:len(canon)-len(tail)]...)
	out = append(out, `"plan_hash":"`...)
	out = append(out, p.PlanHash...)
	out = append(out, "\"}\n"...)
	return out, nil
}

// Hash returns the plan hash p should carry.
func Hash(p *Plan) (string, error) {
	c := *p
	c.PlanHash = ""
	canon, err := canonical(&c)
	if err != nil {
		return "", fmt.Errorf("encode plan: %w", err)
	}
	sum := sha256.Sum256(canon)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
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

// ReadFile reads and verifies the plan file at path.
func ReadFile(path string) (*Plan, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read plan: %w", err)
	}
	return readBytes(data)
}

// Read decodes a plan file and verifies its version, its shape and its hash.
// The file must be the canonical encoding (whitespace aside): unknown,
// repeated, reordered or differently cased keys are refused, so what a
// reviewer reads in the file is what apply does.
func Read(r io.Reader) (*Plan, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("read plan: %w", err)
	}
	return readBytes(data)
}

func readBytes(data []byte) (*Plan, error) {
	data = bytes.TrimSuffix(data, []byte("\n"))
	// A file as nlx writes it decodes on the fast path, which proves its
	// decoding by re-encoding it to exactly its bytes; anything else takes
	// the strict path below, which says what is wrong with it.
	if p := decodeCanonical(data); p != nil {
		if err := p.validate(); err != nil {
			return nil, Refusef(CodeInvalidPlan, "plan file: %v", err)
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
			return nil, Refusef(CodeInvalidPlan, "not a plan file: %v", err)
		}
		data = compact.Bytes()
	}
	version, ok, err := formatVersion(data)
	switch {
	case err != nil:
		return nil, Refusef(CodeInvalidPlan, "not a plan file: %v", err)
	case !ok:
		return nil, Refusef(CodeInvalidPlan, "not a plan file: no format_version")
	case version != FormatVersion:
		return nil, Refusef(CodeUnknownFormat, "plan format_version %d is not supported (this nlx reads %d)", version, FormatVersion)
	}
	p, err := decodePlan(data)
	if err != nil {
		return nil, Refusef(CodeInvalidPlan, "plan file: %v", err)
	}
	hashOK, formOK, err := canonicalMatch(data, p)
	switch {
	case err != nil:
		return nil, Refusef(CodeInvalidPlan, "plan file: %v", err)
	case !hashOK:
		return nil, Refusef(CodePlanHashMismatch, "plan file content does not match its plan_hash %s; it was changed after nlx wrote it", p.PlanHash)
	case !formOK:
		return nil, Refusef(CodeInvalidPlan, "plan file is not in canonical form (repeated, reordered or extra keys); nlx does not write such files")
	}
	if err := p.validate(); err != nil {
		return nil, Refusef(CodeInvalidPlan, "plan file: %v", err)
	}
	return p, nil
}

// canonicalMatch reports whether p's plan_hash is the hash of p's
// canonical encoding and whether data, compact, is exactly that encoding.
func canonicalMatch(data []byte, p *Plan) (hashOK, formOK bool, err error) {
	c := *p
	c.PlanHash = ""
	canon, err := canonical(&c)
	if err != nil {
		return false, false, err
	}
	sum := sha256.Sum256(canon)
	if want := "sha256:" + hex.EncodeToString(sum[:]); p.PlanHash != want {
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
