package reconcile

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/nlx-dev/nlx/plan"
	"github.com/nlx-dev/nlx/schema"
)

// Authority is who may approve on a host. It is always read from the
// applied state, never from a plan: a plan that makes alice an admin cannot
// be approved by alice.
type Authority struct {
	Operators     map[string]bool
	TwoPersonRule bool
	Admins        map[string]map[string]bool // workspace -> its admins
}

// NewAuthority reads the authority out of applied specs: host.config and
// the workspaces; other resources are ignored.
func NewAuthority(resources []Resource) (*Authority, error) {
	a := &Authority{Operators: map[string]bool{}, Admins: map[string]map[string]bool{}}
	for _, r := range resources {
		switch r.Kind {
		case schema.KindHost:
			var h schema.Host
			if err := json.Unmarshal(r.Spec, &h); err != nil {
				return nil, fmt.Errorf("read %s: %w", r.Address(), err)
			}
			for _, o := range h.Operators {
				a.Operators[o] = true
			}
			a.TwoPersonRule = h.TwoPersonRule
		case schema.KindWorkspace:
			var w struct {
				Members map[string]string `json:"members"`
			}
			if err := json.Unmarshal(r.Spec, &w); err != nil {
				return nil, fmt.Errorf("read %s: %w", r.Address(), err)
			}
			admins := map[string]bool{}
			for m, role := range w.Members {
				if role == "admin" {
					admins[m] = true
				}
			}
			a.Admins[r.Name] = admins
		}
	}
	return a, nil
}

// Scope is what a change is inside of: the workspaces it touches, or the
// host as a whole.
type Scope struct {
	Workspaces []string
	Host       bool
}

func (s Scope) String() string {
	if s.Host {
		return "the host"
	}
	return "workspace " + strings.Join(s.Workspaces, " and ")
}

// ScopeOf returns the scope of a change: a workspace is its own scope;
// connections, jobs and preservations are inside the workspaces their
// before and after specs name; everything else is host-wide.
func ScopeOf(c *plan.Change) Scope {
	switch c.Kind {
	case schema.KindWorkspace:
		return Scope{Workspaces: []string{c.Name}}
	case schema.KindConnection, schema.KindJob, schema.KindPreservation:
		seen := map[string]bool{}
		for _, spec := range []json.RawMessage{c.Before, c.After} {
			var x struct {
				Workspace string `json:"workspace"`
			}
			if len(spec) > 0 && json.Unmarshal(spec, &x) == nil && x.Workspace != "" {
				seen[x.Workspace] = true
			}
		}
		return Scope{Workspaces: slices.Sorted(maps.Keys(seen))}
	}
	return Scope{Host: true}
}

// MayApprove reports whether actor may approve change c; when not, it says
// why. Operators approve anything; an admin approves changes inside
// workspaces where they are admin, every one of them. While the host has no
// operators, any workspace admin may approve host.config (naming the first
// operators); otherwise host-wide changes are for operators.
func (a *Authority) MayApprove(actor string, c *plan.Change) (bool, string) {
	if a.Operators[actor] {
		return true, ""
	}
	s := ScopeOf(c)
	if s.Host {
		if c.Kind == schema.KindHost && len(a.Operators) == 0 && a.isAnyAdmin(actor) {
			return true, ""
		}
		return false, fmt.Sprintf("%s is not a host operator in the applied state, and %s is host-wide", actor, c.Address)
	}
	for _, w := range s.Workspaces {
		if !a.Admins[w][actor] {
			return false, fmt.Sprintf("%s is neither a host operator nor an admin of workspace %s in the applied state", actor, w)
		}
	}
	return true, ""
}

func (a *Authority) isAnyAdmin(actor string) bool {
	for _, admins := range a.Admins {
		if admins[actor] {
			return true
		}
	}
	return false
}
