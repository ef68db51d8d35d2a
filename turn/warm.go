package turn

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/nlx-dev/nlx/isolate"
	"github.com/nlx-dev/nlx/launch"
	"github.com/nlx-dev/nlx/provider"
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
		b.launch.WorkspaceSpec, b.launch.ConnectionSpec, b.launch.ProviderSpec})
	if err != nil {
		return "", fmt.Errorf("turn: fingerprint the launch: %w", err)
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:]), nil
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
}

func (p *Pool) logf(format string, args ...any) {
	if p != nil && p.Log != nil {
		p.Log(format, args...)
	}
}

// take returns the conversation's warm worker when it was launched with
// exactly fingerprint and continues session; a worker of the conversation
// that does not fit is released.
func (p *Pool) take(k warmKey, fingerprint, session string) *worker {
	if p == nil {
		return nil
	}
	p.mu.Lock()
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
	w.outR.Close()
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
