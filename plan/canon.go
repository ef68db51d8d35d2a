package plan

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"unicode/utf8"
)

// canonical returns the canonical encoding of p: byte for byte what JSON(p)
// gives (TestCanonicalMatchesEncodingJSON holds the two together), written
// by hand because encoding/json re-validates every json.RawMessage and a
// 14,000-change plan holds hundreds of thousands of them.
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
	b = append(b, `,"state":`...)
	b, err := small(b, p.State)
	if err != nil {
		return nil, err
	}
	b = append(b, `,"inputs":`...)
	if b, err = small(b, p.Inputs); err != nil {
		return nil, err
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
			b = appendChange(b, &p.Changes[i])
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

func appendChange(b []byte, c *Change) []byte {
	b = append(b, `{"address":`...)
	b = appendString(b, c.Address)
	b = append(b, `,"kind":`...)
	b = appendString(b, string(c.Kind))
	b = append(b, `,"name":`...)
	b = appendString(b, c.Name)
	b = append(b, `,"action":`...)
	b = appendString(b, string(c.Action))
	b = append(b, `,"risks":`...)
	if c.Risks == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i, r := range c.Risks {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"code":`...)
			b = appendString(b, r.Code)
			b = append(b, `,"reason":`...)
			b = appendString(b, r.Reason)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
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
				b = append(b, d.Before...)
			}
			if len(d.After) > 0 {
				b = append(b, `,"after":`...)
				b = append(b, d.After...)
			}
			if d.ForcesReplace {
				b = append(b, `,"forces_replacement":true`...)
			}
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	b = append(b, `,"before":`...)
	b = appendRaw(b, c.Before)
	b = append(b, `,"after":`...)
	b = appendRaw(b, c.After)
	return append(b, '}')
}

func appendRaw(b []byte, raw json.RawMessage) []byte {
	if len(raw) == 0 {
		return append(b, "null"...)
	}
	return append(b, raw...)
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

// compactRaw rewrites every raw JSON value of p in compact form, so that a
// plan read from a file hashes as the one that was written, whatever
// whitespace the file holds.
func compactRaw(p *Plan) error {
	var buf bytes.Buffer
	fix := func(raw *json.RawMessage) error {
		if len(*raw) == 0 {
			return nil
		}
		buf.Reset()
		if err := json.Compact(&buf, *raw); err != nil {
			return err
		}
		if !bytes.Equal(buf.Bytes(), *raw) {
			*raw = append(json.RawMessage(nil), buf.Bytes()...)
		}
		return nil
	}
	for i := range p.Changes {
		c := &p.Changes[i]
		for _, raw := range []*json.RawMessage{&c.Before, &c.After} {
			if err := fix(raw); err != nil {
				return fmt.Errorf("change %s: %w", c.Address, err)
			}
		}
		for j := range c.Diff {
			for _, raw := range []*json.RawMessage{&c.Diff[j].Before, &c.Diff[j].After} {
				if err := fix(raw); err != nil {
					return fmt.Errorf("change %s: %w", c.Address, err)
				}
			}
		}
	}
	return nil
}
