package plan

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"
)

// canonical returns the canonical encoding of p: byte for byte what JSON(p)
// gives (TestCanonicalMatchesEncodingJSON holds the two together), written
// by hand because encoding/json re-validates every json.RawMessage and a
// 14,000-change plan holds hundreds of thousands of them.
//
// Raw values are copied when they are already compact (they are: nlx makes
// them with JSON, and Read compacts a file before decoding it); any other is
// compacted here, so the encoding never depends on whitespace.
func canonical(p *Plan) ([]byte, error) {
	small := func(b []byte, v any) ([]byte, error) {
		data, err := JSON(v)
		return append(b, data...), err
	}
	b := make([]byte, 0, 1024+len(p.Changes)*1024)
	b = append(b, `{"format_version":`...)
	b = strconv.AppendInt(b, int64(p.FormatVersion), 10)
	b = append(b, `,"nlx_version":`...)
	b = appendString(b, p.NlxVersion)
	b = append(b, `,"actor":`...)
	b = appendString(b, p.Actor)
	if p.ActorProof != "" {
		b = append(b, `,"actor_proof":`...)
		b = appendString(b, p.ActorProof)
	}
	b = append(b, `,"state":`...)
	b, err := small(b, p.State)
	if err != nil {
		return nil, err
	}
	b = append(b, `,"inputs":`...)
	if b, err = small(b, p.Inputs); err != nil {
		return nil, err
	}
	b = append(b, `,"unknown_outcomes":`...)
	if b, err = small(b, p.Unknowns); err != nil {
		return nil, err
	}
	if len(p.UnknownClaims) > 0 {
		b = append(b, `,"unknown_claims":`...)
		if b, err = small(b, p.UnknownClaims); err != nil {
			return nil, err
		}
	}
	b = append(b, `,"changes":`...)
	if p.Changes == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i := range p.Changes {
			if i > 0 {
				b = append(b, ',')
			}
			if b, err = appendChange(b, &p.Changes[i]); err != nil {
				return nil, fmt.Errorf("change %s: %w", p.Changes[i].Address, err)
			}
		}
		b = append(b, ']')
	}
	b = append(b, `,"summary":`...)
	if b, err = small(b, p.Summary); err != nil {
		return nil, err
	}
	b = append(b, `,"plan_hash":`...)
	b = appendString(b, p.PlanHash)
	return append(b, '}'), nil
}

func appendChange(b []byte, c *Change) ([]byte, error) {
	var err error
	b = append(b, `{"address":`...)
	b = appendString(b, c.Address)
	b = append(b, `,"kind":`...)
	b = appendString(b, string(c.Kind))
	b = append(b, `,"name":`...)
	b = appendString(b, c.Name)
	b = append(b, `,"action":`...)
	b = appendString(b, string(c.Action))
	b = append(b, `,"risks":`...)
	b = appendRisks(b, c.Risks)
	b = append(b, `,"refused":`...)
	b = appendRefusals(b, c.Refused)
	b = append(b, `,"diff":`...)
	if c.Diff == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i, d := range c.Diff {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"path":`...)
			b = appendString(b, d.Path)
			if len(d.Before) > 0 {
				b = append(b, `,"before":`...)
				if b, err = appendRaw(b, d.Before); err != nil {
					return nil, err
				}
			}
			if len(d.After) > 0 {
				b = append(b, `,"after":`...)
				if b, err = appendRaw(b, d.After); err != nil {
					return nil, err
				}
			}
			if d.ForcesReplace {
				b = append(b, `,"forces_replacement":true`...)
			}
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	b = append(b, `,"before":`...)
	if b, err = appendRaw(b, c.Before); err != nil {
		return nil, err
	}
	b = append(b, `,"after":`...)
	if b, err = appendRaw(b, c.After); err != nil {
		return nil, err
	}
	if c.Import != "" {
		b = append(b, `,"import":`...)
		b = appendString(b, c.Import)
	}
	return append(b, '}'), nil
}

// appendRisks appends risks as a JSON list of {code, reason}.
func appendRisks(b []byte, rs []Risk) []byte {
	return appendGates(b, rs, func(r Risk) (string, string) { return string(r.Code), r.Reason })
}

// appendRefusals appends refusals as a JSON list of {code, reason}.
func appendRefusals(b []byte, rs []Refusal) []byte {
	return appendGates(b, rs, func(r Refusal) (string, string) { return string(r.Code), r.Reason })
}

// appendGates appends a nil list as null, else each item's code and
// reason.
func appendGates[T any](b []byte, items []T, of func(T) (code, why string)) []byte {
	if items == nil {
		return append(b, "null"...)
	}
	b = append(b, '[')
	for i, it := range items {
		if i > 0 {
			b = append(b, ',')
		}
		code, why := of(it)
		b = append(b, `{"code":`...)
		b = appendString(b, code)
		b = append(b, `,"reason":`...)
		b = appendString(b, why)
		b = append(b, '}')
	}
	return append(b, ']')
}

// AppendRaw appends raw JSON as the canonical encoding has it: copied when
// already compact, else compacted (for other canonical encodings that
// embed specs, such as the published state's).
func AppendRaw(b []byte, raw json.RawMessage) ([]byte, error) { return appendRaw(b, raw) }

// AppendString appends s as a JSON string as the canonical encoding writes
// it (encoding/json's escaping, without HTML escaping).
func AppendString(b []byte, s string) []byte { return appendString(b, s) }

func appendRaw(b []byte, raw json.RawMessage) ([]byte, error) {
	if len(raw) == 0 {
		return append(b, "null"...), nil
	}
	if isCompact(raw) {
		return append(b, raw...), nil
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return nil, err
	}
	return append(b, buf.Bytes()...), nil
}

// isCompact reports whether raw has no whitespace outside its strings: a
// scan, far cheaper than json.Compact on the common, compact case.
func isCompact(raw []byte) bool {
	compact := true
	outsideStrings(raw, func(_ int, c byte) bool {
		compact = c != ' ' && c != '\t' && c != '\n' && c != '\r'
		return compact
	})
	return compact
}

// outsideStrings calls fn with each byte of JSON text raw that is not inside
// a string (quotes included), until fn returns false.
func outsideStrings(raw []byte, fn func(i int, c byte) bool) {
	inString, escaped := false, false
	for i, c := range raw {
		switch {
		case escaped:
			escaped = false
		case inString:
			switch c {
			case '\\':
				escaped = true
			case '"':
				inString = false
			}
		case c == '"':
			inString = true
		default:
			if !fn(i, c) {
				return
			}
		}
	}
}

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string exactly as encoding/json does with
// HTML escaping off.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// checkUTF8 refuses text that is not UTF-8: JSON would carry it as U+FFFD,
// and a plan must say exactly what it was made from.
func checkUTF8(p *Plan) error {
	bad := func(what, s string) error {
		if utf8.ValidString(s) {
			return nil
		}
		return fmt.Errorf("%s %q is not valid UTF-8; nlx plans hold UTF-8 text only", what, s)
	}
	errs := []error{bad("nlx version", p.NlxVersion), bad("actor", p.Actor), bad("lineage", p.State.Lineage), bad("config directory", p.Inputs.ConfigDir)}
	for _, f := range p.Inputs.Files {
		errs = append(errs, bad("config file name", f.Path))
	}
	for _, d := range p.Inputs.Dirs {
		errs = append(errs, bad("config directory", d))
	}
	for _, c := range p.Changes {
		errs = append(errs, bad("address", c.Address))
		for _, r := range c.Risks {
			errs = append(errs, bad("risk", string(r.Code)+" "+r.Reason))
		}
		for _, r := range c.Refused {
			errs = append(errs, bad("refusal", string(r.Code)+" "+r.Reason))
		}
		for _, d := range c.Diff {
			errs = append(errs, bad("field path", d.Path))
		}
	}
	return errors.Join(errs...)
}
