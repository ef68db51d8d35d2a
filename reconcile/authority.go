package reconcile

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/nlx-dev/nlx/internal/reason"
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
	// Identities are how each actor proves who they are (host.actors).
	Identities map[string]schema.Identity
	// keys maps each identity key's fingerprint to its actor.
	keys map[string]string
}

// NewAuthority reads the authority out of applied specs: host.config and
// the workspaces; other resources are ignored.
func NewAuthority(resources []Resource) (*Authority, error) {
	a := &Authority{Operators: map[string]bool{}, Admins: map[string]map[string]bool{}, Identities: map[string]schema.Identity{}, keys: map[string]string{}}
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
			for actor, id := range h.Actors {
				a.Identities[actor] = id
				for _, line := range id.Keys {
					if fp, err := schema.KeyFingerprint(line); err == nil {
						a.keys[fp] = actor
					}
				}
			}
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

// Caller is what a command knows of who runs it: its OS user, read from
// the process's credentials (never from the environment), and the key it
// proved to hold by signing with it, if any.
type Caller struct {
	UID  int
	User string // the uid's name; "" when it has none
	Key  string // SHA256 fingerprint of a key the caller holds, or ""
}

func (c Caller) String() string {
	s := fmt.Sprintf("OS user %s (uid %d)", c.User, c.UID)
	if c.User == "" {
		s = fmt.Sprintf("uid %d, which has no name", c.UID)
	}
	if c.Key != "" {
		s += " holding key " + c.Key
	}
	return s
}

// KeyActor returns the actor whose identity has the key of that
// fingerprint, or "".
func (a *Authority) KeyActor(fingerprint string) string {
	if a == nil || fingerprint == "" {
		return ""
	}
	return a.keys[fingerprint]
}

// UnixActor returns the actor the OS user proves, or "".
func (a *Authority) UnixActor(user string) string {
	if a == nil || user == "" {
		return ""
	}
	for actor, id := range a.Identities {
		if id.Unix == user {
			return actor
		}
	}
	return ""
}

// Prove checks that the caller is actor: its OS user is the actor's unix
// user, or it holds one of the actor's keys. It returns how ("unix:USER"
// or "key:FINGERPRINT"), or an actor_unproven refusal saying what the
// actor is proven by and what the caller showed. Root is no one in
// particular: it proves only the actor whose unix user is root.
func (a *Authority) Prove(actor string, c Caller) (string, error) {
	id, ok := a.Identities[actor]
	if c.Key != "" && a.keys[c.Key] == actor {
		return "key:" + c.Key, nil
	}
	if ok && id.Unix != "" && id.Unix == c.User {
		return "unix:" + c.User, nil
	}
	switch {
	case len(a.Identities) == 0:
		return "", reason.New(reason.ActorUnproven, "%s cannot be proven: the applied state names no identities (host.actors); the first ones are applied without an approval", actor)
	case !ok:
		return "", reason.New(reason.ActorUnproven, "%s has no identity in the applied state (host.actors), and this is %s", actor, c)
	}
	var by []string
	if id.Unix != "" {
		by = append(by, "OS user "+id.Unix)
	}
	if len(id.Keys) > 0 {
		by = append(by, fmt.Sprintf("a signature by one of %d key(s) (--key)", len(id.Keys)))
	}
	if len(by) == 0 {
		by = append(by, "nothing")
	}
	other := ""
	if c.Key != "" && a.keys[c.Key] != "" {
		other = fmt.Sprintf("; the key is %s's", a.keys[c.Key])
	}
	return "", reason.New(reason.ActorUnproven, "%s is proven by %s in the applied state, and this is %s%s", actor, strings.Join(by, " or "), c, other)
}
