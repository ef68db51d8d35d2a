package schema

import (
	"context"
	"fmt"
	"reflect"
	"testing"

	"cuelang.org/go/cue/token"
	"github.com/nlx-dev/nlx/internal/reason"
)

// fill sets every field reachable from v to a value of its own (n counts
// them), with two entries in every map and slice; empty makes every map and
// slice empty but not nil instead, which the codec must keep apart.
func fill(t *testing.T, v reflect.Value, n *int, empty bool) {
	*n++
	switch v.Kind() {
	case reflect.String:
		v.SetString(fmt.Sprintf("s%d", *n))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int64:
		v.SetInt(int64(-*n * 1000003))
	case reflect.Float64:
		v.SetFloat(float64(*n) + 0.5)
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(t, v.Elem(), n, empty)
	case reflect.Slice:
		k := 2
		if empty {
			k = 0
		}
		v.Set(reflect.MakeSlice(v.Type(), k, k))
		for i := range k {
			fill(t, v.Index(i), n, empty)
		}
	case reflect.Map:
		v.Set(reflect.MakeMap(v.Type()))
		if empty {
			return
		}
		for range 2 {
			k := reflect.New(v.Type().Key()).Elem()
			fill(t, k, n, empty)
			e := reflect.New(v.Type().Elem()).Elem()
			fill(t, e, n, empty)
			v.SetMapIndex(k, e)
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if !v.Type().Field(i).IsExported() {
				t.Fatalf("%s.%s is unexported: the load child cannot carry it", v.Type(), v.Type().Field(i).Name)
			}
			fill(t, v.Field(i), n, empty)
		}
	default:
		t.Fatalf("fill: %s needs a case here and in codec.go", v.Type())
	}
}

// TestResultRoundTrip: whatever a Config holds comes back from the child
// exactly. Every field is filled by reflection, so a field added to any type
// of a Config and forgotten in codec.go fails here.
func TestResultRoundTrip(t *testing.T) {
	// Error has an unexported field, so fill cannot reach it: count.
	if n := reflect.TypeFor[Error]().NumField() + reflect.TypeFor[token.Position]().NumField(); n != 11 {
		t.Fatalf("Error and token.Position have %d fields, encodeError carries 11: carry the new one", n)
	}
	real, err := Load(context.Background(), "../examples/pi-team")
	if err != nil {
		t.Fatal(err)
	}
	tools, err := Load(context.Background(), "testdata/base")
	if err != nil {
		t.Fatal(err)
	}
	if len(tools.Tools) == 0 || len(tools.Workspaces["core"].Tools) == 0 {
		t.Fatal("testdata/base grants no tools")
	}
	full, empty := &Config{}, &Config{}
	var n int
	fill(t, reflect.ValueOf(full).Elem(), &n, false)
	fill(t, reflect.ValueOf(empty).Elem(), &n, true)
	nilMaps := &Config{Providers: map[string]*Provider{"p": nil}}
	errs := Errors{
		{Pos: token.Position{Filename: "a.cue", Offset: 7, Line: 2, Column: 3}, Path: "jobs.x", Code: reason.SchemaViolation, Msg: "m", labels: []string{"jobs", "x"}, format: "%s m", args: []string{"a"}},
		{Code: reason.NoConfig, Msg: "no .cue files in d"},
		{Pos: token.Position{Filename: "b.cue"}, Code: reason.ConfigIO, Msg: "", labels: []string{}},
	}
	tests := []struct {
		name string
		cfg  *Config
		err  error
	}{
		{"a real config", real, nil},
		{"a config with tools granted", tools, nil},
		{"a tool of each form", &Config{Tools: map[string]*Tool{
			"cmd":  {Command: []string{"mcp-x", ""}, Env: map[string]string{}, Secrets: map[string]string{"T": "env:T"}, Egress: "full", Scope: "personal", Owner: "ana"},
			"http": {URL: "http://127.0.0.1:1/mcp", Egress: "none", Scope: "team", Owner: "core"},
			"unix": {URL: "unix:///s.sock", Endpoint: "/mcp", Scope: "team", Owner: "core"},
		}, Workspaces: map[string]*Workspace{"w": {Tools: []string{"cmd", "http"}}, "v": {Tools: []string{}}}}, nil},
		{"every field set", full, nil},
		{"every map and slice empty", empty, nil},
		{"a nil resource", nilMaps, nil},
		{"zero", &Config{}, nil},
		{"errors", nil, errs},
		{"no errors", nil, Errors{}},
		{"another error", nil, fmt.Errorf("boom")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := encodeResult(tt.cfg, tt.err)
			r, ok := decodeResult(data)
			if !ok {
				t.Fatal("the result does not decode")
			}
			if !reflect.DeepEqual(r.cfg, tt.cfg) {
				t.Errorf("config: got %+v, want %+v", r.cfg, tt.cfg)
			}
			if fmt.Sprint(r.err) != fmt.Sprint(tt.err) || (tt.err == nil) != (r.err == nil) {
				t.Errorf("error: got %v, want %v", r.err, tt.err)
			}
			if want, ok := tt.err.(Errors); ok && !reflect.DeepEqual(r.err, want) {
				t.Errorf("errors: got %#v, want %#v", r.err, want)
			}
			// A child that died writing leaves a prefix: never a result.
			for cut := 0; cut < len(data); cut += max(1, len(data)/97) {
				if _, ok := decodeResult(data[:cut]); ok {
					t.Fatalf("%d of %d bytes decode as a result", cut, len(data))
				}
			}
			if _, ok := decodeResult(append(data[:len(data):len(data)], 0)); ok {
				t.Error("a result with a byte too many decodes")
			}
		})
	}
}
