// Package serve is nlx's scheduler: it runs the applied jobs on their
// schedules. Every occurrence is claimed in the state before anything is
// launched for it, dispatched (with its binding) in the transaction that
// begins its turn, and ended in the transaction that ends the turn. One
// turn at a time runs per conversation; independent conversations run at
// once with no global cap. A dispatched occurrence whose process is gone
// without a recorded end is unknown: never retried, and it keeps its
// conversation locked until a person resolves it (nlx resolve claim).
// serve reads only the applied state, never a config directory, and picks
// up every new serial an apply writes while it runs.
package serve

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/nlx-dev/nlx/internal/fault"
	"github.com/nlx-dev/nlx/internal/reason"
	"github.com/nlx-dev/nlx/isolate"
	"github.com/nlx-dev/nlx/provider"
	"github.com/nlx-dev/nlx/reconcile"
	"github.com/nlx-dev/nlx/schema"
	"github.com/nlx-dev/nlx/state"
	"github.com/nlx-dev/nlx/turn"
)

// Runner runs turns: turn.Runner, or a fake.
type Runner interface {
	Run(ctx context.Context, req turn.Request, emit func(provider.Event)) (*turn.Outcome, error)
	Preflight(ctx context.Context, req turn.Request) (string, error)
}

var _ Runner = (*turn.Runner)(nil)

// Clock is the scheduler's time: the wall clock, or a fake in tests.
type Clock interface {
	Now() time.Time
	// After fires once d has passed.
	After(d time.Duration) <-chan time.Time
}

type wallClock struct{}

func (wallClock) Now() time.Time                         { return time.Now() }
func (wallClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// Defaults of Options.
const (
	DefaultGrace          = 30 * time.Second
	DefaultLate           = time.Minute
	DefaultPoll           = time.Second
	DefaultPermissionWait = 15 * time.Minute
	DefaultIdleTimeout    = 10 * time.Minute
)

// Options tune a Server.
type Options struct {
	// Grace is how long running turns may take to finish after a stop
	// (SIGTERM) before they are interrupted.
	Grace time.Duration
	// Late is how far behind its instant an occurrence still counts as on
	// time; older ones were missed (the job's catchUp decides).
	Late time.Duration
	// Poll is how often serve looks for a new applied serial.
	Poll time.Duration
	// The turns' limits (turn.Request).
	PermissionWait, IdleTimeout, Timeout, Revalidate time.Duration
	HostEnv                                          []string
	Backend                                          isolate.Backend
	// Log receives one line per thing serve does (stderr).
	Log func(format string, args ...any)
	// Ready is called once serve serves: the lock taken, what an earlier
	// serve left settled, the applied jobs read (systemd's READY=1).
	Ready func()
	// Release, called once every turn has ended at a stop, releases what
	// the runner keeps warm (turn.Pool.Close), before the serve lock goes.
	Release func()
	// Changed is told the workspaces, connections, providers and tools
	// (by address) a new serial changed, added or removed: the runner
	// refreshes the catalog of its warm workers whose workspace changed
	// only in its tools, or whose tools changed, and releases the others
	// (turn.Runner.Applied) at the apply, not at their next turn.
	Changed func(serial int64, addresses []string)
	// Refresh answers a person's nlx refresh of a workspace: the runner
	// refreshes its running workers (turn.Runner.Refresh).
	Refresh func(ctx context.Context, req state.RefreshRequestRow) []state.RefreshRow
}

// Server runs the applied jobs of one state.
type Server struct {
	DB     *state.DB
	Runner Runner
	Clock  Clock
	Opts   Options

	mu      sync.Mutex
	serial  int64
	jobs    map[string]*Job
	cursors map[string]time.Time
	hashes  map[string]string // the spec hashes of the applied workspaces, connections and providers
	convs   map[convKey]*conversation
	active  map[string]int // job -> occurrences claimed or running in this serve
	running sync.WaitGroup
	stopped bool
	turnCtx context.Context // the turns' context: cancelled after the grace period
}

// Job is an applied job as serve runs it.
type Job struct {
	Name     string
	Spec     schema.Job
	Status   reconcile.ResourceStatus
	Schedule Schedule // nil when the applied schedule is unreadable (Err)
	Err      error
}

// Conversation is the job's conversation key: its conversation, or its
// own name.
func (j *Job) Conversation() string {
	if j.Spec.Conversation != "" {
		return j.Spec.Conversation
	}
	return j.Name
}

type convKey struct{ workspace, name string }

// conversation serializes the turns of one conversation key: a FIFO of
// claims with one worker.
type conversation struct {
	queue []pending
	busy  bool
}

type pending struct {
	job   *Job
	claim state.ClaimRow
}

func (s *Server) logf(format string, args ...any) {
	if s.Opts.Log != nil {
		s.Opts.Log(format, args...)
	}
}

func (s *Server) init() {
	if s.Clock == nil {
		s.Clock = wallClock{}
	}
	o := &s.Opts
	if o.Grace <= 0 {
		o.Grace = DefaultGrace
	}
	if o.Late <= 0 {
		o.Late = DefaultLate
	}
	if o.Poll <= 0 {
		o.Poll = DefaultPoll
	}
	s.convs = map[convKey]*conversation{}
	s.active = map[string]int{}
}

// Serve runs until ctx ends (SIGTERM): it takes the serve lock, settles
// what an earlier serve left (Recover), then admits each due occurrence.
// When ctx ends it admits nothing more, lets running turns finish for the
// grace period, then interrupts them (the provider's way, then the process
// tree is stopped with a receipt): they end interrupted, not done.
func (s *Server) Serve(ctx context.Context) error {
	s.init()
	lockID, took, err := s.DB.ServeLock(ctx)
	if err != nil {
		return err
	}
	defer s.DB.ServeUnlock(context.WithoutCancel(ctx), lockID)
	if took != nil {
		s.logf("took over the serve lock of %s, which is gone", took)
	}
	rec, err := Recover(ctx, s.DB, s.logf)
	if err != nil {
		return err
	}
	if len(rec.Pending) > 0 || rec.Running > 0 {
		go SettlePending(context.WithoutCancel(ctx), s.DB, rec.Pending, rec.Running > 0, func(d time.Duration) bool {
			select {
			case <-ctx.Done():
				return false
			case <-s.Clock.After(d):
				return true
			}
		}, s.logf)
	}
	turnCtx, cancelTurns := context.WithCancelCause(context.WithoutCancel(ctx))
	defer cancelTurns(nil)
	s.turnCtx = turnCtx
	// An apply changing the state right now is waited for: its half is
	// not read (the snapshot refuses it).
	for {
		err := s.reload(ctx)
		if err == nil {
			break
		}
		if !reason.Is(err, reason.StateLocked) {
			return err
		}
		s.logf("waiting for the apply changing the state: %v", err)
		select {
		case <-ctx.Done():
			return nil
		case <-s.Clock.After(s.Opts.Poll):
		}
	}
	s.logf("serving serial %d: %d job(s)", s.serial, len(s.jobs))
	if s.Opts.Ready != nil {
		s.Opts.Ready()
	}
	s.refreshRequests(ctx)
	watch := state.NewWatcher(s.DB.Path())
	for {
		now := s.Clock.Now()
		s.tick(ctx, now)
		wait := s.Opts.Poll
		if next, ok := s.nextDue(now); ok && next.Sub(now) < wait {
			wait = max(next.Sub(now), 0)
		}
		select {
		case <-ctx.Done():
			s.shutdown(cancelTurns)
			return nil
		case <-s.Clock.After(wait):
		}
		if watch.Changed() {
			if err := s.reload(ctx); err != nil && ctx.Err() == nil {
				s.logf("reading the applied state: %v (trying again)", err)
			}
			s.refreshRequests(ctx)
		}
	}
}

// shutdown admits nothing more, drops what was queued, waits the grace
// period for running turns, then interrupts them and waits for their end.
func (s *Server) shutdown(cancelTurns context.CancelCauseFunc) {
	if s.Opts.Release != nil {
		defer s.Opts.Release()
	}
	bg := context.Background()
	s.mu.Lock()
	s.stopped = true
	var dropped []pending
	for _, c := range s.convs {
		dropped = append(dropped, c.queue...)
		c.queue = nil
	}
	s.mu.Unlock()
	for _, p := range dropped {
		s.DB.EndClaim(bg, p.claim.ID, state.ClaimClaimed, state.ClaimSkipped, reason.ServeStopping, "nlx serve stopped before dispatching it: nothing was launched")
	}
	done := make(chan struct{})
	go func() {
		s.running.Wait()
		close(done)
	}()
	select {
	case <-done:
		s.logf("stopped: every running turn finished")
		return
	case <-s.Clock.After(s.Opts.Grace):
	}
	s.logf("grace period of %s over: interrupting the turns still running", s.Opts.Grace)
	cancelTurns(reason.New(reason.ServeStopping, "nlx serve was stopped and the turn did not end within the grace period of %s", s.Opts.Grace))
	<-done
	s.logf("stopped serving")
}

// reload reads the applied jobs when the serial moved.
func (s *Server) reload(ctx context.Context) error {
	_, serial, err := s.DB.Meta(ctx)
	if err != nil {
		return err
	}
	s.mu.Lock()
	same := s.jobs != nil && serial == s.serial
	s.mu.Unlock()
	if same {
		return nil
	}
	jobs, err := AppliedJobs(ctx, s.DB)
	if err != nil {
		return err
	}
	cursors, err := s.DB.Cursors(ctx)
	if err != nil {
		return err
	}
	rows, err := s.DB.Rows(ctx)
	if err != nil {
		return err
	}
	s.noteChanges(serial, rows)
	now := s.Clock.Now()
	for name, j := range jobs {
		if _, ok := cursors[name]; ok {
			continue
		}
		// A job serve has not handled yet starts from when it was applied:
		// what fell due since then while serve was down was missed.
		at := now
		for _, r := range rows {
			if r.Kind == schema.KindJob && r.Name == name {
				if t, err := time.Parse(time.RFC3339Nano, r.UpdatedAt); err == nil && t.Before(now) {
					at = t
				}
			}
		}
		cursors[name] = at
		if err := s.DB.SetCursor(ctx, name, at); err != nil {
			return err
		}
		if j.Err != nil {
			s.logf("job %s: %v", name, j.Err)
		}
	}
	s.mu.Lock()
	old := s.serial
	s.serial, s.jobs, s.cursors = serial, jobs, cursors
	s.mu.Unlock()
	if old != 0 {
		s.logf("serial %d applied: %d job(s)", serial, len(jobs))
	}
	return nil
}

// noteChanges tells Opts.Changed which workspaces, connections and
// providers differ from the serial served before.
func (s *Server) noteChanges(serial int64, rows []state.Row) {
	hashes := map[string]string{}
	for _, r := range rows {
		switch r.Kind {
		case schema.KindWorkspace, schema.KindConnection, schema.KindProvider, schema.KindTool:
			hashes[r.Address] = r.Hash + string(r.Status)
		}
	}
	old := s.hashes
	s.hashes = hashes
	if old == nil || s.Opts.Changed == nil {
		return
	}
	var changed []string
	for a, h := range hashes {
		if old[a] != h {
			changed = append(changed, a)
		}
	}
	for a := range old {
		if _, ok := hashes[a]; !ok {
			changed = append(changed, a)
		}
	}
	if len(changed) > 0 {
		sort.Strings(changed)
		s.Opts.Changed(serial, changed)
	}
}

// refreshRequests answers the nlx refresh requests nobody took: the
// workers are this serve's, its connections to them its own.
func (s *Server) refreshRequests(ctx context.Context) {
	if s.Opts.Refresh == nil {
		return
	}
	reqs, err := s.DB.OpenRefreshRequests(ctx)
	if err != nil {
		s.logf("reading the refresh requests: %v (trying again)", err)
		return
	}
	for _, q := range reqs {
		if q.TakenAt != "" {
			continue
		}
		if ok, err := s.DB.TakeRefreshRequest(ctx, q.ID, 0, false); err != nil || !ok {
			continue
		}
		s.logf("refresh %s of workspace %s asked by %s", q.ID, q.Workspace, q.Actor)
		go func() {
			rows := s.Opts.Refresh(ctx, q)
			for _, r := range rows {
				s.logf("refresh %s: launch %s %s", q.ID, r.LaunchID, r.Ended())
			}
			if _, err := s.DB.TakeRefreshRequest(context.WithoutCancel(ctx), q.ID, len(rows), true); err != nil {
				s.logf("refresh %s: %v", q.ID, err)
			}
		}()
	}
}

// AppliedJobs reads the jobs of the applied state.
func AppliedJobs(ctx context.Context, db *state.DB) (map[string]*Job, error) {
	snap, err := db.Snapshot(ctx)
	if err != nil {
		return nil, err
	}
	jobs := map[string]*Job{}
	for _, r := range snap.Resources {
		if r.Kind != schema.KindJob {
			continue
		}
		j := &Job{Name: r.Name, Status: r.Status}
		if err := json.Unmarshal(r.Spec, &j.Spec); err != nil {
			return nil, fmt.Errorf("job.%s: applied spec: %w", r.Name, err)
		}
		j.Schedule, j.Err = ParseSchedule(j.Spec.Schedule)
		jobs[r.Name] = j
	}
	return jobs, nil
}

// nextDue is the earliest next occurrence of any job.
func (s *Server) nextDue(now time.Time) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var best time.Time
	found := false
	for name, j := range s.jobs {
		if j.Schedule == nil {
			continue
		}
		from := s.cursors[name]
		if from.Before(now) {
			from = now
		}
		if t, ok := j.Schedule.Next(from); ok && (!found || t.Before(best)) {
			best, found = t, true
		}
	}
	return best, found
}

// tick admits every job's due occurrences at now.
func (s *Server) tick(ctx context.Context, now time.Time) {
	s.mu.Lock()
	names := make([]string, 0, len(s.jobs))
	for name := range s.jobs {
		names = append(names, name)
	}
	s.mu.Unlock()
	sort.Strings(names)
	for _, name := range names {
		if ctx.Err() != nil {
			return
		}
		s.mu.Lock()
		j, cursor := s.jobs[name], s.cursors[name]
		s.mu.Unlock()
		if j == nil || j.Schedule == nil {
			continue
		}
		d := Due(j.Schedule, cursor, now, s.Opts.Late, CatchUp(j.Spec.CatchUp))
		if len(d.Run) == 0 && d.Missed == 0 {
			// Nothing fell due: the cursor stays, and nothing is written
			// (an idle serve writes nothing to the state).
			continue
		}
		if d.Missed > 0 {
			more := ""
			if d.Capped {
				more = " or more"
			}
			s.logf("job %s: %d%s occurrence(s) missed while nlx serve was down (catchUp %s)", name, d.Missed, more, j.Spec.CatchUp)
		}
		cur := d.Cursor
		for _, at := range d.Run {
			if err := s.admit(ctx, j, at); err != nil {
				// Not claimed (the state could not be written): the cursor
				// stays before it, and the next tick tries again.
				s.logf("job %s due %s: %v (trying again)", name, state.FormatInstant(at), err)
				cur = at.Add(-time.Nanosecond)
				break
			}
		}
		if !cur.After(cursor) {
			continue
		}
		d.Cursor = cur
		if err := s.DB.SetCursor(ctx, name, d.Cursor); err != nil {
			s.logf("job %s: %v", name, err)
			continue
		}
		s.mu.Lock()
		s.cursors[name] = d.Cursor
		s.mu.Unlock()
	}
}

// admit claims one occurrence and queues it on its conversation, or
// records why it does not run. An error means nothing was recorded.
func (s *Server) admit(ctx context.Context, j *Job, at time.Time) error {
	switch {
	case !j.Spec.Enabled:
		return nil // disabled on purpose: nothing is recorded, nlx jobs says so
	case j.Status == reconcile.StatusHeld:
		return nil // held for review: the same
	}
	c := state.ClaimRow{ID: NewID(), Job: j.Name, ScheduledAt: state.FormatInstant(at), Trigger: state.TriggerSchedule,
		Workspace: j.Spec.Workspace, Conversation: j.Conversation(), Connection: j.Spec.Connection, Serial: s.serial}
	s.mu.Lock()
	busy := s.active[j.Name] > 0
	s.mu.Unlock()
	if !busy {
		// Another process's occurrence of the job (nlx run) counts too.
		busy, _ = s.DB.JobActive(ctx, j.Name)
	}
	block := Blocked(ctx, s.DB, s.Runner, j, s.request(j), true)
	switch {
	case block != nil:
		c.Phase, c.ReasonCode, c.Reason = state.ClaimSkipped, string(block.Code), block.Msg
	case busy && j.Spec.Concurrency != "queue":
		c.Phase, c.ReasonCode, c.Reason = state.ClaimSkipped, string(reason.PreviousRunning),
			"concurrency skip: the previous occurrence of the job still runs"
	}
	if c.Actor == "" {
		c.Actor = s.actorOf(ctx, j)
	}
	created, err := s.DB.Claim(ctx, c)
	if err != nil {
		return err
	}
	if !created {
		s.logf("job %s due %s: claimed before; not run again", j.Name, c.ScheduledAt)
		return nil
	}
	if c.Phase == state.ClaimSkipped {
		s.logf("job %s due %s: skipped (%s): %s", j.Name, c.ScheduledAt, c.ReasonCode, c.Reason)
		return nil
	}
	fault.Point("serve.claimed")
	s.logf("job %s due %s: claimed %s", j.Name, c.ScheduledAt, c.ID)
	s.enqueue(j, c)
	return nil
}

// actorOf is who a scheduled occurrence runs for: the owner of the job's
// connection, whose credentials it uses.
func (s *Server) actorOf(ctx context.Context, j *Job) string {
	if c := connectionOf(ctx, s.DB, j.Spec.Connection); c != nil {
		return c.Owner
	}
	return ""
}

// request is the turn of a scheduled occurrence of j.
func (s *Server) request(j *Job) turn.Request {
	o := s.Opts
	pw := o.PermissionWait
	if pw < 0 {
		pw = 0
	}
	return turn.Request{Workspace: j.Spec.Workspace, Connection: j.Spec.Connection, Conversation: j.Conversation(),
		Fallback: j.Spec.FallbackConnection, Prompt: j.Spec.Prompt, PermissionWait: pw, IdleTimeout: o.IdleTimeout,
		Timeout: o.Timeout, Revalidate: o.Revalidate, HostEnv: o.HostEnv, Backend: o.Backend}
}

// enqueue puts a claim on its conversation and starts the conversation's
// worker if it is idle.
func (s *Server) enqueue(j *Job, c state.ClaimRow) {
	k := convKey{c.Workspace, c.Conversation}
	s.mu.Lock()
	defer s.mu.Unlock()
	conv := s.convs[k]
	if conv == nil {
		conv = &conversation{}
		s.convs[k] = conv
	}
	s.active[j.Name]++
	conv.queue = append(conv.queue, pending{job: j, claim: c})
	if conv.busy {
		return
	}
	conv.busy = true
	s.running.Add(1)
	go s.work(k, conv)
}

// work runs a conversation's queue, one turn at a time.
func (s *Server) work(k convKey, conv *conversation) {
	defer s.running.Done()
	for {
		s.mu.Lock()
		if len(conv.queue) == 0 || s.stopped {
			conv.busy = false
			delete(s.convs, k)
			s.mu.Unlock()
			return
		}
		p := conv.queue[0]
		conv.queue = conv.queue[1:]
		s.mu.Unlock()
		s.runClaim(p)
		s.mu.Lock()
		s.active[p.job.Name]--
		if s.active[p.job.Name] <= 0 {
			delete(s.active, p.job.Name)
		}
		s.mu.Unlock()
	}
}

// runClaim carries out one claimed occurrence, with the job as it is
// applied now: a job disabled or blocked since it was claimed does not
// run.
func (s *Server) runClaim(p pending) {
	ctx := s.turnCtx
	s.mu.Lock()
	j := s.jobs[p.job.Name]
	s.mu.Unlock()
	c := p.claim
	skip := func(code reason.Code, why string) {
		s.DB.EndClaim(context.WithoutCancel(ctx), c.ID, state.ClaimClaimed, state.ClaimSkipped, code, why)
		s.logf("job %s due %s: claim %s skipped (%s): %s", c.Job, c.ScheduledAt, c.ID, code, why)
	}
	switch {
	case j == nil:
		skip(reason.NotApplied, "the job is no longer applied")
		return
	case !j.Spec.Enabled:
		skip(reason.JobDisabled, "the job was disabled before its turn started")
		return
	case j.Status == reconcile.StatusHeld:
		skip(reason.JobHeld, "the job is held")
		return
	}
	req := s.request(j)
	req.Actor, req.ClaimID = c.Actor, c.ID
	out, err := RunClaim(ctx, s.DB, s.Runner, j, req, true, func() error {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.stopped {
			return reason.New(reason.ServeStopping, "nlx serve stopped while the occurrence waited for its conversation")
		}
		return nil
	})
	switch {
	case err != nil && reason.Is(err, reason.ServeStopping):
		skip(reason.ServeStopping, "nlx serve stopped before dispatching it: nothing was launched")
	case err != nil:
		skip(reason.CodeOf(err), errMsg(err))
	default:
		r := out.Result
		code := ""
		if r.Error != nil {
			code = " (" + string(r.Error.Code) + ")"
		}
		s.logf("job %s due %s: claim %s %s%s, turn %s", c.Job, c.ScheduledAt, c.ID, r.Status, code, out.TurnID)
	}
}

// RunClaim runs the turn of a claimed occurrence (scheduled, or a manual
// run): checks what blocks it, then runs it, waiting while another claim
// (another process's: nlx run, or serve) runs in the same conversation.
// An error means it never dispatched: nothing was launched, the claim is
// still claimed. giveUp, asked while waiting, ends the wait with its
// error.
func RunClaim(ctx context.Context, db *state.DB, r Runner, j *Job, req turn.Request, scheduled bool, giveUp func() error) (*turn.Outcome, error) {
	// What the job's state says; the turn's own binding refuses what the
	// preflight would.
	if b := claimBlock(ctx, db, j, connectionOf(ctx, db, j.Spec.Connection), scheduled); b != nil {
		return nil, b
	}
	req.ResumeIfAny = true
	if w, err := workspaceOf(ctx, db, j.Spec.Workspace); err == nil && w.ChatReset == "per_run" {
		req.ResumeIfAny = false
	}
	for {
		out, err := r.Run(ctx, req, func(provider.Event) {})
		if err == nil || !reason.Is(err, reason.ConversationBusy) {
			return out, err
		}
		select {
		case <-ctx.Done():
			return nil, reason.Wrap(reason.ServeStopping, context.Cause(ctx), "stopped while waiting for the conversation")
		case <-time.After(250 * time.Millisecond):
		}
		if giveUp != nil {
			if err := giveUp(); err != nil {
				return nil, err
			}
		}
	}
}

func errMsg(err error) string {
	if e := reason.Of(err); e != nil {
		return e.Msg
	}
	return err.Error()
}

// Blocked is why an occurrence of j cannot run now, from the applied state
// alone and launching nothing, or nil: what claimBlock says, or what the
// turn's preflight refuses (a provider disabled without a fallback, an
// actor no longer a member, ...). A disabled job is the caller's to
// judge: a person may run it by hand.
func Blocked(ctx context.Context, db *state.DB, r Runner, j *Job, req turn.Request, scheduled bool) *reason.Error {
	c := connectionOf(ctx, db, j.Spec.Connection)
	if b := claimBlock(ctx, db, j, c, scheduled); b != nil {
		return b
	}
	if c != nil && req.Actor == "" {
		req.Actor = c.Owner
	}
	if _, err := r.Preflight(ctx, req); err != nil {
		if e := reason.Of(err); e != nil {
			return e
		}
		return reason.Wrap(reason.Failure, err, "job %s", j.Name)
	}
	return nil
}

// claimBlock is why the job itself keeps an occurrence from running: it
// is held, it is scheduled on a personal connection (c, the job's applied
// connection, nil when there is none) without background authority, or an
// unknown claim locks its conversation.
func claimBlock(ctx context.Context, db *state.DB, j *Job, c *schema.Connection, scheduled bool) *reason.Error {
	if j.Status == reconcile.StatusHeld {
		return reason.New(reason.JobHeld, "job %s is held (an import under review)", j.Name)
	}
	if c != nil && c.Scope == "personal" && !j.Spec.BackgroundAuthority && scheduled {
		return reason.New(reason.BackgroundAuthorityRequired, "job %s runs on %s's personal connection %s with nobody present: it needs backgroundAuthority: true",
			j.Name, c.Owner, j.Spec.Connection)
	}
	if u, err := db.ConversationLock(ctx, j.Spec.Workspace, j.Conversation()); err != nil {
		return reason.Wrap(reason.Failure, err, "job %s", j.Name)
	} else if u != nil {
		return reason.New(reason.WorkflowLocked, "claim %s of job %s in conversation %s has an outcome nobody knows: resolve it first (nlx resolve claim %s)",
			u.ID, u.Job, j.Conversation(), u.ID)
	}
	return nil
}

// connectionOf is the applied, active connection name, or nil (the
// preflight says why a job's is missing).
func connectionOf(ctx context.Context, db *state.DB, name string) *schema.Connection {
	spec, status, ok, err := db.AppliedSpec(ctx, string(schema.KindConnection)+"."+name)
	if err != nil || !ok || status != reconcile.StatusActive {
		return nil
	}
	var c schema.Connection
	if json.Unmarshal(spec, &c) != nil {
		return nil
	}
	return &c
}

func workspaceOf(ctx context.Context, db *state.DB, name string) (*schema.Workspace, error) {
	spec, _, ok, err := db.AppliedSpec(ctx, string(schema.KindWorkspace)+"."+name)
	if err != nil || !ok {
		return nil, errors.Join(err, fmt.Errorf("workspace %s is not applied", name))
	}
	var w schema.Workspace
	if err := json.Unmarshal(spec, &w); err != nil {
		return nil, fmt.Errorf("workspace.%s: applied spec: %w", name, err)
	}
	return &w, nil
}

// NewID is a new claim id.
func NewID() string {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}
