package turn

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nlx-dev/nlx/isolate"
	"github.com/nlx-dev/nlx/launch"
	"github.com/nlx-dev/nlx/provider"
	"github.com/nlx-dev/nlx/schema"
	"github.com/nlx-dev/nlx/state"
	"github.com/nlx-dev/nlx/toolproxy"
)

// warmKey is the conversation a warm worker serves.
type warmKey struct{ workspace, connection, conversation string }

// worker is one launched provider process: for one turn, or kept warm
// between the turns of its conversation.
type worker struct {
	key         warmKey
	provider    string // the effective provider
	fingerprint string
	launchID    string
	thread      string // the native session it continues
	proc        *isolate.Process
	px          *launch.Egress
	inW, outR   *os.File
	stderr      *tailBuffer
	exited      chan struct{}
	session     provider.Session // nil: the adapter drives one turn per process
	rec         launch.Recorder
	idle        *time.Timer
	watched     bool // a goroutine releases it when its process exits while parked

	// The worker's tool proxy, its catalog, and the grant digest its
	// provider's configuration was last given (at launch or at its last
	// refresh); flushCalls waits until the proxy's calls are recorded.
	tools      *toolproxy.Proxy
	catalog    *catalog
	grant      atomic.Pointer[string]
	flushCalls func()
	server     provider.MCPServer // nlx's MCP server as the provider was given it
	homeConfig string             // its private configuration file, as its program names it ("" without one)
	idleFor    time.Duration      // its idleRelease
	toolSeq    atomic.Int64
	kind       provider.Kind
	// wsBase is a digest of the workspace's applied spec but its tools:
	// an apply that changed only the tools refreshes the worker, anything
	// else releases it.
	wsBase string
	// deferred is the refresh attempt waiting for the worker's turn to
	// end; onRelease settles it if the worker goes first.
	deferred  *state.RefreshRow
	onRelease func(w *worker)
}

// alive reports whether the worker's process still runs.
func (w *worker) alive() bool {
	select {
	case <-w.exited:
		return false
	default:
		return true
	}
}

// fingerprint is everything a launch is made from: the sandbox request
// (mounts, environment with the secret, limits, egress), the program and
// its version, and the applied workspace, connection and provider. A warm
// worker is reused only for a turn whose fingerprint is the same: any
// apply that changes one of them, or a changed secret, launches anew.
func fingerprint(b *binding) (string, error) {
	// The workspace's tools are not in it: a change of them alone
	// refreshes a running worker's catalog (Runner.Refresh).
	ws := b.launch.WorkspaceSpec
	ws.Tools = nil
	data, err := json.Marshal(struct {
		Request   isolate.Request
		Command   []string
		Program   string
		Identity  string
		Version   string
		Workspace any
		Conn      any
		Provider  any
	}{b.launch.Request, b.launch.ProviderCmd, b.program.Path, b.program.Identity, b.version,
		ws, b.launch.ConnectionSpec, b.launch.ProviderSpec})
	if err != nil {
		return "", fmt.Errorf("turn: fingerprint the launch: %w", err)
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:]), nil
}

// give notes the grant digest w's provider was given ("": unknown).
func (w *worker) give(grant string) { w.grant.Store(&grant) }

// given is the grant digest w's provider was last given.
func (w *worker) given() string {
	if g := w.grant.Load(); g != nil {
		return *g
	}
	return ""
}

// hasDeferred reports whether a refresh waits for w's turn to end.
func (p *Pool) hasDeferred(w *worker) bool {
	if p == nil {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return w.deferred != nil
}

// workspaceBase is a digest of workspace w's spec but its tools.
func workspaceBase(w schema.Workspace) string {
	w.Tools = nil
	data, _ := json.Marshal(w)
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// releaseAttempts bounds how often a release whose tree is not yet proven
// gone is tried again (1s, 2s, 4s, ... apart); after that the launch is
// left recorded running, for nlx stop or the next serve's start.
const releaseAttempts = 6

// Pool keeps provider processes warm between the turns of their
// conversation, each for its workspace's idleRelease after its last turn,
// then stops it with a receipt; the conversation keeps its native session
// handle and the next turn resumes it in a new launch. A nil *Pool keeps
// nothing: every release happens when the turn ends.
type Pool struct {
	// Log receives a line per worker kept, reused and released.
	Log func(format string, args ...any)

	mu        sync.Mutex
	workers   map[warmKey]*worker
	closed    bool
	releasing sync.WaitGroup // releases of parked workers in flight
	// busy are the workers running a turn; refreshing are the
	// conversations whose parked worker is being refreshed (a turn
	// waits for it).
	busy       map[*worker]bool
	refreshing map[warmKey]chan struct{}
}

func (p *Pool) logf(format string, args ...any) {
	if p != nil && p.Log != nil {
		p.Log(format, args...)
	}
}

// take returns the conversation's warm worker when it was launched with
// exactly fingerprint and continues session; a worker of the conversation
// that does not fit is released.
func (p *Pool) take(ctx context.Context, k warmKey, fingerprint, session string) *worker {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	for p.refreshing[k] != nil {
		// The worker's catalog is being refreshed: the turn takes it
		// once that is over.
		ch := p.refreshing[k]
		p.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil
		}
		p.mu.Lock()
	}
	w := p.workers[k]
	if w != nil {
		delete(p.workers, k)
		w.idle.Stop()
	}
	p.mu.Unlock()
	switch {
	case w == nil:
		return nil
	case w.fingerprint != fingerprint:
		p.release(w, "its launch's binding changed (an apply, or a changed secret)")
		return nil
	case session == "" || w.thread != session:
		p.release(w, "the conversation starts a new session")
		return nil
	case !w.alive():
		p.release(w, "its process had exited")
		return nil
	}
	p.logf("launch %s: warm, continues conversation %s", w.launchID, k.conversation)
	return w
}

// park keeps w warm for idle, then releases it; a process that exits
// meanwhile is released at once.
func (p *Pool) park(w *worker, idle time.Duration) {
	p.mu.Lock()
	delete(p.busy, w)
	if p.closed || idle <= 0 {
		p.mu.Unlock()
		p.release(w, "its turn ended")
		return
	}
	if p.workers == nil {
		p.workers = map[warmKey]*worker{}
	}
	old := p.workers[w.key]
	p.workers[w.key] = w
	w.idleFor = idle
	w.idle = time.AfterFunc(idle, func() { p.expire(w, fmt.Sprintf("no turn for its idleRelease of %s", idle)) })
	watch := !w.watched
	w.watched = true
	p.mu.Unlock()
	if old != nil {
		old.idle.Stop()
		p.release(old, "a newer worker serves its conversation")
	}
	if watch {
		go func() {
			<-w.exited
			p.expire(w, "its process exited")
		}()
	}
}

// expire releases w if it is still parked.
func (p *Pool) expire(w *worker, why string) {
	p.mu.Lock()
	parked := p.workers[w.key] == w
	if parked {
		delete(p.workers, w.key)
		w.idle.Stop()
		p.releasing.Add(1)
	}
	p.mu.Unlock()
	if parked {
		defer p.releasing.Done()
		p.release(w, why)
	}
}

// release stops w's process tree and writes its receipt (the identity is
// released only once the tree is proven gone, tried again a bounded
// number of times), then its proxy.
func (p *Pool) release(w *worker, why string) {
	if p != nil {
		p.mu.Lock()
		delete(p.busy, w)
		p.mu.Unlock()
	}
	if w.session != nil {
		w.session.Close()
	}
	w.inW.Close()
	select {
	case <-w.exited:
	case <-time.After(provider.Grace):
	}
	bg := context.Background()
	var err error
	for attempt := range releaseAttempts {
		if _, err = isolate.Stop(bg, w.proc.Identity, 2*time.Second, w.rec); err == nil || attempt == releaseAttempts-1 {
			break
		}
		time.Sleep(time.Duration(1<<attempt) * time.Second)
	}
	if err != nil {
		p.logf("launch %s: not proven gone after %d attempts (%v): left recorded running; nlx stop %s ends it", w.launchID, releaseAttempts, err, w.launchID)
	} else if p != nil && w.session != nil {
		p.logf("launch %s released: %s; its receipt is written", w.launchID, why)
	}
	if err == nil {
		<-w.exited
	}
	w.px.Stop()
	if w.tools != nil {
		w.tools.Stop()
		w.flushCalls()
	}
	if w.onRelease != nil {
		w.onRelease(w)
	}
	w.outR.Close()
}

// workersOf returns workspace's workers: parked (idle) and busy (running
// a turn).
func (p *Pool) workersOf(workspace string) (parked, busy []*worker) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, w := range p.workers {
		if k.workspace == workspace {
			parked = append(parked, w)
		}
	}
	for w := range p.busy {
		if w.key.workspace == workspace {
			busy = append(busy, w)
		}
	}
	return parked, busy
}

// workspaces lists the workspaces that have workers.
func (p *Pool) workspaces() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	set := map[string]bool{}
	for k := range p.workers {
		set[k.workspace] = true
	}
	for w := range p.busy {
		set[w.key.workspace] = true
	}
	var out []string
	for ws := range set {
		out = append(out, ws)
	}
	return out
}

// sameBase reports whether every worker of workspace was launched from
// the spec whose base (everything but its tools) is base.
func (p *Pool) sameBase(workspace, base string) bool {
	parked, busy := p.workersOf(workspace)
	for _, w := range append(parked, busy...) {
		if base == "" || w.wsBase != base {
			return false
		}
	}
	return true
}

// deferRefresh hands row to busy worker w, to run once its turn ended;
// released is row's end if w goes first. It reports false when w runs no
// turn (parked, or gone).
func (p *Pool) deferRefresh(w *worker, row *state.RefreshRow, released func(*state.RefreshRow)) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.busy[w] {
		return false
	}
	w.deferred = row
	w.onRelease = func(w *worker) {
		if row := p.takeDeferred(w); row != nil {
			released(row)
		}
	}
	return true
}

// takeDeferred takes w's waiting attempt, if any.
func (p *Pool) takeDeferred(w *worker) *state.RefreshRow {
	p.mu.Lock()
	defer p.mu.Unlock()
	row := w.deferred
	w.deferred = nil
	return row
}

// holdForRefresh takes parked w out of the pool while it is refreshed: a
// turn of its conversation waits for unhold. It reports false when w is
// not parked.
func (p *Pool) holdForRefresh(w *worker) (time.Duration, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.workers[w.key] != w {
		return 0, false
	}
	delete(p.workers, w.key)
	w.idle.Stop()
	if p.refreshing == nil {
		p.refreshing = map[warmKey]chan struct{}{}
	}
	p.refreshing[w.key] = make(chan struct{})
	p.releasing.Add(1) // Close waits for it
	return w.idleFor, true
}

// unhold parks w again after its refresh, for idle, and lets the turns
// waiting for it go on.
func (p *Pool) unhold(w *worker, idle time.Duration) {
	defer p.releasing.Done()
	p.park(w, idle)
	if !w.alive() {
		p.expire(w, "its process exited")
	}
	p.mu.Lock()
	ch := p.refreshing[w.key]
	delete(p.refreshing, w.key)
	p.mu.Unlock()
	if ch != nil {
		close(ch)
	}
}

// checkout marks w as running a turn.
func (p *Pool) checkout(w *worker) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.busy == nil {
		p.busy = map[*worker]bool{}
	}
	p.busy[w] = true
}

// Invalidate releases the warm workers of the workspaces, connections and
// providers named (by address, such as workspace.alpha): an apply changed
// them, and a worker launched before it is not kept waiting for a turn it
// could not serve.
func (p *Pool) Invalidate(addresses []string) {
	if p == nil {
		return
	}
	named := map[string]bool{}
	for _, a := range addresses {
		named[a] = true
	}
	p.mu.Lock()
	var gone []*worker
	var why []string
	for k, w := range p.workers {
		for _, a := range []string{"workspace." + k.workspace, "connection." + k.connection, "provider." + w.provider} {
			if named[a] {
				delete(p.workers, k)
				w.idle.Stop()
				gone, why = append(gone, w), append(why, "the applied "+a+" changed")
				break
			}
		}
	}
	p.mu.Unlock()
	for i, w := range gone {
		// Apart from the caller (serve's loop): a release waits for the
		// process to end.
		p.releasing.Add(1)
		go func() {
			defer p.releasing.Done()
			p.release(w, why[i])
		}()
	}
}

// Close releases every warm worker and keeps no more.
func (p *Pool) Close() {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.closed = true
	ws := p.workers
	p.workers = nil
	p.mu.Unlock()
	var wg sync.WaitGroup
	for _, w := range ws {
		w.idle.Stop()
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.release(w, "nlx serve stopped")
		}()
	}
	wg.Wait()
	p.releasing.Wait()
}
