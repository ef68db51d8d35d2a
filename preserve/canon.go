package preserve

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/titanous/json5"
)

// Canonical records. A JSON record's canonical form is its value encoded
// again: object keys sorted, no insignificant space, numbers exactly as
// written, no HTML escaping; with its secrets replaced by markers. A line
// of a JSONL file is its own bytes (OpenClaw writes them compact, and
// re-encoding 400 MB of transcripts would cost more than reading them). A
// file record is its bytes.

// secretKey is the marker's one key: a secret value is replaced in the
// export (and in every canonical record, so that no hash depends on a
// secret) by {"$nlx_secret": "path/in/installation#/json/pointer"}, where
// it stays. The location is relative, so that no hash depends on where the
// installation lies either; the reference to it is file: and the
// installation's path (the manifest's source) before it.
const secretKey = "$nlx_secret"

// Secret is where a secret was found: never its value.
type Secret struct {
	Kind     Kind   `json:"kind"`
	Location string `json:"location"` // path in the installation, with a JSON pointer or key
	Ref      string `json:"ref"`      // file: (or env:) reference to where it stays
}

// secretName reports whether an object key names a secret value.
var (
	keyFolder      = strings.NewReplacer("_", "", "-", "")
	pointerEscaper = strings.NewReplacer("~", "~0", "/", "~1")
)

func secretName(k string) bool {
	l := strings.ToLower(keyFolder.Replace(k))
	switch l {
	case "key", "access", "refresh", "password", "pass", "pin", "cookie":
		return true
	}
	for _, s := range []string{"token", "secret", "password", "apikey", "privatekey", "accesskey", "clientsecret", "signingkey"} {
		if strings.Contains(l, s) {
			return true
		}
	}
	return false
}

// redactor replaces the secrets of one file's JSON values, reporting each.
type redactor struct {
	kind   Kind
	file   string // path in the installation
	source string // the installation's absolute path, for references
	all    bool   // every string value is a secret (secrets.json)
	found  func(Secret)
}

func jsonPointer(path []string) string {
	var b strings.Builder
	for _, p := range path {
		b.WriteByte('/')
		b.WriteString(pointerEscaper.Replace(p))
	}
	return b.String()
}

// fileRef is the file: reference to a location in the installation at
// source.
func fileRef(source, loc string) string {
	return "file:" + strings.TrimSuffix(source, "/") + "/" + loc
}

// redact returns v with its secrets replaced by markers. A marker already
// there stays: redacting a redacted value changes nothing.
func (r *redactor) redact(v any, path []string, secret bool) any {
	switch x := v.(type) {
	case map[string]any:
		if loc, ok := x[secretKey].(string); ok && len(x) == 1 {
			// Redacted already (an export's copy): still a secret's place.
			if r.found != nil {
				r.found(Secret{Kind: r.kind, Location: loc, Ref: fileRef(r.source, loc)})
			}
			return x
		}
		if isSecretRef(x) {
			return x // a reference (source env/file/exec) is no secret
		}
		// A secret-named key makes its value secret: a string, or a list
		// of them; an object below it is judged by its own keys (a
		// "tokens" map holds a token beside its role and scopes).
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = r.redact(e, append(path, k), secretName(k))
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = r.redact(e, append(path, strconv.Itoa(i)), secret)
		}
		return out
	case string:
		if (secret || r.all) && x != "" {
			loc := r.file + "#" + jsonPointer(path)
			if r.found != nil {
				r.found(Secret{Kind: r.kind, Location: loc, Ref: fileRef(r.source, loc)})
			}
			return map[string]any{secretKey: loc}
		}
	}
	return v
}

// isSecretRef reports whether m is an OpenClaw SecretRef: {source, provider, id}.
func isSecretRef(m map[string]any) bool {
	src, ok := m["source"].(string)
	_, id := m["id"].(string)
	return ok && id && (src == "env" || src == "file" || src == "exec") && len(m) <= 3
}

// decodeJSON decodes one JSON value with its numbers as written.
func decodeJSON(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, errors.New("more than one JSON value")
	}
	return v, nil
}

// decodeJSON5 decodes openclaw.json (JSON5: comments, unquoted keys,
// trailing commas) with its numbers as written.
func decodeJSON5(data []byte) (any, error) {
	dec := json5.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return numbers(v), nil
}

// numbers turns json5's Number values into encoding/json's.
func numbers(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = numbers(e)
		}
	case []any:
		for i, e := range x {
			x[i] = numbers(e)
		}
	case json5.Number:
		return json.Number(string(x))
	}
	return v
}

// canonical encodes v canonically.
func canonical(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// indented encodes v as the export writes JSON files: canonical key order,
// indented for people.
func indented(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// members streams the members of the object or the elements of the array
// at field of the top-level object in r (field "" is the top level
// itself): fn gets each key (an index for an array) and raw value, one at
// a time, so that a large sessions.json is never wholly in memory. The
// other top-level fields are returned, decoded.
func members(r io.Reader, field string, fn func(key string, raw json.RawMessage) error) (map[string]any, error) {
	dec := json.NewDecoder(r)
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, errors.New("not a JSON object")
	}
	rest := map[string]any{}
	each := func() error {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		d, ok := tok.(json.Delim)
		if !ok || (d != '{' && d != '[') {
			return fmt.Errorf("%s is not an object or array", orTop(field))
		}
		for i := 0; dec.More(); i++ {
			key := strconv.Itoa(i)
			if d == '{' {
				kt, err := dec.Token()
				if err != nil {
					return err
				}
				key = kt.(string)
			}
			var raw json.RawMessage
			if err := dec.Decode(&raw); err != nil {
				return err
			}
			if err := fn(key, raw); err != nil {
				return err
			}
		}
		_, err = dec.Token()
		return err
	}
	if field == "" {
		// The top level's members themselves.
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return nil, err
			}
			var raw json.RawMessage
			if err := dec.Decode(&raw); err != nil {
				return nil, err
			}
			if err := fn(kt.(string), raw); err != nil {
				return nil, err
			}
		}
		return rest, nil
	}
	for dec.More() {
		kt, err := dec.Token()
		if err != nil {
			return nil, err
		}
		k := kt.(string)
		if k == field {
			if err := each(); err != nil {
				return nil, err
			}
			continue
		}
		var v any
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		rest[k] = v
	}
	return rest, nil
}

func orTop(field string) string {
	if field == "" {
		return "the top level"
	}
	return field
}

// sortedKeys lists m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
