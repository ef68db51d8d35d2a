package schema

import (
	"fmt"
	"regexp"
	"sort"
	"strings"

	"cuelang.org/go/cue/token"
)

// Error codes of configuration errors. They are stable: tests, scripts and the
// JSON output rely on them.
const (
	CodeSyntax            = "cue_syntax"           // the CUE does not parse
	CodeSchema            = "schema_violation"     // a value breaks a rule of #Config
	CodeInvalidName       = "invalid_name"         // a resource name breaks ^[a-z][a-z0-9-]{0,62}$
	CodeRawSecret         = "raw_secret_value"     // a secret field holds a value, not a reference
	CodeDanglingReference = "dangling_reference"   // a reference names no resource
	CodeWrongWorkspace    = "connection_workspace" // a job's connection belongs to another workspace
	CodePersonalOnTeam    = "personal_connection_on_team_workspace"
	CodeSkillScope        = "skill_scope_mismatch"
	CodeOwnerRequired     = "personal_workspace_owner"
	CodeInvalidValue      = "invalid_value" // a value CUE cannot judge: a version, a cron line, a time zone
	CodePolicyWidening    = "job_policy_wider_than_workspace"
	CodeSkillPackage      = "skill_package"      // SKILL.md missing or not in the Agent Skills format
	CodeNoConfig          = "no_config"          // the directory holds no .cue file
	CodeJobPin            = "job_pin_mismatch"   // a job's provider or billing pin contradicts its connection
	CodeIO                = "io"                 // a file could not be read
	CodeTooComplex        = "config_too_complex" // evaluating the config exceeds its budget (memory, CPU, time or stack)
	CodeEscapingSymlink   = "escaping_symlink"   // a .cue file is a symbolic link leading out of the config directory
	// CodeImageForeignSkills: a workspace's image carries (bakes in) a team
	// or personal skill package the workspace is not entitled to.
	CodeImageForeignSkills = "image_carries_foreign_skills"
)

// Error is one configuration error, positioned at the offending field.
type Error struct {
	Pos  token.Position // Filename is empty when no position is known
	Path string         // CUE path of the offending field, if any
	Code string
	Msg  string

	labels []string // the CUE path, unquoted
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

var (
	reEmptyDisjunction = regexp.MustCompile(`^\d+ errors in empty disjunction:?$`)
	reConflict         = regexp.MustCompile(`^conflicting values (.+) and (.+)$`)
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
	if len(g) < 3 || !reEmptyDisjunction.MatchString(g[0].Msg) {
		return nil, false
	}
	var allowed []string
	given := ""
	for _, e := range g[1:] {
		m := reConflict.FindStringSubmatch(e.Msg)
		if m == nil {
			return nil, false
		}
		// CUE names the allowed value first and the given one second.
		if given != "" && m[2] != given {
			return nil, false
		}
		given = m[2]
		allowed = append(allowed, m[1])
	}
	merged := *g[0]
	merged.Msg = fmt.Sprintf("%s is not allowed; want one of %s", given, strings.Join(allowed, ", "))
	return &merged, true
}
