// Package plan defines what nlx intends to change: the Plan, its Changes and
// their Actions and Risks, the versioned plan file that binds a plan to the
// exact config and state it was made from, and the views that show a plan to
// people (text, markdown) and programs (JSON).
package plan

import (
	"encoding/json"

	"github.com/nlx-dev/nlx/schema"
)

// FormatVersion is the version of the plan file and of the JSON view. Readers
// refuse any other version.
const FormatVersion = 1

// Action is what a change does to one resource.
type Action string

// The actions. A replace deletes and recreates a resource because a field
// that cannot change in place did.
const (
	Create  Action = "create"
	Update  Action = "update"
	Delete  Action = "delete"
	Replace Action = "replace"
)

// Symbol is the action's mark in the text view, as in Terraform.
func (a Action) Symbol() string {
	switch a {
	case Create:
		return "+"
	case Update:
		return "~"
	case Delete:
		return "-"
	case Replace:
		return "-/+"
	}
	return "?"
}

// Valid reports whether a is one of the defined actions.
func (a Action) Valid() bool {
	switch a {
	case Create, Update, Delete, Replace:
		return true
	}
	return false
}

// IsReplace reports whether a replaces the resource.
func (a Action) IsReplace() bool { return a == Replace }

// Creates reports whether a results in a new resource.
func (a Action) Creates() bool { return a == Create || a == Replace }

// Destroys reports whether a removes an existing resource.
func (a Action) Destroys() bool { return a == Delete || a == Replace }

// Risk marks a change that apply carries out only with a recorded approval.
type Risk struct {
	Code   string `json:"code"`   // stable: image_migration, destructive, ...
	Reason string `json:"reason"` // one line for people
}

// FieldDiff is one changed field. Before is absent when the field is new,
// After when it is gone.
type FieldDiff struct {
	Path          string          `json:"path"`
	Before        json.RawMessage `json:"before,omitempty"`
	After         json.RawMessage `json:"after,omitempty"`
	ForcesReplace bool            `json:"forces_replacement,omitempty"`
}

// Change is what the plan does to one resource.
type Change struct {
	Address string          `json:"address"` // kind.name
	Kind    schema.Kind     `json:"kind"`
	Name    string          `json:"name"`
	Action  Action          `json:"action"`
	Risks   []Risk          `json:"risks"`
	Diff    []FieldDiff     `json:"diff"`
	Before  json.RawMessage `json:"before"` // the applied spec; null for a create
	After   json.RawMessage `json:"after"`  // the desired spec; null for a delete
}

// StateRef names the state a plan was made against.
type StateRef struct {
	Lineage string `json:"lineage"`
	Serial  int64  `json:"serial"`
}

// Inputs are the config inputs a plan was made from.
type Inputs struct {
	// ConfigDir is the config directory as given to nlx plan; apply reads it
	// again unless told another directory. Display only: not compared.
	ConfigDir  string             `json:"config_dir"`
	ConfigHash string             `json:"config_hash"`
	Files      []schema.InputFile `json:"files"`
	Dirs       []string           `json:"dirs,omitempty"`
}

// Summary counts changes as Terraform does: a replace adds and destroys.
type Summary struct {
	Add     int `json:"add"`
	Change  int `json:"change"`
	Destroy int `json:"destroy"`
}

// Plan is a saved plan: everything apply needs, bound to the state and the
// config it was made from.
type Plan struct {
	FormatVersion int      `json:"format_version"`
	NlxVersion    string   `json:"nlx_version"`
	State         StateRef `json:"state"`
	Inputs        Inputs   `json:"inputs"`
	Changes       []Change `json:"changes"`
	Summary       Summary  `json:"summary"`
	// PlanHash is "sha256:" and the hex SHA-256 of the plan's canonical
	// encoding with PlanHash empty. It must stay the last field (see Encode).
	PlanHash string `json:"plan_hash"`
}

// Summarize counts the changes.
func Summarize(changes []Change) Summary {
	var s Summary
	for _, c := range changes {
		switch c.Action {
		case Create:
			s.Add++
		case Update:
			s.Change++
		case Delete:
			s.Destroy++
		case Replace:
			s.Add++
			s.Destroy++
		}
	}
	return s
}

// Empty reports whether the plan changes nothing.
func (p *Plan) Empty() bool { return len(p.Changes) == 0 }
