package reconcile

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"testing"

	"github.com/nlx-dev/nlx/schema"
)

// decodedLeaves is the obvious flattening, by decoding: the oracle leaves
// must agree with.
func decodedLeaves(spec json.RawMessage) (map[string]json.RawMessage, error) {
	out := map[string]json.RawMessage{}
	if len(spec) == 0 || string(spec) == "null" {
		return out, nil
	}
	dec := json.NewDecoder(bytes.NewReader(spec))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, fmt.Errorf("data after the value")
	}
	var walk func(prefix string, v any) error
	walk = func(prefix string, v any) error {
		switch x := v.(type) {
		case map[string]any:
			if len(x) == 0 && prefix != "" {
				out[prefix] = json.RawMessage("{}")
				return nil
			}
			for k, e := range x {
				p := k
				switch {
				case !plainKey(k):
					p = prefix + "[" + strconv.Quote(k) + "]"
				case prefix != "":
					p = prefix + "." + k
				}
				if err := walk(p, e); err != nil {
					return err
				}
			}
			return nil
		case []any:
			if hasObject(x) {
				for i, e := range x {
					if err := walk(prefix+"["+strconv.Itoa(i)+"]", e); err != nil {
						return err
					}
				}
				return nil
			}
		}
		b, err := leafJSON(v)
		out[prefix] = b
		return err
	}
	return out, walk("", v)
}

func hasObject(l []any) bool {
	for _, e := range l {
		if _, ok := e.(map[string]any); ok {
			return true
		}
	}
	return false
}

func checkLeaves(t *testing.T, spec []byte) {
	t.Helper()
	got, gerr := leaves(spec)
	want, werr := decodedLeaves(spec)
	if (gerr == nil) != (werr == nil) {
		t.Fatalf("leaves(%s): error %v, decoding says %v", spec, gerr, werr)
	}
	if gerr == nil && !reflect.DeepEqual(got, want) {
		t.Fatalf("leaves(%s):\ngot  %s\nwant %s", spec, show(got), show(want))
	}
}

func TestLeavesAgreesWithDecoding(t *testing.T) {
	cfg, err := schema.Load(context.Background(), "../examples/pi-team")
	if err != nil {
		t.Fatal(err)
	}
	desired, err := Desired(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range desired {
		checkLeaves(t, r.Spec)
	}
	for _, spec := range []string{
		`{}`, `{"a":{}}`, `{"a":[]}`, `{"a":[{}]}`, `{"a":[1,{"b":2},[3]]}`, `{"a b":{"c.d":"e"}}`,
		`{"k\"q":"v\\\"w"}`, `{"u":"é\u2028"}`, `{"n":-1.5e3,"t":true,"f":false,"z":null}`,
		`{"l":[[1],[2]]}`, `{"deep":{"x":{"y":{"z":[{"w":1}]}}}}`,
	} {
		checkLeaves(t, []byte(spec))
	}
}

func FuzzLeaves(f *testing.F) {
	for _, s := range []string{`{"a":1}`, `{"a":[{"b":"c"}],"d":{"e":[1,2]}}`, `{"x":"\\u0041"}`, `[`, `{"a":}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, spec []byte) {
		var buf bytes.Buffer
		if json.Compact(&buf, spec) != nil || !json.Valid(spec) {
			leaves(spec) // must not panic
			return
		}
		// Specs are compact, as plan.JSON writes them.
		var v any
		if json.Unmarshal(buf.Bytes(), &v) != nil {
			return
		}
		canon, err := leafJSON(v)
		if err != nil {
			return
		}
		if _, ok := v.(map[string]any); !ok {
			return
		}
		if bytes.Contains(canon, []byte(`\u`)) || !bytes.Equal(canon, buf.Bytes()) {
			return // not in the canonical form plan.JSON writes
		}
		checkLeaves(t, canon)
	})
}
