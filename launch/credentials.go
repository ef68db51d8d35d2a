package launch

import (
	"encoding/json"
	"fmt"
	"path/filepath"

	"github.com/nlx-dev/nlx/host"
	"github.com/nlx-dev/nlx/plan"
	"github.com/nlx-dev/nlx/reconcile"
	"github.com/nlx-dev/nlx/schema"
)

// providerHome is how a provider kind finds its credential home (the
// variable a launch points at the mounted home) and how an operator signs
// it in with that home on the host.
type providerHome struct {
	env    string // the variable naming the home
	signIn string // the program that signs in, run with env set
	then   string // what to do in it, when it is interactive
}

// The provider kinds nlx points at a credential home. Others get none of
// these variables, and doctor knows no sign-in command for them.
var providerHomes = map[string]providerHome{
	"codex-app-server": {env: "CODEX_HOME", signIn: "codex login"},
	"claude-code":      {env: "CLAUDE_CONFIG_DIR", signIn: "claude", then: "type /login, then /exit"},
}

// Home is an applied connection's credential home that needs an operator,
// as nlx doctor lists it.
type Home struct {
	Connection string         `json:"connection"`
	Provider   string         `json:"provider"`
	Kind       string         `json:"provider_kind"`
	Dir        string         `json:"home"`
	State      host.HomeState `json:"state"`
	Detail     string         `json:"detail,omitempty"` // why it is unsafe or unreadable
	// Create makes a missing home as apply would have.
	Create string `json:"create,omitempty"`
	// SignIn is the command that signs the provider in with this home
	// (then the files it writes made the provider user's, when nlx is
	// root); empty for a kind nlx knows no command of.
	SignIn string `json:"sign_in,omitempty"`
	// SignInThen says what to do inside an interactive sign-in.
	SignInThen string `json:"sign_in_then,omitempty"`
}

// Homes lists the credential homes of the applied connections that could
// launch (active, on an applied provider that is enabled and behind no
// feature flag) and are missing, empty (not signed in), unsafe or
// unreadable; a home with files in it is taken as signed in and not
// listed. owner is who the provider runs as, "UID:GID" or a user name,
// when nlx is root ("" otherwise): the commands hand it what they make.
// Only reads.
func Homes(resources []reconcile.Resource, credentialRoot, owner string) []Home {
	providers := map[string]schema.Provider{}
	for _, r := range resources {
		var p schema.Provider
		if r.Kind == schema.KindProvider && r.Status == reconcile.StatusActive && json.Unmarshal(r.Spec, &p) == nil {
			providers[r.Name] = p
		}
	}
	var out []Home
	for _, r := range resources {
		var c schema.Connection
		if r.Kind != schema.KindConnection || r.Status != reconcile.StatusActive || json.Unmarshal(r.Spec, &c) != nil {
			continue
		}
		p, ok := providers[c.Provider]
		if !ok || !p.Enabled() || p.Feature != "" {
			continue // it cannot launch: exec says why
		}
		dir, st, err := host.InspectCredentialHome(credentialRoot, c.CredentialHome)
		if st == host.HomeSignedIn {
			continue
		}
		h := Home{Connection: r.Name, Provider: c.Provider, Kind: p.Kind, Dir: dir, State: st}
		if err != nil {
			h.Detail = err.Error()
		}
		chown := ""
		if owner != "" {
			chown = fmt.Sprintf(" && chown -R %s %s", owner, plan.ShellQuote(dir))
		}
		if st == host.HomeMissing {
			h.Create = fmt.Sprintf("mkdir -p -m 0711 %s && mkdir -m 0700 %s", plan.ShellQuote(filepath.Dir(dir)), plan.ShellQuote(dir))
			if owner != "" {
				h.Create += fmt.Sprintf(" && chown %s %s", owner, plan.ShellQuote(dir))
			}
		}
		if ph, ok := providerHomes[p.Kind]; ok && (st == host.HomeMissing || st == host.HomeEmpty) {
			h.SignIn = fmt.Sprintf("%s=%s %s%s", ph.env, plan.ShellQuote(dir), ph.signIn, chown)
			h.SignInThen = ph.then
		}
		out = append(out, h)
	}
	return out
}
