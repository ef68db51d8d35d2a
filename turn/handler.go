package turn

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/nlx-dev/nlx/internal/reason"
	"github.com/nlx-dev/nlx/provider"
	"github.com/nlx-dev/nlx/schema"
	"github.com/nlx-dev/nlx/state"
)

// handler is a running turn's provider.Handler: it redacts and forwards
// events, records and routes permission requests, and watches the turn
// (idle timeout, revalidation of the binding).
type handler struct {
	r      *Runner
	req    Request
	b      *binding
	turnID string
	emit   func(provider.Event)

	mu       sync.Mutex
	session  string
	stale    []string
	blocked  *provider.Error // set when nlx denied a permission by itself
	last     time.Time       // the last event
	waiting  int             // permission requests waiting for a decision
	interrup context.CancelCauseFunc
	done     chan struct{}
}

var _ provider.Handler = (*handler)(nil)

// event forwards e, redacted, and notes what the turn must keep.
func (h *handler) event(e provider.Event) {
	e = h.b.redact.Event(e)
	h.mu.Lock()
	h.last = time.Now()
	switch e.Type {
	case provider.EventSession:
		h.session = e.Session
	case provider.EventStale:
		h.stale = append(h.stale, e.Text)
	}
	h.mu.Unlock()
	if e.Type == provider.EventSession {
		// Metadata of the turn; saving it is best effort until the end,
		// which saves the conversation.
		_ = h.r.DB.SetTurnSession(context.Background(), h.turnID, e.Session)
	}
	h.emit(e)
}

// Event is the adapter's: see provider.Handler.
func (h *handler) Event(e provider.Event) { h.event(e) }

func (h *handler) sessionID() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.session
}

func (h *handler) staleText() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return strings.Join(h.stale, "\n")
}

func (h *handler) blockedBy() *provider.Error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.blocked
}

// decider is who may decide the turn's permission requests: the actor of
// a personal workspace's turn, an admin of a team workspace.
func (h *handler) decider() string {
	if h.b.launch.WorkspaceSpec.Kind == "personal" {
		return "actor:" + h.req.Actor
	}
	return "admin:" + h.req.Workspace
}

// permissionPoll is how often a waiting request is looked up in the state
// for a decision made by another nlx (nlx permissions allow|deny).
const permissionPoll = 200 * time.Millisecond

// Permission stores the request, then waits for its decision: from the
// person at the terminal (when they may decide), from nlx permissions, or
// nlx's own denial at the timeout. A turn without anyone to ask is denied
// at once and ends blocked. Every path that is not a person's allow is a
// denial.
func (h *handler) Permission(ctx context.Context, p provider.Permission) (provider.Decision, error) {
	h.mu.Lock()
	h.waiting++
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		h.waiting--
		h.last = time.Now()
		h.mu.Unlock()
	}()
	p = h.b.redact.Permission(p)
	p.ID = newID()
	subject := p.Command
	if p.Kind == provider.PermissionFileChange || subject == "" {
		subject = strings.Join(p.Paths, "\n")
	}
	if subject == "" {
		subject = p.Tool
	}
	row := state.PermissionRow{ID: p.ID, TurnID: h.turnID, Kind: string(p.Kind), Tool: p.Tool, Subject: subject,
		Cwd: p.Cwd, Reason: p.Reason, Decider: h.decider()}
	bg := context.WithoutCancel(ctx)
	if err := h.r.DB.AddPermission(bg, row); err != nil {
		// Not stored, not answered but with a denial.
		return provider.Decision{Allow: false, By: "nlx", Code: reason.Failure, Reason: "nlx could not record the request"}, err
	}
	h.emit(provider.Event{Type: provider.EventPermission, Permission: &p})
	d := h.decide(ctx, p)
	p.Decision = &d
	h.emit(provider.Event{Type: provider.EventPermission, Permission: &p})
	if d.Code == reason.PermissionRequired {
		h.mu.Lock()
		if h.blocked == nil {
			h.blocked = &provider.Error{Code: reason.PermissionRequired, Message: d.Reason}
		}
		h.mu.Unlock()
	}
	h.revalidate(bg)
	return d, nil
}

// nlxDecides records nlx's own denial of a pending request; if a person
// decided first, theirs stands and is returned.
func (h *handler) nlxDecides(ctx context.Context, id string, status state.PermissionStatus, code reason.Code, why string) provider.Decision {
	err := h.r.DB.DecidePermission(ctx, id, status, "nlx", string(code), why)
	if reason.Is(err, reason.PermissionDecided) {
		if row, rerr := h.r.DB.Permission(ctx, id); rerr == nil {
			return decisionOf(row)
		}
	}
	return provider.Decision{Allow: false, By: "nlx", Code: code, Reason: why}
}

func decisionOf(row *state.PermissionRow) provider.Decision {
	return provider.Decision{Allow: row.Status == state.PermissionAllowed, By: row.DecidedBy,
		Code: reason.Code(row.DecisionCode), Reason: row.DecisionNote}
}

func (h *handler) decide(ctx context.Context, p provider.Permission) provider.Decision {
	bg := context.WithoutCancel(ctx)
	if h.req.PermissionWait <= 0 {
		return h.nlxDecides(bg, p.ID, state.PermissionDenied, reason.PermissionRequired,
			"a non-interactive turn never widens: nobody was asked (run it on a terminal, or with --permission-wait, and nlx permissions allow "+p.ID+")")
	}
	wait, cancel := context.WithTimeout(ctx, h.req.PermissionWait)
	defer cancel()
	answered := make(chan provider.Decision, 1)
	if h.req.Ask != nil {
		go func() {
			allow, ok := h.req.Ask(wait, p)
			if !ok {
				return
			}
			err := Decide(bg, h.r.DB, p.ID, h.req.Actor, allow, "at the terminal")
			if err == nil {
				answered <- provider.Decision{Allow: allow, By: h.req.Actor, Reason: "at the terminal"}
			} else {
				h.emit(provider.Event{Type: provider.EventNote, Text: reason.Of(err).Error()})
			}
		}()
	}
	tick := time.NewTicker(permissionPoll)
	defer tick.Stop()
	for {
		select {
		case d := <-answered:
			return d
		case <-tick.C:
			if row, err := h.r.DB.Permission(bg, p.ID); err == nil && row.Status != state.PermissionPending {
				return decisionOf(row)
			}
		case <-wait.Done():
			if ctx.Err() != nil {
				return h.nlxDecides(bg, p.ID, state.PermissionCancelled, reason.CodeOf(context.Cause(ctx)), "the turn ended before anyone decided")
			}
			return h.nlxDecides(bg, p.ID, state.PermissionTimedOut, reason.PermissionRequired,
				"nobody decided within "+h.req.PermissionWait.String())
		}
	}
}

// start begins watching a launch of the turn: the idle timeout and the
// periodic revalidation, either of which interrupts it through cancel.
func (h *handler) start(cancel context.CancelCauseFunc) {
	h.mu.Lock()
	h.interrup, h.done, h.last = cancel, make(chan struct{}), time.Now()
	done := h.done
	h.mu.Unlock()
	every := h.req.Revalidate
	if every <= 0 {
		every = DefaultRevalidate
	}
	go func() {
		tick := time.NewTicker(min(every, time.Second))
		defer tick.Stop()
		nextCheck := time.Now().Add(every)
		for {
			select {
			case <-done:
				return
			case now := <-tick.C:
				if !now.Before(nextCheck) {
					h.revalidate(context.Background())
					nextCheck = now.Add(every)
				}
				h.mu.Lock()
				idle := h.req.IdleTimeout > 0 && h.waiting == 0 && now.Sub(h.last) > h.req.IdleTimeout
				h.mu.Unlock()
				if idle {
					cancel(reason.New(reason.TurnTimeout, "the provider sent nothing for %s", h.req.IdleTimeout))
				}
			}
		}
	}()
}

func (h *handler) stop() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.done != nil {
		close(h.done)
		h.done, h.interrup = nil, nil
	}
}

// revalidate checks the binding against the applied state now, and
// interrupts the turn when it no longer holds: the actor still a member,
// the connection's generation unchanged, the provider still enabled.
func (h *handler) revalidate(ctx context.Context) {
	err := h.check(ctx)
	if err == nil {
		return
	}
	h.mu.Lock()
	cancel := h.interrup
	h.mu.Unlock()
	if cancel != nil {
		cancel(err)
	}
}

func (h *handler) check(ctx context.Context) error {
	var w schema.Workspace
	found, err := decoded(ctx, h.r.DB, schema.KindWorkspace, h.req.Workspace, &w)
	if err != nil {
		return nil // a state that cannot be read now is read again at the next check
	}
	if _, member := w.Members[h.req.Actor]; !found || !member {
		return reason.New(reason.MembershipRevoked, "actor %s is no longer a member of workspace %s", h.req.Actor, h.req.Workspace)
	}
	var c schema.Connection
	found, err = decoded(ctx, h.r.DB, schema.KindConnection, h.b.connection, &c)
	if err != nil {
		return nil
	}
	want := h.b.launch.ConnectionSpec
	if !found || c.Generation != want.Generation || c.Provider != want.Provider || c.CredentialHome != want.CredentialHome {
		return reason.New(reason.CredentialGenerationChanged, "connection %s changed (generation %d was bound) or was removed", h.b.connection, want.Generation)
	}
	var p schema.Provider
	found, err = decoded(ctx, h.r.DB, schema.KindProvider, c.Provider, &p)
	if err != nil {
		return nil
	}
	if !found || !p.Enabled() {
		return reason.New(reason.ProviderRevoked, "provider %s was disabled or removed", c.Provider)
	}
	return nil
}

// Decide records actor's decision on a pending permission request, if the
// applied state lets actor decide it now: the turn's actor in a personal
// workspace, an admin in a team workspace.
func Decide(ctx context.Context, db *state.DB, id, actor string, allow bool, note string) error {
	p, err := db.Permission(ctx, id)
	if err != nil {
		return err
	}
	if p.Status != state.PermissionPending {
		return reason.New(reason.PermissionDecided, "permission request %s is already %s", id, p.Status)
	}
	t, err := db.Turn(ctx, p.TurnID)
	if err != nil {
		return err
	}
	var w schema.Workspace
	found, err := decoded(ctx, db, schema.KindWorkspace, t.Workspace, &w)
	if err != nil {
		return err
	}
	role := w.Members[actor]
	switch {
	case !found:
		return reason.New(reason.NotADecider, "workspace %s is not in the applied state: nobody may decide %s", t.Workspace, id)
	case w.Kind == "personal" && actor != t.Actor:
		return reason.New(reason.NotADecider, "%s is a request of %s's turn in personal workspace %s: only %s decides it", id, t.Actor, t.Workspace, t.Actor)
	case w.Kind == "personal" && role == "":
		return reason.New(reason.NotADecider, "%s is no longer a member of workspace %s", actor, t.Workspace)
	case w.Kind != "personal" && role != "admin":
		return reason.New(reason.NotADecider, "only an admin of team workspace %s decides %s; %s is %s", t.Workspace, id, actor, orNone(role))
	}
	status := state.PermissionDenied
	if allow {
		status = state.PermissionAllowed
	}
	return db.DecidePermission(ctx, id, status, actor, "", note)
}

func orNone(role string) string {
	if role == "" {
		return "no member"
	}
	return "a " + role
}
