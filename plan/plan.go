// Package plan defines what nlx intends to change: the Plan, its Changes and
// their Actions and Risks, the versioned plan file that binds a plan to the
// exact config and state it was made from, and the views that show a plan to
// people (text, markdown) and programs (JSON).
package plan

import (
	"encoding/json"

	"github.com/nlx-dev/nlx/internal/reason"
	"github.com/nlx-dev/nlx/schema"
)

// FormatVersion is the version of the plan file and of the JSON view. Readers
// refuse any other version.
const FormatVersion = 3

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

// Risk marks a change that apply carries out only with a recorded approval
// (or, for unknown_claim, a resolution).
type Risk struct {
	Code   RiskCode `json:"code"`   // stable: image_migration, destructive, ...
	Reason string   `json:"reason"` // one line for people
}

// Refusal is a reason no approval can overcome: the config must change.
// Its code is a reason code (disabled_requested_provider,
// implicit_substitution, raw_secret_value): apply refuses with it.
type Refusal struct {
	Code   reason.Code `json:"code"`
	Reason string      `json:"reason"`
}

// RiskCode is the stable code of a risk; its values are defined here and
// only here (TestNoBareCodeLiterals in internal/constcheck enforces that).
type RiskCode string

// Risk codes: apply needs an approval for each (unknown_claim: a resolution).
const (
	RiskImageMigration     RiskCode = "image_migration"     // a workspace's image changes
	RiskHeldImport         RiskCode = "held_import"         // an imported resource leaves the held state
	RiskUnknownClaim       RiskCode = "unknown_claim"       // the resource has an outcome nobody knows
	RiskDestructive        RiskCode = "destructive"         // a delete, a replace or a chat reset
	RiskPermissionWidening RiskCode = "permission_widening" // policy, egress, authority, roles or operators grow
	RiskCredentialRebind   RiskCode = "credential_rebind"   // a connection's credentials or a job's connection change
)

// NeedsApproval reports whether a risk is cleared by an approval (all but
// unknown_claim, which only a resolution clears).
func NeedsApproval(code RiskCode) bool { return code != RiskUnknownClaim }

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
	Refused []Refusal       `json:"refused"` // reasons no approval can overcome
	Diff    []FieldDiff     `json:"diff"`
	Before  json.RawMessage `json:"before"` // the applied spec; null for a create
	After   json.RawMessage `json:"after"`  // the desired spec; null for a delete
	// Import names the preservation whose import creates this resource:
	// it is created held (under review), and only a later reviewed plan
	// releases it into service.
	Import string `json:"import,omitempty"`
}

// StateRef names the state a plan was made against.
type StateRef struct {
	Lineage string `json:"lineage"`
	Serial  int64  `json:"serial"`
	// Basis is the content hash of the state the plan was made from (what
	// nlx state export writes; reconcile.Snapshot.Basis): apply refuses
	// the plan unless the state at that serial hashes the same.
	Basis string `json:"basis,omitempty"`
}

// Inputs are the config inputs a plan was made from.
type Inputs struct {
	// ConfigDir is the config directory as given to nlx plan; apply reads it
	// again unless told another directory. Display only: not compared.
	ConfigDir  string             `json:"config_dir"`
	ConfigHash string             `json:"config_hash"`
	Files      []schema.InputFile `json:"files"`
	Dirs       []string           `json:"dirs,omitempty"`
	// Images are the images workspaces use, by name, resolved to the
	// digests the plan pins.
	Images map[string]ImagePin `json:"images,omitempty"`
}

// ImagePin is an image resolved when planning.
type ImagePin struct {
	Digest   string `json:"digest"`             // the image index digest
	Ref      string `json:"ref,omitempty"`      // a prebuilt image's reference, as configured
	Registry string `json:"registry,omitempty"` // where a built image is pushed
}

// Summary counts changes as Terraform does: a replace adds and destroys.
type Summary struct {
	Add     int `json:"add"`
	Change  int `json:"change"`
	Destroy int `json:"destroy"`
	// Gated counts changes with at least one risk; Refused those that can
	// never be applied as configured.
	Gated   int `json:"gated"`
	Refused int `json:"refused"`
}

// Unknown is an effect whose outcome nobody knows: it was dispatched and the
// apply that dispatched it ended before recording how it went. It is never
// replayed; `nlx resolve` records what happened.
type Unknown struct {
	Address string `json:"address"`
	Action  Action `json:"action"`
	ApplyID int64  `json:"apply_id"`
	At      string `json:"at"` // when it was dispatched
}

// UnknownClaim is an occurrence of a job whose outcome nobody knows: it was
// dispatched and its process is gone without a recorded end. It is never
// run again, holds its conversation's workflow lock, and every change to
// the job, its workspace or its connection carries unknown_claim until
// `nlx resolve claim` records what happened.
type UnknownClaim struct {
	ID          string `json:"id"`
	Job         string `json:"job"`
	Workspace   string `json:"workspace"`
	Connection  string `json:"connection"`
	ScheduledAt string `json:"scheduled_at"`
	At          string `json:"at"` // when it was dispatched
}

// Plan is a saved plan: everything apply needs, bound to the state and the
// config it was made from.
type Plan struct {
	FormatVersion int    `json:"format_version"`
	NlxVersion    string `json:"nlx_version"`
	Actor         string `json:"actor"` // who made the plan (nlx plan --actor)
	// ActorProof is how the actor was proven when the plan was made
	// (unix:USER, key:FINGERPRINT), absent when the actor is only named.
	ActorProof string   `json:"actor_proof,omitempty"`
	State      StateRef `json:"state"`
	Inputs     Inputs   `json:"inputs"`
	// Unknowns are the unresolved unknown outcomes in the state at plan
	// time; every change touching one carries unknown_claim.
	Unknowns []Unknown `json:"unknown_outcomes"`
	// UnknownClaims are the job occurrences nobody knows the outcome of
	// (nlx serve's claims); every change touching one carries
	// unknown_claim. Absent when there are none.
	UnknownClaims []UnknownClaim `json:"unknown_claims,omitempty"`
	Changes       []Change       `json:"changes"`
	Summary       Summary        `json:"summary"`
	// PlanHash is "sha256:" and the hex SHA-256 of the plan's canonical
	// encoding with PlanHash empty. It must stay the last field (see Encode).
	PlanHash string `json:"plan_hash"`
}

// Summarize counts the changes.
func Summarize(changes []Change) Summary {
	var s Summary
	for _, c := range changes {
		if len(c.Risks) > 0 {
			s.Gated++
		}
		if len(c.Refused) > 0 {
			s.Refused++
		}
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
