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

// Assess puts on every change the risks that gate it and the refusals that
// stop it, from the desired config, the applied resources and the unknown
// outcomes. It is pure.
func Assess(changes []plan.Change, desired *schema.Config, snap *Snapshot) error {
	status := make(map[string]ResourceStatus, len(snap.Resources))
	for _, r := range snap.Resources {
		if r.Status != StatusActive {
			status[r.Address()] = r.Status
		}
	}
	unknown := map[string]plan.Unknown{}
	for _, u := range snap.Unknowns {
		unknown[u.Address] = u
	}
	for i := range changes {
		c := &changes[i]
		a := assessor{c: c, desired: desired}
		if err := a.assess(); err != nil {
			return fmt.Errorf("assess %s: %w", c.Address, err)
		}
		if status[c.Address] == StatusHeld && (c.Action == plan.Update || c.Action == plan.Replace) {
			a.risk(plan.RiskHeldImport, "releases the imported %s from review hold into service", c.Address)
			a.release(changes, snap.Held[c.Address])
		}
		if u, ok := unknown[c.Address]; ok {
			a.risk(plan.RiskUnknownClaim, "apply %d dispatched %s of %s and nobody knows how it ended; resolve it first", u.ApplyID, u.Action, c.Address)
		}
		for _, u := range snap.UnknownClaims {
			if touches(c, u) {
				a.risk(plan.RiskUnknownClaim, "claim %s of job.%s (due %s) was dispatched and nobody knows how it ended; resolve it first (nlx resolve claim %s)",
					u.ID, u.Job, u.ScheduledAt, u.ID)
			}
		}
		c.Risks = list(&a.risks, func(c plan.RiskCode, why string) plan.Risk { return plan.Risk{Code: c, Reason: why} })
		c.Refused = list(&a.refused, func(c reason.Code, why string) plan.Refusal { return plan.Refusal{Code: c, Reason: why} })
	}
	return nil
}

// touches reports whether change c is to the job of an unknown claim, its
// workspace or its connection.
func touches(c *plan.Change, u plan.UnknownClaim) bool {
	switch c.Kind {
	case schema.KindJob:
		return c.Name == u.Job
	case schema.KindWorkspace:
		return c.Name == u.Workspace
	case schema.KindConnection:
		return c.Name == u.Connection
	}
	return false
}

// reasons gathers the reasons for each code, in the order codes arise.
type reasons[C ~string] struct {
	order []C
	why   map[C][]string
}

func (r *reasons[C]) add(code C, reason string) {
	if r.why == nil {
		r.why = map[C][]string{}
	}
	if _, ok := r.why[code]; !ok {
		r.order = append(r.order, code)
	}
	r.why[code] = append(r.why[code], reason)
}

// list returns one T per code, its reasons joined; never nil.
func list[T any, C ~string](r *reasons[C], mk func(C, string) T) []T {
	out := []T{}
	for _, code := range r.order {
		out = append(out, mk(code, strings.Join(r.why[code], "; ")))
	}
	return out
}

type assessor struct {
	c       *plan.Change
	desired *schema.Config
	risks   reasons[plan.RiskCode]
	refused reasons[reason.Code]
}

func (a *assessor) risk(code plan.RiskCode, format string, args ...any) {
	a.risks.add(code, fmt.Sprintf(format, args...))
}

func (a *assessor) refuse(code reason.Code, format string, args ...any) {
	a.refused.add(code, fmt.Sprintf(format, args...))
}

// specs returns the change's before spec (decoded, only when there is an
// after to compare it with) and its after spec, the desired resource itself.
// A side that does not exist is nil.
func specs[T any](c *plan.Change, desired map[string]*T) (before, after *T, err error) {
	after = desired[c.Name]
	if c.Action == plan.Delete {
		after = nil
	}
	if after == nil || len(c.Before) == 0 || string(c.Before) == "null" {
		return nil, after, nil
	}
	before = new(T)
	if err := json.Unmarshal(c.Before, before); err != nil {
		return nil, nil, err
	}
	return before, after, nil
}

// identitiesWiden lists how after lets someone prove they are an actor who
// could not before: a new actor's identity, an OS user set or changed, a
// key added. Removing an identity narrows and is not listed. While the
// applied state names no identities at all nobody can prove anything, so
// the first ones are applied like the first host.config: no approval could
// be given for them.
func identitiesWiden(before, after map[string]schema.Identity) []string {
	if len(before) == 0 {
		return nil
	}
	var out []string
	for _, actor := range slices.Sorted(maps.Keys(after)) {
		b, had := before[actor]
		af := after[actor]
		if !had {
			out = append(out, fmt.Sprintf("actor %s gets an identity", actor))
			continue
		}
		if af.Unix != "" && af.Unix != b.Unix {
			out = append(out, fmt.Sprintf("actor %s is proven by OS user %s", actor, af.Unix))
		}
		if added := missing(af.Keys, b.Keys); len(added) > 0 {
			out = append(out, fmt.Sprintf("actor %s gets %d key(s)", actor, len(added)))
		}
	}
	return out
}

func (a *assessor) assess() error {
	c := a.c
	destroys := func(what string) {
		switch c.Action {
		case plan.Delete:
			a.risk(plan.RiskDestructive, "deletes %s %s", what, c.Name)
		case plan.Replace:
			a.risk(plan.RiskDestructive, "replaces %s %s: it is deleted and created again (%s)", what, c.Name, strings.Join(forcing(c), ", "))
		}
	}
	switch c.Kind {
	case schema.KindHost:
		before, after, err := specs(c, map[string]*schema.Host{schema.HostName: a.host()})
		if err != nil || before == nil || after == nil {
			return err
		}
		if added := missing(after.Operators, before.Operators); len(added) > 0 {
			a.risk(plan.RiskPermissionWidening, "operators grow: %s", strings.Join(added, ", "))
		}
		if before.TwoPersonRule && !after.TwoPersonRule {
			a.risk(plan.RiskPermissionWidening, "the two-person rule is switched off")
		}
		for _, w := range identitiesWiden(before.Actors, after.Actors) {
			a.risk(plan.RiskPermissionWidening, "%s", w)
		}
	case schema.KindWorkspace:
		destroys("workspace")
		before, after, err := specs(c, a.desired.Workspaces)
		if err != nil || before == nil || after == nil {
			return err
		}
		a.workspace(before, after)
	case schema.KindConnection:
		destroys("connection")
		before, after, err := specs(c, a.desired.Connections)
		if err != nil || before == nil || after == nil {
			return err
		}
		a.connection(before, after)
	case schema.KindSkill:
		destroys("skill")
	case schema.KindTool:
		// A tool holds nothing: deleting or replacing one destroys
		// nothing, and no workspace may still be granted it.
		before, after, err := specs(c, a.desired.Tools)
		if err != nil || before == nil || after == nil {
			return err
		}
		a.tool(before, after)
	case schema.KindJob:
		destroys("job")
		before, after, err := specs(c, a.desired.Jobs)
		if err != nil {
			return err
		}
		if after != nil {
			a.jobProvider(c.Name, after)
		}
		if before != nil && after != nil {
			a.job(before, after)
		}
	case schema.KindProvider:
		before, after, err := specs(c, a.desired.Providers)
		if err != nil || before == nil || after == nil {
			return err
		}
		if added := newEntries(before.Inference, after.Inference); len(added) > 0 {
			a.risk(plan.RiskPermissionWidening, "inference endpoints added: %s", strings.Join(added, ", "))
		}
		if before.Enabled() && !after.Enabled() {
			if stranded := a.strandedJobs(c.Name); len(stranded) > 0 {
				a.refuse(reason.DisabledProvider, "disabling provider %s leaves job(s) %s on it without an enabled fallbackConnection",
					c.Name, strings.Join(stranded, ", "))
			}
		}
	case schema.KindPreservation:
		before, after, err := specs(c, a.desired.Preservations)
		if err != nil || after == nil {
			return err
		}
		// Per workspace: a reset decided for one never covers another.
		for _, w := range slices.Sorted(maps.Keys(after.ChatReset)) {
			if after.ChatReset[w] == "reset" && (before == nil || before.ChatReset[w] != "reset") {
				a.risk(plan.RiskDestructive, "chat reset for workspace %s: importing %s leaves its conversations there behind (they stay in the export only)", w, c.Name)
			}
		}
	}
	return nil
}

// host is the desired host.config, as Desired makes it.
func (a *assessor) host() *schema.Host {
	if a.desired.Host != nil {
		return a.desired.Host
	}
	return &schema.Host{Operators: []string{}}
}

func (a *assessor) workspace(before, after *schema.Workspace) {
	if schema.PolicyWider(after.Policy, before.Policy) {
		a.risk(plan.RiskPermissionWidening, "policy grows from %s to %s", before.Policy, after.Policy)
	}
	if schema.EgressWider(after.Network.Egress, before.Network.Egress) {
		a.risk(plan.RiskPermissionWidening, "network egress grows from %s to %s", before.Network.Egress, after.Network.Egress)
	}
	if granted := newEntries(before.Tools, after.Tools); len(granted) > 0 {
		a.risk(plan.RiskPermissionWidening, "tools granted: %s", strings.Join(granted, ", "))
	}
	for _, m := range slices.Sorted(maps.Keys(after.Members)) {
		switch old, ok := before.Members[m]; {
		case !ok:
			a.risk(plan.RiskPermissionWidening, "%s joins as %s", m, after.Members[m])
		case old == "member" && after.Members[m] == "admin":
			a.risk(plan.RiskPermissionWidening, "%s becomes admin", m)
		}
	}
	switch {
	case before.Image != after.Image:
		a.risk(plan.RiskImageMigration, "image %s %s -> %s %s", orNone(before.Image), short(before.ImageDigest), orNone(after.Image), short(after.ImageDigest))
	case before.ImageDigest != after.ImageDigest:
		a.risk(plan.RiskImageMigration, "image %s %s -> %s", after.Image, orNone(before.ImageDigest), orNone(after.ImageDigest))
	}
	if after.ChatReset == "per_run" && before.ChatReset != "per_run" {
		a.risk(plan.RiskDestructive, "chat reset: conversations are discarded after every run (was %s)", before.ChatReset)
	}
}

// tool makes a change of what a tool runs (its command, its env and
// secrets) or of where it connects (its url and endpoint) permission
// widening: every workspace granted the tool gets what it now does. So is
// its command's egress growing.
func (a *assessor) tool(before, after *schema.Tool) {
	var runs, connects []string
	if !slices.Equal(before.Command, after.Command) {
		runs = append(runs, "command")
	}
	if !maps.Equal(before.Env, after.Env) {
		runs = append(runs, "env")
	}
	if !maps.Equal(before.Secrets, after.Secrets) {
		runs = append(runs, "secrets")
	}
	if before.URL != after.URL {
		connects = append(connects, "url")
	}
	if before.Endpoint != after.Endpoint {
		connects = append(connects, "endpoint")
	}
	if len(runs) > 0 {
		a.risk(plan.RiskPermissionWidening, "tool %s changes what it runs: %s", a.c.Name, strings.Join(runs, ", "))
	}
	if len(connects) > 0 {
		a.risk(plan.RiskPermissionWidening, "tool %s changes where it connects: %s", a.c.Name, strings.Join(connects, ", "))
	}
	if schema.EgressWider(after.Egress, before.Egress) {
		a.risk(plan.RiskPermissionWidening, "tool %s's egress grows from %s to %s", a.c.Name, before.Egress, after.Egress)
	}
}

func (a *assessor) connection(before, after *schema.Connection) {
	var rebound []string
	field := func(name, b, af string) {
		if b != af {
			rebound = append(rebound, fmt.Sprintf("%s %s -> %s", name, b, af))
		}
	}
	field("owner", before.Owner, after.Owner)
	field("provider", before.Provider, after.Provider)
	field("billing", before.Billing, after.Billing)
	field("credentialHome", before.CredentialHome, after.CredentialHome)
	if len(rebound) > 0 {
		a.risk(plan.RiskCredentialRebind, "%s", strings.Join(rebound, "; "))
	}
	if before.Provider == after.Provider && before.Billing == after.Billing {
		return
	}
	// Every job on this connection would now run elsewhere or bill
	// differently; only the job's own config may say so.
	for _, name := range slices.Sorted(maps.Keys(a.desired.Jobs)) {
		j := a.desired.Jobs[name]
		if j.Connection != a.c.Name {
			continue
		}
		if (before.Provider != after.Provider && j.Provider != after.Provider) || (before.Billing != after.Billing && j.Billing != after.Billing) {
			a.refuse(reason.ImplicitSubstitution,
				"job %s would move from %s/%s to %s/%s without its config saying so (set its provider and billing)",
				name, before.Provider, before.Billing, after.Provider, after.Billing)
		}
	}
}

func (a *assessor) job(before, after *schema.Job) {
	if before.Connection != after.Connection {
		a.risk(plan.RiskCredentialRebind, "connection %s -> %s", before.Connection, after.Connection)
	}
	if before.Conversation != after.Conversation {
		a.risk(plan.RiskDestructive, "chat reset: conversation %s -> %s starts a new conversation", orNone(before.Conversation), orNone(after.Conversation))
	}
	if !before.BackgroundAuthority && after.BackgroundAuthority {
		a.risk(plan.RiskPermissionWidening, "background authority granted")
	}
	// An unset job policy is its workspace's; compare what the job runs with.
	effective := func(j *schema.Job) string {
		if j.Policy != "" {
			return j.Policy
		}
		if w := a.desired.Workspaces[j.Workspace]; w != nil {
			return w.Policy
		}
		return ""
	}
	if b, af := effective(before), effective(after); schema.PolicyWider(af, b) {
		a.risk(plan.RiskPermissionWidening, "policy grows from %s to %s", b, af)
	}
}

// jobProvider refuses a job whose provider is disabled unless it names an
// enabled fallback connection.
func (a *assessor) jobProvider(name string, j *schema.Job) {
	conn := a.desired.Connections[j.Connection]
	if conn == nil {
		return
	}
	if p := a.desired.Providers[conn.Provider]; p != nil && !p.Enabled() && !a.hasFallback(j) {
		a.refuse(reason.DisabledProvider, "provider %s of connection %s is disabled and job %s names no enabled fallbackConnection",
			conn.Provider, j.Connection, name)
	}
}

func (a *assessor) hasFallback(j *schema.Job) bool {
	if j.FallbackConnection == "" {
		return false
	}
	fc := a.desired.Connections[j.FallbackConnection]
	if fc == nil {
		return false
	}
	p := a.desired.Providers[fc.Provider]
	return p != nil && p.Enabled()
}

// strandedJobs lists the desired jobs on the provider without a fallback.
func (a *assessor) strandedJobs(provider string) []string {
	var out []string
	for _, name := range slices.Sorted(maps.Keys(a.desired.Jobs)) {
		j := a.desired.Jobs[name]
		if c := a.desired.Connections[j.Connection]; c != nil && c.Provider == provider && !a.hasFallback(j) {
			out = append(out, name)
		}
	}
	return out
}

// forcing lists the fields of a replace that forced it.
func forcing(c *plan.Change) []string {
	var out []string
	for _, d := range c.Diff {
		if d.ForcesReplace {
			out = append(out, d.Path)
		}
	}
	return out
}

// missing lists the elements of a that b lacks.
func missing(a, b []string) []string {
	have := map[string]bool{}
	for _, x := range b {
		have[x] = true
	}
	var out []string
	for _, x := range a {
		if !have[x] {
			out = append(out, x)
		}
	}
	return out
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// short abbreviates a digest for a reason line.
func short(d string) string {
	if len(d) > 19 {
		return d[:19]
	}
	return d
}

// newEntries lists the entries of after that before lacks, in order.
func newEntries(before, after []string) []string {
	var out []string
	for _, e := range after {
		if !slices.Contains(before, e) {
			out = append(out, e)
		}
	}
	return out
}

// release refuses taking a held import into service when nlx cannot do
// what it is (unsupported policies stay held), when the job would run on
// one person's credentials unattended without background authority, and
// when the same plan changes its connection's credential generation (the
// reviewer approves a release against the credential they see).
func (a *assessor) release(changes []plan.Change, held HeldImport) {
	if len(held.Unsupported) > 0 {
		a.refuse(reason.ImportUnsupported, "imported by preservation %s with what nlx cannot do: %s; it stays held (define a new job instead)",
			held.Preservation, strings.Join(held.Unsupported, "; "))
	}
	if a.c.Kind != schema.KindJob {
		return
	}
	j := a.desired.Jobs[a.c.Name]
	if j == nil {
		return
	}
	if conn := a.desired.Connections[j.Connection]; conn != nil && conn.Scope == "personal" && !j.BackgroundAuthority {
		a.refuse(reason.BackgroundAuthorityRequired, "the released job runs on %s's personal connection %s with nobody present: it needs backgroundAuthority: true", conn.Owner, j.Connection)
	}
	for i := range changes {
		o := &changes[i]
		if o.Kind != schema.KindConnection || o.Name != j.Connection || o.Action != plan.Update {
			continue
		}
		for _, d := range o.Diff {
			if d.Path == "generation" {
				a.refuse(reason.ReleaseGenerationChanged, "this plan also changes connection %s's credential generation (%s -> %s): release in a plan of its own, reviewed against the credential it will use",
					j.Connection, d.Before, d.After)
			}
		}
	}
}
