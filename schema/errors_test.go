package schema

import (
	"testing"

	"cuelang.org/go/cue"
	"cuelang.org/go/cue/cuecontext"
	cueerrors "cuelang.org/go/cue/errors"
)

// TestCUEErrorFormats holds the formats mergeDisjunctions tells CUE's errors
// apart by to the CUE in go.mod: an upgrade that rewords one fails here,
// not silently in the messages users read.
func TestCUEErrorFormats(t *testing.T) {
	tests := []struct {
		name, src string
		formats   []string // each must be among the errors' formats
	}{
		{"same kind", `x: ("a" | "b") & "c"`, []string{cueEmptyDisjunction, cueConflict}},
		{"another kind", `x: ("a" | "b") & 3`, []string{cueEmptyDisjunction, cueConflictTypes}},
		{"matchN", `x: {a?: int, b?: int} & matchN(1, [{a!: _}, {b!: _}]), x: {}`, []string{cueNotSatisfied, cueRequired}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := cuecontext.New().CompileString(tt.src)
			err := v.Validate(cue.Concrete(true))
			if err == nil {
				t.Fatal("no error")
			}
			got := map[string]bool{}
			for _, e := range cueerrors.Errors(err) {
				format, _ := e.Msg()
				got[format] = true
			}
			for _, f := range tt.formats {
				if !got[f] {
					t.Errorf("no error of format %q among %v", f, got)
				}
			}
		})
	}
}

func TestMergeGroup(t *testing.T) {
	header := &Error{Msg: "2 errors in empty disjunction:", format: cueEmptyDisjunction, args: []string{"2"}}
	conflict := func(format string, args ...string) *Error {
		return &Error{Msg: "(rendered)", format: format, args: args}
	}
	tests := []struct {
		name string
		g    []*Error
		want string // "" when not merged
	}{
		{"allowed first", []*Error{header, conflict(cueConflict, `"api"`, `"x and y"`), conflict(cueConflict, `"subscription"`, `"x and y"`)},
			`"x and y" is not allowed; want one of "api", "subscription"`},
		{"given first, across types", []*Error{header, conflict(cueConflictTypes, "3", `"api"`, "int", "string"), conflict(cueConflictTypes, "3", `"subscription"`, "int", "string")},
			`3 is not allowed; want one of "api", "subscription"`},
		{"mixed orders", []*Error{header, conflict(cueConflict, "1", "3"), conflict(cueConflictTypes, "3", `"a"`, "int", "string")},
			`3 is not allowed; want one of 1, "a"`},
		{"no value in common", []*Error{header, conflict(cueConflict, "1", "2"), conflict(cueConflict, "3", "4")}, ""},
		{"not a conflict", []*Error{header, conflict(cueConflict, "1", "2"), conflict("invalid value %v (out of bound %v)", "2", "=~x")}, ""},
		{"no header", []*Error{conflict(cueConflict, "1", "3"), conflict(cueConflict, "1", "3"), conflict(cueConflict, "2", "3")}, ""},
		{"one conflict", []*Error{header, conflict(cueConflict, "1", "3")}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, ok := mergeGroup(tt.g)
			switch {
			case tt.want == "" && ok:
				t.Errorf("merged into %q", m.Msg)
			case tt.want != "" && (!ok || m.Msg != tt.want):
				t.Errorf("got %v %v, want %q", m, ok, tt.want)
			}
		})
	}
}
