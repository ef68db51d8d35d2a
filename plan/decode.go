package plan

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"sync"
)

// envelope is a Plan whose changes are left raw, to be decoded in parallel:
// decoding dominates reading a large plan.
type envelope struct {
	FormatVersion int             `json:"format_version"`
	NlxVersion    string          `json:"nlx_version"`
	Actor         string          `json:"actor"`
	ActorProof    string          `json:"actor_proof,omitempty"`
	State         StateRef        `json:"state"`
	Inputs        Inputs          `json:"inputs"`
	Unknowns      []Unknown       `json:"unknown_outcomes"`
	UnknownClaims []UnknownClaim  `json:"unknown_claims,omitempty"`
	Changes       json.RawMessage `json:"changes"`
	Summary       Summary         `json:"summary"`
	PlanHash      string          `json:"plan_hash"`
}

// formatVersion reads format_version from a compact plan file, looking at
// its start first (where nlx writes it) and decoding the whole only if the
// file is shaped otherwise.
func formatVersion(data []byte) (int, bool, error) {
	const prefix = `{"format_version":`
	if rest, ok := bytes.CutPrefix(data, []byte(prefix)); ok {
		if i := bytes.IndexByte(rest, ','); i > 0 {
			if v, err := strconv.Atoi(string(rest[:i])); err == nil {
				return v, true, nil
			}
		}
	}
	var probe struct {
		FormatVersion *int `json:"format_version"`
	}
	if err := json.Unmarshal(data, &probe); err != nil {
		return 0, false, err
	}
	if probe.FormatVersion == nil {
		return 0, false, nil
	}
	return *probe.FormatVersion, true, nil
}

// decodePlan decodes a compact plan file strictly: unknown fields and data
// after the plan are errors.
func decodePlan(data []byte) (*Plan, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var e envelope
	if err := dec.Decode(&e); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, errors.New("data after the plan")
	}
	p := e.plan()
	if len(e.Changes) == 0 || string(e.Changes) == "null" {
		return p, nil
	}
	elems, err := splitArray(e.Changes)
	if err != nil {
		return nil, fmt.Errorf("changes: %w", err)
	}
	p.Changes, err = decodeChanges(elems, func(data []byte, c *Change) error {
		d := json.NewDecoder(bytes.NewReader(data))
		d.DisallowUnknownFields()
		return d.Decode(c)
	})
	if err != nil {
		return nil, err
	}
	return p, nil
}

func (e *envelope) plan() *Plan {
	return &Plan{FormatVersion: e.FormatVersion, NlxVersion: e.NlxVersion, Actor: e.Actor, ActorProof: e.ActorProof, State: e.State,
		Inputs: e.Inputs, Unknowns: e.Unknowns, UnknownClaims: e.UnknownClaims, Summary: e.Summary, PlanHash: e.PlanHash}
}

// decodeChanges decodes the elements of the changes array in parallel.
func decodeChanges(elems [][]byte, decode func([]byte, *Change) error) ([]Change, error) {
	changes := make([]Change, len(elems))
	errs := make([]error, len(elems))
	workers := max(min(runtime.GOMAXPROCS(0), (len(elems)+127)/128), 1)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < len(elems); i += workers {
				if err := decode(elems[i], &changes[i]); err != nil {
					errs[i] = fmt.Errorf("change %d: %w", i, err)
				}
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return changes, nil
}

// decodeCanonical decodes a plan file exactly as nlx writes it, without
// the strict decoder's copies and without scanning the changes twice, and
// returns nil for any other file (which the strict path then explains).
// Leniency while decoding is safe: the result is returned only if its
// hash holds and its canonical encoding is byte for byte the file, which no
// file with unknown, repeated, reordered or recased keys can be.
func decodeCanonical(data []byte) *Plan {
	const prefix, key = `{"format_version":` + "%d,", `,"changes":[`
	if !bytes.HasPrefix(data, fmt.Appendf(nil, prefix, FormatVersion)) {
		return nil
	}
	// Inside a JSON string a quote is escaped, so the first `,"changes":[`
	// is a key; the canonical check below refuses it if it is not the
	// top-level one.
	at := bytes.Index(data, []byte(key))
	if at < 0 {
		return nil
	}
	first := at + len(key) - 1
	elems, end := splitValues(data[first:])
	if end < 0 {
		return nil
	}
	last := first + end
	envData := make([]byte, 0, at+len(data)-last+16)
	envData = append(append(append(envData, data[:at]...), `,"changes":null`...), data[last+1:]...)
	var e envelope
	if json.Unmarshal(envData, &e) != nil {
		return nil
	}
	p := e.plan()
	var err error
	if p.Changes, err = decodeChanges(elems, func(data []byte, c *Change) error { return json.Unmarshal(data, c) }); err != nil {
		return nil
	}
	if hashOK, formOK, err := canonicalMatch(data, p); err != nil || !hashOK || !formOK {
		return nil
	}
	return p
}

// splitValues splits the compact JSON array at the start of raw into its
// elements and returns them with the index of the array's closing
// bracket, or -1 if raw holds no whole array. It does not validate: the
// elements' decoding does.
func splitValues(raw []byte) ([][]byte, int) {
	var out [][]byte
	depth, start, end := 0, 1, -1
	outsideStrings(raw, func(i int, c byte) bool {
		switch c {
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth == 0 {
				end = i
				return false
			}
		case ',':
			if depth == 1 {
				out = append(out, raw[start:i])
				start = i + 1
			}
		}
		return true
	})
	if end > start {
		out = append(out, raw[start:end])
	}
	return out, end
}

// splitArray returns the elements of a compact, valid JSON array (the
// decoder has validated it) as sub-slices.
func splitArray(raw []byte) ([][]byte, error) {
	elems, end := splitValues(raw)
	if len(raw) < 2 || raw[0] != '[' || end != len(raw)-1 {
		return nil, errors.New("not an array")
	}
	return elems, nil
}
