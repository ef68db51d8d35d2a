package reconcile

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"

	"github.com/nlx-dev/nlx/plan"
	"github.com/nlx-dev/nlx/schema"
)

// A published state (nlx state export, nlx state publish) is a snapshot:
// everything a plan is made from and nothing secret (specs hold secret
// references, never values): lineage, serial, every resource's spec, hash
// and status, the unknown outcomes and claims, the held imports. Operators,
// roles, identities and image pins are in the specs. Its basis is the
// SHA-256 of its canonical encoding; a plan records it, and apply refuses a
// plan whose basis is not its own state's at that serial
// (state_basis_mismatch): a snapshot edited after publishing can only make
// a plan the host refuses.

// Snapshot file format: what the encoding starts with and its version.
const (
	SnapshotFormat  = "nlx-state-snapshot"
	SnapshotVersion = 1
)

type wireResource struct {
	Kind   schema.Kind     `json:"kind"`
	Name   string          `json:"name"`
	Status ResourceStatus  `json:"status"`
	Hash   string          `json:"hash"`
	Spec   json.RawMessage `json:"spec"`
}

type wireHeld struct {
	Preservation string   `json:"preservation"`
	Manifest     string   `json:"manifest"`
	Unsupported  []string `json:"unsupported"`
}

type wireSnapshot struct {
	Format        string              `json:"format"`
	FormatVersion int                 `json:"format_version"`
	Lineage       string              `json:"lineage"`
	Serial        int64               `json:"serial"`
	Resources     []wireResource      `json:"resources"`
	Unknowns      []plan.Unknown      `json:"unknown_outcomes"`
	UnknownClaims []plan.UnknownClaim `json:"unknown_claims"`
	Held          map[string]wireHeld `json:"held"`
	Basis         string              `json:"basis"`
}

// body is the canonical encoding of s without its basis: the bytes the
// basis hashes. Written by hand with plan's canonical encoder: specs are
// copied as they are, compact, which encoding/json would re-validate one
// by one.
func (s *Snapshot) body() ([]byte, error) {
	b := make([]byte, 0, 256+len(s.Resources)*512)
	b = append(b, `{"format":"`+SnapshotFormat+`","format_version":`...)
	b = strconv.AppendInt(b, SnapshotVersion, 10)
	b = append(b, `,"lineage":`...)
	b = plan.AppendString(b, s.Lineage)
	b = append(b, `,"serial":`...)
	b = strconv.AppendInt(b, s.Serial, 10)
	b = append(b, `,"resources":[`...)
	for i, r := range s.Resources {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"kind":`...)
		b = plan.AppendString(b, string(r.Kind))
		b = append(b, `,"name":`...)
		b = plan.AppendString(b, r.Name)
		b = append(b, `,"status":`...)
		b = plan.AppendString(b, string(r.Status))
		b = append(b, `,"hash":`...)
		b = plan.AppendString(b, r.Hash)
		b = append(b, `,"spec":`...)
		var err error
		if b, err = plan.AppendRaw(b, r.Spec); err != nil {
			return nil, fmt.Errorf("%s: spec: %w", r.Address(), err)
		}
		b = append(b, '}')
	}
	b = append(b, ']')
	held := map[string]wireHeld{}
	for addr, h := range s.Held {
		held[addr] = wireHeld{h.Preservation, h.Manifest, orEmpty(h.Unsupported)}
	}
	rest, err := plan.JSON(struct {
		Unknowns      []plan.Unknown      `json:"unknown_outcomes"`
		UnknownClaims []plan.UnknownClaim `json:"unknown_claims"`
		Held          map[string]wireHeld `json:"held"`
	}{orEmpty(s.Unknowns), orEmpty(s.UnknownClaims), held})
	if err != nil {
		return nil, err
	}
	b = append(b, ',')
	return append(b, rest[1:len(rest)-1]...), nil
}

func orEmpty[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// Basis returns the content hash of s: "sha256:" and the hex SHA-256 of
// its canonical encoding.
func (s *Snapshot) Basis() (string, error) {
	body, err := s.body()
	if err != nil {
		return "", err
	}
	return basisOf(body), nil
}

func basisOf(body []byte) string {
	sum := sha256.Sum256(body)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// EncodeSnapshot returns the published form of s and its basis.
func EncodeSnapshot(s *Snapshot) ([]byte, string, error) {
	body, err := s.body()
	if err != nil {
		return nil, "", err
	}
	basis := basisOf(body)
	out := make([]byte, 0, len(body)+100)
	out = append(out, body...)
	out = append(out, `,"basis":"`...)
	out = append(out, basis...)
	out = append(out, "\"}\n"...)
	return out, basis, nil
}

// ErrSnapshot is wrapped by every error DecodeSnapshot returns.
var ErrSnapshot = errors.New("not an nlx state snapshot")

// DecodeSnapshot reads a published snapshot strictly: known fields only,
// every resource's hash that of its spec, and the whole exactly its own
// canonical encoding, whose hash is its basis. That proves it whole, not
// authentic: the host proves that, by refusing a plan whose basis is not
// its own.
func DecodeSnapshot(data []byte) (*Snapshot, string, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var w wireSnapshot
	if err := dec.Decode(&w); err != nil {
		return nil, "", fmt.Errorf("%w: %v", ErrSnapshot, err)
	}
	if dec.More() {
		return nil, "", fmt.Errorf("%w: data after the snapshot", ErrSnapshot)
	}
	switch {
	case w.Format != SnapshotFormat:
		return nil, "", fmt.Errorf("%w: format %q", ErrSnapshot, w.Format)
	case w.FormatVersion != SnapshotVersion:
		return nil, "", fmt.Errorf("%w: format_version %d, this nlx reads %d", ErrSnapshot, w.FormatVersion, SnapshotVersion)
	}
	s := &Snapshot{Lineage: w.Lineage, Serial: w.Serial, Unknowns: w.Unknowns, UnknownClaims: w.UnknownClaims}
	if len(s.UnknownClaims) == 0 {
		s.UnknownClaims = nil
	}
	for i, r := range w.Resources {
		res := Resource{Kind: r.Kind, Name: r.Name, Status: r.Status, Hash: r.Hash, Spec: r.Spec}
		switch {
		case r.Kind.Rank() < 0 || !schema.ValidName(r.Name):
			return nil, "", fmt.Errorf("%w: resource %d: %s.%s is not a resource address", ErrSnapshot, i, r.Kind, r.Name)
		case r.Status != StatusActive && r.Status != StatusHeld:
			return nil, "", fmt.Errorf("%w: %s: status %q", ErrSnapshot, res.Address(), r.Status)
		case HashSpec(r.Spec) != r.Hash:
			return nil, "", fmt.Errorf("%w: %s: its hash is not its spec's", ErrSnapshot, res.Address())
		case i > 0 && s.Resources[i-1].Address() >= res.Address():
			return nil, "", fmt.Errorf("%w: resources out of order at %s", ErrSnapshot, res.Address())
		}
		s.Resources = append(s.Resources, res)
	}
	if len(w.Held) > 0 {
		s.Held = map[string]HeldImport{}
		for _, addr := range slices.Sorted(maps.Keys(w.Held)) {
			h := w.Held[addr]
			s.Held[addr] = HeldImport{Preservation: h.Preservation, Manifest: h.Manifest, Unsupported: h.Unsupported}
		}
	}
	out, basis, err := EncodeSnapshot(s)
	if err != nil {
		return nil, "", fmt.Errorf("%w: %v", ErrSnapshot, err)
	}
	if basis != w.Basis || !bytes.Equal(bytes.TrimRight(data, "\n"), bytes.TrimRight(out, "\n")) {
		return nil, "", fmt.Errorf("%w: its basis is not the hash of its content (edited after it was written?)", ErrSnapshot)
	}
	return s, basis, nil
}
