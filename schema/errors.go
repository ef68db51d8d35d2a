package schema

import (
	"fmt"
	"sort"
	"strings"

	"cuelang.org/go/cue/token"
	"github.com/nlx-dev/nlx/internal/reason"
)

// Error codes of configuration errors. They are stable: tests, scripts and the
// JSON output rely on them.

// Error is one configuration error, positioned at the offending field.
type Error struct {
	Pos  token.Position // Filename is empty when no position is known
	Path string         // CUE path of the offending field, if any
	Code reason.Code
	Msg  string

	labels []string // the CUE path, unquoted
	format string   // CUE's format of Msg (cueerrors.Error.Msg), "" when not CUE's
	args   []string // and its arguments, rendered
}

func (e *Error) Error() string {
	var b strings.Builder
	if e.Pos.Filename != "" {
		fmt.Fprintf(&b, "%s:%d:%d: ", e.Pos.Filename, e.Pos.Line, e.Pos.Column)
	}
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	fmt.Fprintf(&b, " [%s]", e.Code)
	return b.String()
}

// Errors is every error found in a configuration, sorted by position.
type Errors []*Error

func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// As presents the list as one reason error, invalid_config, whose cause is
// the list: errors.As finds its code like any other.
func (es Errors) As(target any) bool {
	return reason.Present(target, &reason.Error{Code: reason.InvalidConfig,
		Msg: fmt.Sprintf("%d error(s) in the configuration", len(es)), Err: es})
}

func (es Errors) sort() {
	sort.SliceStable(es, func(i, j int) bool {
		a, b := es[i].Pos, es[j].Pos
		if a.Filename != b.Filename {
			return a.Filename < b.Filename
		}
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		if a.Column != b.Column {
			return a.Column < b.Column
		}
		return es[i].Msg < es[j].Msg
	})
}

// dedupe drops errors that repeat the same message at the same place; CUE
// reports some conflicts once per disjunct.
func (es Errors) dedupe() Errors {
	seen := make(map[string]bool, len(es))
	out := es[:0]
	for _, e := range es {
		k := e.Error()
		if seen[k] {
			continue
		}
		seen[k] = true
		out = append(out, e)
	}
	return out
}

// The formats of the CUE errors mergeDisjunctions merges, as CUE's
// evaluator (cuelang.org/go/internal/core/adt) writes them: errors are told
// apart by format and arguments, never by their rendered English.
// TestCUEErrorFormats holds these to the CUE in go.mod.
const (
	cueEmptyDisjunction = "%d errors in empty disjunction:"
	cueConflict         = "conflicting values %s and %s"
	cueConflictTypes    = "conflicting values %s and %s (mismatched types %s and %s)"
	// What addCUE tells a one-of struct's failure by (schema.cue's
	// matchN(1, ...)): the validator's error, and the probe of each choice.
	cueNotSatisfied = "invalid value %s (does not satisfy %s)"
	cueRequired     = "field is required but not present"
)

// mergeDisjunctions turns CUE's "N errors in empty disjunction" followed by
// one "conflicting values A and X" per allowed value into one error saying
// which value was given and which are allowed.
func (es Errors) mergeDisjunctions() Errors {
	type key struct {
		file      string
		line, col int
		path      string
	}
	groups := map[key][]*Error{}
	for _, e := range es {
		k := key{e.Pos.Filename, e.Pos.Line, e.Pos.Column, e.Path}
		groups[k] = append(groups[k], e)
	}
	out := es[:0]
	done := map[key]bool{}
	for _, e := range es {
		k := key{e.Pos.Filename, e.Pos.Line, e.Pos.Column, e.Path}
		if done[k] {
			continue
		}
		if m, ok := mergeGroup(groups[k]); ok {
			done[k] = true
			out = append(out, m)
			continue
		}
		out = append(out, e)
	}
	return out
}

func mergeGroup(g []*Error) (*Error, bool) {
	if len(g) < 3 || g[0].format != cueEmptyDisjunction {
		return nil, false
	}
	pairs := make([][2]string, 0, len(g)-1)
	for _, e := range g[1:] {
		if (e.format != cueConflict && e.format != cueConflictTypes) || len(e.args) < 2 {
			return nil, false
		}
		pairs = append(pairs, [2]string{e.args[0], e.args[1]})
	}
	// The given value is in every conflict, each allowed value in one. CUE
	// names the allowed value first, except across types, where it keeps
	// the order of the kinds.
	given := ""
	for _, c := range []string{pairs[0][1], pairs[0][0]} {
		inAll := true
		for _, p := range pairs {
			inAll = inAll && (p[0] == c || p[1] == c)
		}
		if inAll {
			given = c
			break
		}
	}
	if given == "" {
		return nil, false
	}
	allowed := make([]string, len(pairs))
	for i, p := range pairs {
		allowed[i] = p[0]
		if p[0] == given {
			allowed[i] = p[1]
		}
	}
	merged := *g[0]
	merged.Msg = fmt.Sprintf("%s is not allowed; want one of %s", given, strings.Join(allowed, ", "))
	merged.format, merged.args = "", nil
	return &merged, true
}
