package turn

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nlx-dev/nlx/internal/fault"
	"github.com/nlx-dev/nlx/internal/procid"
	"github.com/nlx-dev/nlx/internal/reason"
	"github.com/nlx-dev/nlx/isolate"
	"github.com/nlx-dev/nlx/provider"
	"github.com/nlx-dev/nlx/schema"
	"github.com/nlx-dev/nlx/state"
)

// A catalog refresh gives the running workers of a workspace their
// changed tools through the connection nlx already holds to each (never a
// new one), without a turn: it never starts a turn, forks or resumes a
// thread, restarts a process, replays a tool call or touches a claim.
// Every attempt is recorded before anything is sent to its worker;
// docs/tools.md tells the steps.

// DefaultRefreshTimeout bounds each request of a refresh: an answer that
// takes longer is lost, and an attempt whose write or reload lost its
// answer is unknown.
const DefaultRefreshTimeout = 15 * time.Second

// listedWithin is how long a provider told its tools changed has to list
// them again before nlx says it does not take a changed catalog.
const listedWithin = 10 * time.Second

// Trigger is what asked for a refresh.
type Trigger struct {
	Kind      state.RefreshTrigger
	RequestID string // nlx refresh's request
	Actor     string
	Serial    int64
}

// Refresh refreshes the catalog of every running worker of workspace and
// returns the attempts, one per worker: a worker running a turn gets an
// attempt that waits (deferred) and runs once its turn ended; the others
// are refreshed now, at once.
func (r *Runner) Refresh(ctx context.Context, workspace string, trig Trigger) []state.RefreshRow {
	if r.Pool == nil {
		return nil
	}
	parked, busy := r.Pool.workersOf(workspace)
	if trig.Kind == state.RefreshOnApply {
		// An apply refreshes only the workers whose grant it changed.
		parked, busy = r.stale(ctx, parked), r.stale(ctx, busy)
	}
	var mu sync.Mutex
	var out []state.RefreshRow
	add := func(row state.RefreshRow) {
		mu.Lock()
		out = append(out, row)
		mu.Unlock()
	}
	var wg sync.WaitGroup
	run := func(w *worker, row *state.RefreshRow) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			add(r.refreshParked(ctx, w, trig, row))
		}()
	}
	for _, w := range busy {
		row, err := r.DB.BeginRefresh(ctx, r.attempt(w, trig, state.RefreshDeferred))
		if err != nil {
			add(row) // blocked by an unknown attempt, recorded failed
			continue
		}
		if r.Pool.deferRefresh(w, &row, r.settleReleased) {
			r.logf("launch %s: refresh %s waits for its turn to end", w.launchID, row.ID)
			add(row)
			continue
		}
		// Its turn ended meanwhile: it is refreshed now.
		run(w, &row)
	}
	for _, w := range parked {
		run(w, nil)
	}
	wg.Wait()
	slices.SortFunc(out, func(a, b state.RefreshRow) int { return strings.Compare(a.LaunchID, b.LaunchID) })
	return out
}

func (r *Runner) logf(format string, args ...any) { r.Pool.logf(format, args...) }

// stale are the workers whose provider was given another grant than the
// workspace's now.
func (r *Runner) stale(ctx context.Context, ws []*worker) []*worker {
	var out []*worker
	for _, w := range ws {
		if w.catalog == nil {
			continue
		}
		if _, grant, err := w.catalog.current(ctx); err != nil || grant != w.given() {
			out = append(out, w)
		}
	}
	return out
}

// attempt is worker w's attempt row for trig, in phase.
func (r *Runner) attempt(w *worker, trig Trigger, phase state.RefreshPhase) state.RefreshRow {
	return state.RefreshRow{ID: "rf-" + newID(), LaunchID: w.launchID, Workspace: w.key.workspace, Conversation: w.key.conversation,
		ProviderKind: string(w.kind), Trigger: trig.Kind, RequestID: trig.RequestID, Actor: trig.Actor, Serial: trig.Serial, Phase: phase}
}

// refreshParked takes parked worker w out of the pool (a turn of its
// conversation waits meanwhile), refreshes it and parks it again. row is
// its attempt when one was recorded already (deferred).
func (r *Runner) refreshParked(ctx context.Context, w *worker, trig Trigger, row *state.RefreshRow) state.RefreshRow {
	idle, ok := r.Pool.holdForRefresh(w)
	if !ok {
		// Released meanwhile (or taken by a turn: then the attempt waits).
		if row == nil {
			attempt := r.attempt(w, trig, state.RefreshReleased)
			attempt.ReasonCode, attempt.Reason = string(reason.WorkerReleased), "the worker went before it could be refreshed"
			out, _ := r.DB.BeginRefresh(ctx, attempt)
			return out
		}
		if r.Pool.deferRefresh(w, row, r.settleReleased) {
			return *row
		}
		return r.settle(ctx, row, state.RefreshReleased, reason.WorkerReleased, "the worker was released before it could be refreshed")
	}
	defer r.Pool.unhold(w, idle)
	return r.refreshWorker(ctx, w, trig, row)
}

// runDeferred runs the attempt that waited for w's turn to end, now that
// w is parked.
func (r *Runner) runDeferred(ctx context.Context, w *worker) {
	row := r.Pool.takeDeferred(w)
	if row == nil {
		return
	}
	trig := Trigger{Kind: row.Trigger, RequestID: row.RequestID, Actor: row.Actor, Serial: row.Serial}
	out := r.refreshParked(ctx, w, trig, row)
	r.logf("launch %s: deferred refresh %s %s", w.launchID, out.ID, out.Ended())
}

// settleReleased is a deferred attempt's end when its worker is released
// before its turn ended.
func (r *Runner) settleReleased(row *state.RefreshRow) {
	r.settle(context.Background(), row, state.RefreshReleased, reason.WorkerReleased,
		"the worker was released before its turn ended: its next launch gets the current tools")
}

// settle moves an attempt still deferred to an end.
func (r *Runner) settle(ctx context.Context, row *state.RefreshRow, to state.RefreshPhase, code reason.Code, why string) state.RefreshRow {
	if _, err := r.DB.MoveRefresh(context.WithoutCancel(ctx), row.ID, state.RefreshDeferred, to, state.RefreshUpdate{Code: code, Reason: why}); err != nil {
		r.logf("refresh %s: %v", row.ID, err)
	}
	out, err := r.DB.Refresh(context.WithoutCancel(ctx), row.ID)
	if err != nil {
		return *row
	}
	return out
}

// refreshWorker refreshes idle worker w, which the caller holds.
func (r *Runner) refreshWorker(ctx context.Context, w *worker, trig Trigger, row *state.RefreshRow) state.RefreshRow {
	bg := context.WithoutCancel(ctx)
	if row == nil {
		// Recorded before anything is sent: nothing is yet.
		begun, err := r.DB.BeginRefresh(bg, r.attempt(w, trig, state.RefreshDeferred))
		if err != nil {
			return begun
		}
		row = &begun
	}
	phase := state.RefreshDeferred
	end := func(to state.RefreshPhase, code reason.Code, u state.RefreshUpdate, format string, args ...any) state.RefreshRow {
		u.Code, u.Reason = code, fmt.Sprintf(format, args...)
		if _, err := r.DB.MoveRefresh(bg, row.ID, phase, to, u); err != nil {
			r.logf("refresh %s: %v", row.ID, err)
		}
		out, err := r.DB.Refresh(bg, row.ID)
		if err != nil {
			return *row
		}
		r.logf("launch %s: refresh %s %s", w.launchID, out.ID, out.Ended())
		return out
	}
	if err := r.prove(bg, w); err != nil {
		return end(state.RefreshFailed, reason.WorkerNotProven, state.RefreshUpdate{}, "%v", err)
	}
	pr, err := w.tools.Projection(bg)
	if err != nil {
		return end(state.RefreshFailed, reason.RefreshFailed, state.RefreshUpdate{}, "the workspace's tools: %v", err)
	}
	_, grant, err := w.catalog.current(bg)
	if err != nil {
		return end(state.RefreshFailed, reason.RefreshFailed, state.RefreshUpdate{}, "the workspace's tools: %v", err)
	}
	tools, _ := json.Marshal(pr.Tools)
	dispatched := state.RefreshUpdate{Catalog: pr.Digest, Tools: string(tools)}
	timeout := r.RefreshTimeout
	if timeout <= 0 {
		timeout = DefaultRefreshTimeout
	}
	step := func() (context.Context, context.CancelFunc) { return context.WithTimeout(bg, timeout) }
	switch cw := w.session.(type) {
	case provider.ConfigWriter:
		sctx, cancel := step()
		v, err := cw.ReadConfig(sctx)
		cancel()
		if err != nil {
			return end(state.RefreshFailed, reason.RefreshFailed, state.RefreshUpdate{}, "reading the worker's configuration (nothing was written): %v", err)
		}
		if want := w.homeConfig; want != "" && v.File != want {
			return end(state.RefreshFailed, reason.RefreshFailed, state.RefreshUpdate{ReadVersion: v.Version},
				"the worker's writable configuration is %s, not its private %s: nothing was written", v.File, want)
		}
		fault.Point("refresh.read")
		dispatched.ReadVersion = v.Version
		if moved, err := r.DB.MoveRefresh(bg, row.ID, phase, state.RefreshDispatched, dispatched); err != nil || !moved {
			return end(state.RefreshFailed, reason.RefreshFailed, state.RefreshUpdate{}, "recording the dispatch (nothing was written): %v", err)
		}
		phase = state.RefreshDispatched
		server := w.server
		server.Env = map[string]string{GrantEnv: grant}
		wctx, cancel := step()
		answer, err := cw.WriteMCPServer(server, v.Version)
		if err != nil {
			cancel()
			return end(state.RefreshFailed, reason.RefreshFailed, state.RefreshUpdate{}, "sending the write: %v", err)
		}
		fault.Point("refresh.written")
		written, err := answer(wctx)
		cancel()
		switch {
		case errors.Is(err, provider.ErrConfigConflict):
			return end(state.RefreshConflict, reason.ConfigVersionConflict, state.RefreshUpdate{},
				"the worker's configuration changed under nlx since it read version %s: nothing was written a second time (%v)", v.Version, err)
		case errors.Is(err, provider.ErrNoAnswer):
			w.give("") // nobody knows what it has: every later apply tries it (and is refused until resolved)
			return end(state.RefreshUnknown, reason.RefreshOutcomeUnknown, state.RefreshUpdate{},
				"the write was sent and its acknowledgment lost (%v): nobody knows whether the worker has it; never retried, resolve it (nlx resolve refresh %s)", err, row.ID)
		case err != nil:
			return end(state.RefreshFailed, reason.CodeOf(err), state.RefreshUpdate{WrittenVersion: written}, "the write: %v", err)
		}
		dispatched.WrittenVersion = written
		rctx, cancel := step()
		answer, err = cw.ReloadMCPServers()
		if err == nil {
			fault.Point("refresh.reload_sent")
			_, err = answer(rctx)
		}
		cancel()
		switch {
		case errors.Is(err, provider.ErrNoAnswer):
			w.give("")
			return end(state.RefreshUnknown, reason.RefreshOutcomeUnknown, state.RefreshUpdate{WrittenVersion: written},
				"the reload was sent and its acknowledgment lost (%v): never retried, resolve it (nlx resolve refresh %s)", err, row.ID)
		case err != nil:
			return end(state.RefreshFailed, reason.RefreshFailed, state.RefreshUpdate{WrittenVersion: written}, "written, but the reload: %v", err)
		}
		lctx, cancel := step()
		listed, err := cw.MCPServerTools(lctx, w.server.Name)
		cancel()
		if err != nil {
			return end(state.RefreshFailed, reason.RefreshUnverified, state.RefreshUpdate{WrittenVersion: written}, "written and reloaded, but the worker's list: %v", err)
		}
		if !slices.Equal(listed, pr.Tools) {
			return end(state.RefreshFailed, reason.RefreshUnverified, state.RefreshUpdate{WrittenVersion: written},
				"written and reloaded, but the worker lists %v, not the projection %v", listed, pr.Tools)
		}
		w.give(grant)
		return end(state.RefreshDone, "", state.RefreshUpdate{WrittenVersion: written, NextTurnTools: state.NextTurnUnverified},
			"the worker lists the current projection (%d tools); what the model is offered at its next turn is not verified", len(listed))
	default:
		if w.kind != provider.KindClaude {
			return end(state.RefreshFailed, reason.RefreshUnsupported, state.RefreshUpdate{}, "nlx has no way to refresh a %s worker", w.kind)
		}
		// Claude Code lists the tools again when the proxy says they
		// changed: its next request offers them.
		if moved, err := r.DB.MoveRefresh(bg, row.ID, phase, state.RefreshDispatched, dispatched); err != nil || !moved {
			return end(state.RefreshFailed, reason.RefreshFailed, state.RefreshUpdate{}, "recording the dispatch (nothing was sent): %v", err)
		}
		phase = state.RefreshDispatched
		listings, stop := w.tools.Watch()
		defer stop()
		if n := w.tools.NotifyChanged(); n == 0 {
			return end(state.RefreshUnsupported, reason.RefreshUnsupported, state.RefreshUpdate{}, "the provider has no session with nlx's tool proxy to tell")
		}
		deadline := time.After(listedWithin)
		for {
			select {
			case l := <-listings:
				if l.Projection.Digest != pr.Digest {
					continue
				}
				w.give(grant)
				return end(state.RefreshDone, "", state.RefreshUpdate{NextTurnTools: state.NextTurnUnverified},
					"the provider listed the current projection (%d tools) when told it changed; what the model is offered at its next turn is not verified", len(pr.Tools))
			case <-deadline:
				return end(state.RefreshUnsupported, reason.RefreshUnsupported, state.RefreshUpdate{},
					"told the tools changed, the provider did not list them again within %s: it keeps its tools until its next launch", listedWithin)
			}
		}
	}
}

// prove re-proves that w is the process and connection nlx launched: its
// process still runs (pid and start time as recorded), its launch is
// recorded running with that identity, and nlx holds its pipes.
func (r *Runner) prove(ctx context.Context, w *worker) error {
	if !w.alive() || w.session == nil {
		return errors.New("its process has exited, or nlx holds no connection to it")
	}
	gone, err := procid.Gone(w.proc.Identity.Identity)
	if err != nil {
		return fmt.Errorf("its process: %w", err)
	}
	if gone {
		return fmt.Errorf("pid %d is no longer the process started at %s", w.proc.Identity.PID, w.proc.Identity.Start)
	}
	row, err := r.DB.Process(ctx, w.launchID)
	if err != nil {
		return err
	}
	var id isolate.Identity
	if err := json.Unmarshal([]byte(row.Identity), &id); err != nil {
		return fmt.Errorf("its recorded identity: %w", err)
	}
	if row.Status != state.ProcessRunning || id.Identity != w.proc.Identity.Identity {
		return fmt.Errorf("the state records launch %s %s as pid %d started %s, not the process nlx holds", w.launchID, row.Status, id.PID, id.Start)
	}
	return nil
}

// Applied tells the runner what an apply changed (by address): a worker
// whose workspace changed only in its tools, or one of whose tools
// changed, is refreshed; the workers of anything else that changed are
// released, as before.
func (r *Runner) Applied(ctx context.Context, serial int64, addresses []string) {
	if r.Pool == nil {
		return
	}
	var release []string
	refresh := map[string]bool{}
	changedTools := map[string]bool{}
	for _, a := range addresses {
		kind, name, _ := strings.Cut(a, ".")
		switch schema.Kind(kind) {
		case schema.KindTool:
			changedTools[name] = true
		case schema.KindWorkspace:
			var ws schema.Workspace
			found, err := decoded(ctx, r.DB, schema.KindWorkspace, name, &ws)
			base := ""
			if err == nil && found {
				base = workspaceBase(ws)
			}
			if r.Pool.sameBase(name, base) {
				refresh[name] = true
			} else {
				release = append(release, a)
			}
		default:
			release = append(release, a)
		}
	}
	r.Pool.Invalidate(release)
	if len(changedTools) > 0 {
		// A tool's spec changed: every workspace granted it (a worker
		// whose grant is unchanged is left alone).
		for _, ws := range r.Pool.workspaces() {
			refresh[ws] = true
		}
	}
	for ws := range refresh {
		go func() {
			rows := r.Refresh(ctx, ws, Trigger{Kind: state.RefreshOnApply, Serial: serial})
			for _, row := range rows {
				r.logf("serial %d: workspace %s: launch %s: refresh %s %s", serial, ws, row.LaunchID, row.ID, row.Ended())
			}
		}()
	}
}
