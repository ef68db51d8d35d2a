package reconcile

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
)

// leaves flattens a spec into path -> JSON of each leaf value. Specs are
// compact JSON made by plan.JSON (desired ones from the config, applied ones
// as the state stored them), so a leaf's JSON is the very slice of the spec
// that holds it: the spec is scanned once, nothing is decoded or encoded
// again. A first plan of a large fleet has hundreds of thousands of leaves.
func leaves(spec json.RawMessage) (map[string]json.RawMessage, error) {
	out := map[string]json.RawMessage{}
	if len(spec) == 0 || string(spec) == "null" {
		return out, nil
	}
	f := flattener{data: spec, out: out}
	end, err := f.value("", 0)
	if err == nil && skipSpace(spec, end) != len(spec) {
		err = errors.New("data after the value")
	}
	if err != nil {
		return nil, fmt.Errorf("decode spec: %w", err)
	}
	return out, nil
}

type flattener struct {
	data []byte
	out  map[string]json.RawMessage
}

var errSyntax = errors.New("malformed JSON")

// value flattens the value at i under prefix and returns the index after it.
// An object is flattened by key; a list holding an object by index; any
// other value, a list of scalars included, is one leaf.
func (f *flattener) value(prefix string, i int) (int, error) {
	i = skipSpace(f.data, i)
	if i >= len(f.data) {
		return 0, errSyntax
	}
	switch f.data[i] {
	case '{':
		return f.object(prefix, i)
	case '[':
		end, hasObject, err := scanList(f.data, i)
		if err != nil {
			return 0, err
		}
		if !hasObject {
			f.out[prefix] = f.data[i:end]
			return end, nil
		}
		j, n := i+1, 0
		for {
			j = skipSpace(f.data, j)
			if j < len(f.data) && f.data[j] == ']' {
				return j + 1, nil
			}
			if j, err = f.value(prefix+"["+strconv.Itoa(n)+"]", j); err != nil {
				return 0, err
			}
			n++
			if j, err = separator(f.data, j, ']'); err != nil {
				return 0, err
			}
			if f.data[j-1] == ']' {
				return j, nil
			}
		}
	default:
		end, err := skipValue(f.data, i)
		if err != nil {
			return 0, err
		}
		f.out[prefix] = f.data[i:end]
		return end, nil
	}
}

func (f *flattener) object(prefix string, i int) (int, error) {
	j := skipSpace(f.data, i+1)
	if j < len(f.data) && f.data[j] == '}' {
		if prefix != "" {
			f.out[prefix] = f.data[i : j+1]
		}
		return j + 1, nil
	}
	for {
		j = skipSpace(f.data, j)
		kEnd, err := skipString(f.data, j)
		if err != nil {
			return 0, err
		}
		key, err := stringValue(f.data[j:kEnd])
		if err != nil {
			return 0, err
		}
		j = skipSpace(f.data, kEnd)
		if j >= len(f.data) || f.data[j] != ':' {
			return 0, errSyntax
		}
		path := key
		switch {
		case !plainKey(key):
			path = prefix + "[" + strconv.Quote(key) + "]"
		case prefix != "":
			path = prefix + "." + key
		}
		if j, err = f.value(path, j+1); err != nil {
			return 0, err
		}
		if j, err = separator(f.data, j, '}'); err != nil {
			return 0, err
		}
		if f.data[j-1] == '}' {
			return j, nil
		}
	}
}

// separator consumes a ',' or the closing byte after a member; the result
// points after it.
func separator(data []byte, i int, closing byte) (int, error) {
	i = skipSpace(data, i)
	if i < len(data) && (data[i] == ',' || data[i] == closing) {
		return i + 1, nil
	}
	return 0, errSyntax
}

func skipSpace(data []byte, i int) int {
	for i < len(data) && (data[i] == ' ' || data[i] == '\t' || data[i] == '\n' || data[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index after the string starting at i.
func skipString(data []byte, i int) (int, error) {
	if i >= len(data) || data[i] != '"' {
		return 0, errSyntax
	}
	for j := i + 1; j < len(data); j++ {
		switch data[j] {
		case '\\':
			j++
		case '"':
			return j + 1, nil
		}
	}
	return 0, errSyntax
}

// stringValue returns the string a JSON string literal denotes.
func stringValue(lit []byte) (string, error) {
	for _, c := range lit[1 : len(lit)-1] {
		if c == '\\' {
			var s string
			err := json.Unmarshal(lit, &s)
			return s, err
		}
	}
	return string(lit[1 : len(lit)-1]), nil
}

// skipValue returns the index after the value starting at i.
func skipValue(data []byte, i int) (int, error) {
	if i >= len(data) {
		return 0, errSyntax
	}
	switch data[i] {
	case '"':
		return skipString(data, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(data); j++ {
			switch data[j] {
			case '"':
				end, err := skipString(data, j)
				if err != nil {
					return 0, err
				}
				j = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1, nil
				}
			}
		}
		return 0, errSyntax
	default:
		j := i
		for j < len(data) && data[j] != ',' && data[j] != '}' && data[j] != ']' && data[j] != ' ' && data[j] != '\n' && data[j] != '\t' && data[j] != '\r' {
			j++
		}
		if j == i || !json.Valid(data[i:j]) {
			return 0, errSyntax
		}
		return j, nil
	}
}

// scanList returns the end of the list at i and whether an element of it is
// an object.
func scanList(data []byte, i int) (end int, hasObject bool, err error) {
	end, err = skipValue(data, i)
	if err != nil {
		return 0, false, err
	}
	j := i + 1
	for {
		j = skipSpace(data, j)
		if j >= end-1 {
			return end, hasObject, nil
		}
		if data[j] == '{' {
			hasObject = true
		}
		if j, err = skipValue(data, j); err != nil {
			return 0, false, err
		}
		if j, err = separator(data, j, ']'); err != nil {
			return 0, false, err
		}
	}
}
