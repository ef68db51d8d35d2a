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
	State         StateRef        `json:"state"`
	Inputs        Inputs          `json:"inputs"`
	Unknowns      []Unknown       `json:"unknown_outcomes"`
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
	p := &Plan{FormatVersion: e.FormatVersion, NlxVersion: e.NlxVersion, Actor: e.Actor, State: e.State,
		Inputs: e.Inputs, Unknowns: e.Unknowns, Summary: e.Summary, PlanHash: e.PlanHash}
	if len(e.Changes) == 0 || string(e.Changes) == "null" {
		return p, nil
	}
	elems, err := splitArray(e.Changes)
	if err != nil {
		return nil, fmt.Errorf("changes: %w", err)
	}
	p.Changes = make([]Change, len(elems))
	errs := make([]error, len(elems))
	workers := min(runtime.GOMAXPROCS(0), (len(elems)+127)/128)
	var wg sync.WaitGroup
	for w := 0; w < max(workers, 1); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < len(elems); i += max(workers, 1) {
				d := json.NewDecoder(bytes.NewReader(elems[i]))
				d.DisallowUnknownFields()
				if err := d.Decode(&p.Changes[i]); err != nil {
					errs[i] = fmt.Errorf("change %d: %w", i, err)
				}
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return p, nil
}

// splitArray returns the elements of a compact, valid JSON array (the
// decoder has validated it) as sub-slices.
func splitArray(raw []byte) ([][]byte, error) {
	if len(raw) < 2 || raw[0] != '[' || raw[len(raw)-1] != ']' {
		return nil, errors.New("not an array")
	}
	var out [][]byte
	depth, start := 0, 1
	outsideStrings(raw[1:len(raw)-1], func(i int, c byte) bool {
		switch c {
		case '{', '[':
			depth++
		case '}', ']':
			depth--
		case ',':
			if depth == 0 {
				out = append(out, raw[start:i+1])
				start = i + 2
			}
		}
		return true
	})
	if start < len(raw)-1 {
		out = append(out, raw[start:len(raw)-1])
	}
	return out, nil
}
