// Package turn runs one provider turn from the applied state: it binds the
// turn (actor, connection, credential owner, provider, billing,
// generation, policy, launch) and records the binding before anything
// starts, launches the provider's real program in the workspace's sandbox
// through package launch, drives it with its adapter (package provider),
// routes its permission requests to the person who may decide them,
// revalidates the binding while it runs, and records the result. It never
// reads a config directory.
package turn

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	version "github.com/hashicorp/go-version"

	"github.com/nlx-dev/nlx/internal/fault"
	"github.com/nlx-dev/nlx/internal/reason"
	"github.com/nlx-dev/nlx/isolate"
	"github.com/nlx-dev/nlx/launch"
	"github.com/nlx-dev/nlx/provider"
	"github.com/nlx-dev/nlx/reconcile"
	"github.com/nlx-dev/nlx/schema"
	"github.com/nlx-dev/nlx/state"
)

// DefaultConversation is the conversation a turn continues when it names
// none.
const DefaultConversation = "default"

// DefaultRevalidate is how often a running turn's binding is checked
// against the applied state.
const DefaultRevalidate = 5 * time.Second

// Request is a turn as an operator (nlx turn) or the scheduler asks for
// it.
type Request struct {
	Workspace  string
	Connection string
	Actor      string
	// Conversation names the conversation (default "default"); Resume
	// continues its native session.
	Conversation string
	Resume       bool
	// ResumeIfAny continues the conversation's session when it has one
	// and starts it otherwise (a job's occurrences).
	ResumeIfAny bool
	// ClaimID is the occurrence claim the turn carries out (nlx serve,
	// nlx run): the turn's start dispatches it and its end ends it, in
	// the same transactions.
	ClaimID string
	// Fallback is a connection of the same workspace to run on when
	// Connection's provider is disabled (a job's fallbackConnection).
	Fallback string
	Prompt   string

	// Ask, when set, asks the person at the terminal (the actor) to decide
	// a permission request; answered is false when they did not.
	Ask func(ctx context.Context, p provider.Permission) (allow, answered bool)
	// PermissionWait is how long a permission request waits for a
	// decision (nlx permissions allow|deny, or Ask). Zero: a
	// non-interactive turn, which never widens: the request is denied at
	// once and the turn ends blocked (permission_required).
	PermissionWait time.Duration
	// IdleTimeout interrupts a turn whose provider sends nothing for that
	// long (waits for a permission decision excepted); Timeout bounds the
	// whole turn. Zero is no limit.
	IdleTimeout time.Duration
	Timeout     time.Duration
	// Revalidate is how often the binding is checked while the turn runs
	// (DefaultRevalidate when zero); it is also checked after every
	// permission decision.
	Revalidate time.Duration

	// HostEnv is nlx's environment: the secret's env: references and the
	// PATH the provider's command is found on are read from it, and the
	// sandbox's allowlist filters it.
	HostEnv []string
	Backend isolate.Backend
}

// Runner runs turns against one state.
type Runner struct {
	DB       *state.DB
	Host     launch.Host
	Adapters map[provider.Kind]provider.Adapter
	// Pool keeps provider processes warm between the turns of their
	// conversation (nlx serve); nil: every turn launches its provider and
	// stops it when the turn ends.
	Pool *Pool
	// RefreshTimeout bounds each request of a catalog refresh
	// (DefaultRefreshTimeout when zero).
	RefreshTimeout time.Duration

	calls callWriter // the tool proxies' calls, on their way to the state
}

// Outcome is a turn that ran.
type Outcome struct {
	TurnID string
	Result provider.Result
}

// Err is the outcome as the error a command exits with: nil for a
// completed turn, else a reason error with the result's code.
func (o *Outcome) Err() error {
	r := o.Result
	if r.Status == provider.StatusCompleted {
		return nil
	}
	code, msg := reason.ProviderError, string(r.Status)
	if r.Error != nil {
		code, msg = r.Error.Code, r.Error.Message
	}
	return reason.New(code, "turn %s %s: %s", o.TurnID, r.Status, msg)
}

// binding is everything a turn was resolved to before it launches.
type binding struct {
	launch     *launch.Launch
	adapter    provider.Adapter
	program    *launch.Program
	version    string
	connection string // the effective connection
	requested  string // the requested provider
	fallback   string // why the effective provider is not the requested one
	redact     *Redactor
	conv       state.ConversationRow
	hasConv    bool
	// warmKey is the conversation a warm worker serves; fingerprint is
	// everything the launch was made from: a worker is reused only for
	// exactly the same.
	warmKey     warmKey
	fingerprint string
}

// Run runs one turn and returns its outcome. A refusal (not applied, held,
// a disabled provider without a fallback, a version outside the
// constraint, an actor who is no member, ...) is an error and nothing was
// launched. emit receives every event, redacted, the result last.
func (r *Runner) Run(ctx context.Context, req Request, emit func(provider.Event)) (*Outcome, error) {
	if req.Conversation == "" {
		req.Conversation = DefaultConversation
	}
	if strings.TrimSpace(req.Prompt) == "" {
		return nil, reason.New(reason.InvalidUsage, "the prompt is empty")
	}
	b, err := r.bind(ctx, req)
	if err != nil {
		return nil, err
	}
	l := b.launch
	t := provider.Turn{Prompt: req.Prompt, Cwd: isolate.WorkspacePath, Policy: provider.Policy(l.WorkspaceSpec.Policy)}
	note := ""
	if req.ResumeIfAny && b.hasConv && (b.conv.Handle != "" || b.conv.Summary != "") {
		req.Resume = true
	}
	if req.Resume {
		switch {
		case !b.hasConv || (b.conv.Handle == "" && b.conv.Summary == ""):
			return nil, reason.New(reason.NoConversation, "conversation %s of %s/%s has no session to resume yet: run a turn without --resume first",
				req.Conversation, req.Workspace, req.Connection)
		case b.conv.Provider != l.Provider || b.conv.Handle == "":
			t.Prompt, note = withSummary(b.conv.Summary, req.Prompt), fmt.Sprintf(
				"the conversation's session belongs to provider %s, not %s: continued from nlx's summary", b.conv.Provider, l.Provider)
		default:
			t.Resume = b.conv.Handle
		}
	}
	id := newID()
	launchID := "turn-" + id
	w := r.Pool.take(ctx, b.warmKey, b.fingerprint, t.Resume)
	if w != nil {
		// The conversation's warm worker continues its session.
		launchID = w.launchID
	}
	c := l.ConnectionSpec
	row := state.TurnRow{ID: id, Workspace: req.Workspace, Connection: b.connection, Conversation: req.Conversation,
		Actor: req.Actor, CredentialOwner: c.Owner, RequestedProvider: b.requested, EffectiveProvider: l.Provider,
		FallbackReason: b.fallback, Billing: c.Billing, Generation: c.Generation, Policy: l.WorkspaceSpec.Policy,
		ProviderVersion: b.version, LaunchID: launchID, ClaimID: req.ClaimID, Resumed: t.Resume}
	if err := r.DB.BeginTurn(ctx, row); err != nil {
		return nil, err
	}
	fault.Point("turn.dispatched")
	h := &handler{r: r, req: req, b: b, turnID: id, emit: emit}
	if b.fallback != "" {
		h.event(provider.Event{Type: provider.EventNote, Text: "provider " + b.requested + " is disabled: running on " + l.Provider + " (connection " + b.connection + ")"})
	}
	if note != "" {
		h.event(provider.Event{Type: provider.EventNote, Text: note})
	}
	res, err := r.drive(ctx, b, t, launchID, w, h)
	r.calls.flush() // the turn's tool calls are recorded before its end
	if errors.Is(err, provider.ErrResumeRejected) {
		note = "the provider rejected the stored session: continued from nlx's summary"
		h.event(provider.Event{Type: provider.EventNote, Text: note})
		t.Resume, t.Prompt = "", withSummary(b.conv.Summary, req.Prompt)
		launchID += "-2"
		if err := r.DB.SetTurnLaunch(ctx, id, launchID); err != nil {
			return nil, err
		}
		res, err = r.drive(ctx, b, t, launchID, nil, h)
	}
	if err != nil {
		res = provider.Result{Status: provider.StatusFailed, Error: &provider.Error{Code: reason.CodeOf(err), Message: err.Error()}}
	}
	if h.blockedBy() != nil && res.Status != provider.StatusInterrupted {
		res.Status, res.Error = provider.StatusBlocked, h.blockedBy()
	}
	res.Note = joinNote(res.Note, note)
	if res.Session == "" {
		res.Session = h.sessionID()
	}
	res = b.redact.Result(res)
	bg := context.WithoutCancel(ctx)
	fault.Point("turn.finished")
	if err := r.end(bg, id, res, h); err != nil {
		return nil, err
	}
	if err := r.saveConversation(bg, req, b, res); err != nil {
		return nil, err
	}
	out := res
	emit(provider.Event{Type: provider.EventResult, Result: &out})
	return &Outcome{TurnID: id, Result: res}, nil
}

func joinNote(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + "; " + b
}

func (r *Runner) end(ctx context.Context, id string, res provider.Result, h *handler) error {
	usage, err := json.Marshal(res.Usage)
	if err != nil {
		return fmt.Errorf("turn %s: usage: %w", id, err)
	}
	e := state.TurnEnd{Status: state.TurnStatus(res.Status), Result: res.Text, Note: res.Note, Usage: string(usage),
		Stale: h.b.redact.String(h.staleText())}
	if res.Error != nil {
		e.ErrorCode, e.ErrorMessage = string(res.Error.Code), res.Error.Message
	}
	return r.DB.EndTurn(ctx, id, e)
}

// maxSummary bounds nlx's summary of a conversation: the latest exchanges
// are kept.
const maxSummary = 16 << 10

func (r *Runner) saveConversation(ctx context.Context, req Request, b *binding, res provider.Result) error {
	summary := b.conv.Summary
	if !req.Resume {
		summary = "" // a new conversation starts afresh
	}
	if res.Text != "" {
		summary += "user: " + b.redact.String(req.Prompt) + "\nassistant: " + res.Text + "\n\n"
	}
	if len(summary) > maxSummary {
		summary = summary[len(summary)-maxSummary:]
		if i := strings.Index(summary, "\n\n"); i >= 0 {
			summary = summary[i+2:]
		}
	}
	handle := res.Session
	if handle == "" && req.Resume {
		handle = b.conv.Handle
	}
	return r.DB.SaveConversation(ctx, state.ConversationRow{Workspace: req.Workspace, Connection: req.Connection,
		Name: req.Conversation, Provider: b.launch.Provider, Handle: handle, Summary: summary})
}

// withSummary is the prompt of a turn that continues from nlx's summary
// instead of the provider's own session.
func withSummary(summary, prompt string) string {
	if summary == "" {
		return prompt
	}
	return "Earlier in this conversation (a summary kept by nlx; the provider's own session could not be resumed):\n\n" +
		summary + "\nNow: " + prompt
}

// Preflight checks what the applied state alone says of a turn, launching
// nothing: the launch (not applied, held, a disabled provider without a
// fallback), the actor's membership and the adapter. It returns the
// connection the turn would run on. nlx jobs shows its refusal as a job's
// blocked reason.
func (r *Runner) Preflight(ctx context.Context, req Request) (string, error) {
	b, err := r.resolve(ctx, req)
	if err != nil {
		return "", err
	}
	return b.connection, nil
}

// bind resolves the turn from the applied state (resolve), then finds the
// program, probes its version and reads the secret.
func (r *Runner) bind(ctx context.Context, req Request) (*binding, error) {
	b, err := r.resolve(ctx, req)
	if err != nil {
		return nil, err
	}
	if b.program, err = launch.FindProgram(b.launch.ProviderCmd[0], launch.LookupPath(req.HostEnv)); err != nil {
		return nil, err
	}
	return r.finish(ctx, req, b)
}

// resolve binds the turn from the applied state: the launch (refusing what
// is not applied, held or disabled, with the fallback connection where one
// is named), the actor's membership and the adapter.
func (r *Runner) resolve(ctx context.Context, req Request) (*binding, error) {
	b := &binding{connection: req.Connection}
	spec := launch.Spec{Target: launch.Target{Workspace: req.Workspace, Connection: req.Connection},
		Command: []string{"/nonexistent"}, HostEnv: req.HostEnv, Backend: req.Backend}
	l, err := launch.Prepare(ctx, r.DB, r.Host, spec)
	if e := reason.Of(err); e != nil && (e.Code == reason.ProviderDisabled || e.Code == reason.ProviderFeatureOff) {
		c, cerr := launch.AppliedConnection(ctx, r.DB, req.Connection)
		if cerr != nil {
			return nil, cerr
		}
		b.requested = c.Provider
		switch {
		case req.Fallback == "" && e.Code == reason.ProviderDisabled:
			return nil, reason.Wrap(reason.DisabledProvider, e, "connection %s names no fallback connection", req.Connection)
		case req.Fallback == "":
			return nil, e
		}
		b.fallback = e.Msg
		b.connection = req.Fallback
		spec.Connection = req.Fallback
		l, err = launch.Prepare(ctx, r.DB, r.Host, spec)
	}
	if err != nil {
		return nil, err
	}
	b.launch = l
	if b.requested == "" {
		b.requested = l.Provider
	}
	if _, ok := l.WorkspaceSpec.Members[req.Actor]; !ok {
		return nil, reason.New(reason.NotAMember, "actor %q is not a member of workspace %s in the applied state", req.Actor, req.Workspace)
	}
	kind := normalKind(l.ProviderSpec.Kind)
	b.adapter = r.Adapters[kind]
	if b.adapter == nil {
		return nil, reason.New(reason.NoAdapter, "provider %s is of kind %s, which nlx cannot drive yet", l.Provider, l.ProviderSpec.Kind)
	}
	if len(l.ProviderCmd) == 0 {
		return nil, reason.New(reason.InvalidAppliedSpec, "provider %s has no command", l.Provider)
	}
	if cc, ok := b.adapter.(provider.CommandChecker); ok {
		if err := cc.CheckCommand(l.ProviderCmd); err != nil {
			return nil, reason.Wrap(reason.InvalidAppliedSpec, err, "provider %s", l.Provider)
		}
	}
	return b, nil
}

// finish reads the secret, probes the program's version and reads the
// conversation.
func (r *Runner) finish(ctx context.Context, req Request, b *binding) (*binding, error) {
	l := b.launch
	var err error
	secret := ""
	if ref := l.ConnectionSpec.Secret; ref != "" {
		if secret, err = launch.Secret(ref, req.HostEnv); err != nil {
			return nil, err
		}
	}
	home := ""
	if l.Request.CredentialHome != "" {
		home = l.Request.CredentialRoot + "/" + l.Request.CredentialHome
	}
	b.redact = NewRedactor(secret, home)
	lr := &l.Request
	lr.Programs = []string{b.program.Dir}
	if secret != "" {
		lr.Env[b.adapter.SecretEnv()] = secret
	}
	if b.version, err = r.probe(ctx, b); err != nil {
		return nil, err
	}
	if b.conv, b.hasConv, err = r.DB.Conversation(ctx, req.Workspace, req.Connection, req.Conversation); err != nil {
		return nil, err
	}
	b.warmKey = warmKey{workspace: req.Workspace, connection: b.connection, conversation: req.Conversation}
	if b.fingerprint, err = fingerprint(b); err != nil {
		return nil, err
	}
	return b, nil
}

// normalKind maps the names a kind is also known by to the kind.
func normalKind(k string) provider.Kind {
	switch strings.ToLower(strings.TrimSpace(k)) {
	case "codex", "codex-app-server", "codex_app_server":
		return provider.KindCodex
	case "claude", "claude-code", "claude_code":
		return provider.KindClaude
	}
	return provider.Kind(k)
}

// probe returns the program's version, checked against the provider's
// constraint: probed in the turn's own sandbox, once per program identity
// (the state remembers it).
func (r *Runner) probe(ctx context.Context, b *binding) (string, error) {
	p := b.launch.ProviderSpec
	c, err := version.NewConstraint(p.Version)
	if err != nil {
		return "", reason.New(reason.InvalidAppliedSpec, "provider %s: version constraint %q: %v", b.launch.Provider, p.Version, err)
	}
	v, found, err := r.DB.ProbedVersion(ctx, b.program.Path, b.program.Identity)
	if err != nil {
		return "", err
	}
	if !found {
		req := b.launch.Request
		req.Command = append([]string{b.program.Path}, b.adapter.VersionArgs()...)
		// A version needs no network.
		req.Egress, req.Proxy = isolate.EgressNone, nil
		var out bytes.Buffer
		rec := launch.Recorder{DB: r.DB}
		proc, err := isolate.Launch(ctx, req, isolate.Options{Recorder: rec, LaunchID: "probe-" + newID(), Stdout: &out, Stderr: &out})
		if err != nil {
			return "", err
		}
		ps, werr := proc.Wait(ctx)
		if _, err := isolate.Stop(context.WithoutCancel(ctx), proc.Identity, time.Second, rec); err != nil {
			return "", fmt.Errorf("stop the version probe of %s: %w", b.launch.Provider, err)
		}
		if werr != nil {
			return "", werr
		}
		if !ps.Success() {
			return "", reason.New(reason.ProviderNotFound, "provider %s: %s %s exited %d in the sandbox: %s", b.launch.Provider,
				b.program.Path, strings.Join(b.adapter.VersionArgs(), " "), ps.ExitCode(), tail(b.redact.String(out.String()), 400))
		}
		if v, err = b.adapter.ParseVersion(out.String()); err != nil {
			return "", reason.Wrap(reason.ProviderVersionMismatch, err, "provider %s", b.launch.Provider)
		}
		if err := r.DB.RecordProbe(ctx, b.program.Path, b.program.Identity, v); err != nil {
			return "", err
		}
	}
	got, err := version.NewVersion(v)
	if err != nil {
		return "", reason.New(reason.ProviderVersionMismatch, "provider %s: version %q: %v", b.launch.Provider, v, err)
	}
	if !c.Check(got) {
		return "", reason.New(reason.ProviderVersionMismatch, "provider %s: %s is version %s, outside the registration's %q",
			b.launch.Provider, b.program.Path, v, p.Version)
	}
	return v, nil
}

// drive runs the turn in a provider process: the conversation's warm
// worker when the pool holds one launched with exactly this binding and on
// this session, else a new launch (launchID). A worker whose turn
// completed is parked in the pool for the workspace's idleRelease;
// anything else is stopped, with its receipt, when the turn ends.
func (r *Runner) drive(ctx context.Context, b *binding, t provider.Turn, launchID string, w *worker, h *handler) (provider.Result, error) {
	// The binding is checked again just before the provider starts: an
	// apply may have run since it was resolved.
	if err := h.check(ctx); err != nil {
		if w != nil {
			r.Pool.release(w, "the binding changed")
		}
		return provider.Result{Status: provider.StatusInterrupted, Error: &provider.Error{Code: reason.CodeOf(err), Message: reason.Of(err).Msg}}, nil
	}
	if w == nil {
		var err error
		if w, err = r.launchWorker(ctx, b, t, launchID); err != nil {
			return provider.Result{}, err
		}
	}
	r.Pool.checkout(w)
	res, err := r.runOn(ctx, b, t, w, h)
	if r.Pool != nil && w.session != nil && err == nil && res.Status == provider.StatusCompleted && res.Session != "" && w.alive() {
		w.thread = res.Session
		r.Pool.park(w, r.idleRelease(b))
		if r.Pool.hasDeferred(w) {
			// A refresh waited for the turn to end: the worker is idle.
			go r.runDeferred(context.WithoutCancel(ctx), w)
		}
		return res, nil
	}
	r.Pool.release(w, "its turn ended")
	return res, err
}

// idleRelease is how long the turn's workspace keeps a worker warm.
func (r *Runner) idleRelease(b *binding) time.Duration {
	d, err := b.launch.WorkspaceSpec.IdleReleaseDuration()
	if err != nil {
		return 0
	}
	return d
}

// launchWorker launches the provider for turn t: its proxy when the
// workspace's egress is inference, the sandbox, and the session when the
// adapter keeps its program between turns and the runner has a pool.
func (r *Runner) launchWorker(ctx context.Context, b *binding, t provider.Turn, launchID string) (*worker, error) {
	req := b.launch.Request
	req.Env = map[string]string{}
	for k, v := range b.launch.Request.Env {
		req.Env[k] = v
	}
	w := &worker{launchID: launchID, stderr: &tailBuffer{max: 8 << 10}, exited: make(chan struct{}), rec: launch.Recorder{DB: r.DB},
		fingerprint: b.fingerprint, key: b.warmKey, provider: b.launch.Provider, kind: b.adapter.Kind(), wsBase: workspaceBase(b.launch.WorkspaceSpec)}
	// nlx's tool proxy, the launch's one MCP server.
	server, err := r.startTools(ctx, w, b, &req, b.launch.Request.HostEnv)
	if err != nil {
		return nil, err
	}
	stopTools := func() {
		w.tools.Stop()
		w.flushCalls()
	}
	t.Tools = server
	args, env := b.adapter.Args(t)
	for k, v := range env {
		req.Env[k] = v
	}
	req.Command = append(append([]string{b.program.Path}, b.launch.ProviderCmd[1:]...), args...)
	// A workspace with egress inference reaches the provider's endpoints
	// through a proxy of this launch's own, and nothing else; the proxy
	// is stopped after the process tree.
	withProxy := *b.launch
	withProxy.Request = req
	px, err := launch.StartEgress(ctx, &withProxy, launchID, r.DB)
	if err != nil {
		stopTools()
		return nil, err
	}
	req = withProxy.Request
	// The launch outlives the turn's context when the worker is kept.
	proc, inW, outR, err := isolate.LaunchPiped(context.WithoutCancel(ctx), req, isolate.Options{Recorder: w.rec, LaunchID: launchID, Stderr: w.stderr})
	if err != nil {
		px.Stop()
		stopTools()
		return nil, err
	}
	w.px, w.inW, w.outR, w.proc = px, inW, outR, proc
	go func() {
		proc.Wait(context.Background())
		close(w.exited)
	}()
	if sa, ok := b.adapter.(provider.SessionAdapter); ok && r.Pool != nil {
		w.session = sa.Open(provider.Pipes{Stdin: inW, Stdout: outR})
	}
	return w, nil
}

// runOn runs turn t in worker w.
func (r *Runner) runOn(ctx context.Context, b *binding, t provider.Turn, w *worker, h *handler) (provider.Result, error) {
	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if h.req.Timeout > 0 {
		var stop context.CancelFunc
		runCtx, stop = context.WithTimeoutCause(runCtx, h.req.Timeout,
			reason.New(reason.TurnTimeout, "the turn ran past its timeout of %s", h.req.Timeout))
		defer stop()
	}
	h.start(cancel)
	defer h.stop()
	if w.tools != nil {
		// The calls from now on are the turn's.
		w.tools.SetTurn(h.turnID)
		defer w.tools.SetTurn("")
	}
	px := w.px
	if px != nil {
		// The proxy gone, the sandbox has no network at all: the turn
		// cannot go on and says why.
		ran := make(chan struct{})
		defer close(ran)
		go func() {
			select {
			case <-px.Done:
				cancel(reason.New(reason.EgressProxyUnavailable, "the inference proxy ended while the turn ran: the sandbox has no network"))
			case <-ran:
			}
		}()
	}
	var res provider.Result
	var err error
	if w.session != nil {
		res, err = w.session.Turn(runCtx, t, h)
	} else {
		res, err = b.adapter.Run(runCtx, provider.Pipes{Stdin: w.inW, Stdout: w.outR}, t, h)
	}
	if px != nil && err == nil && res.Status != provider.StatusCompleted && px.Died(500*time.Millisecond) {
		// The proxy died under the turn (nlx stops it only later): its
		// death, not what the provider made of it, is the cause.
		res.Status = provider.StatusInterrupted
		res.Error = &provider.Error{Code: reason.EgressProxyUnavailable, Message: "the inference proxy ended while the turn ran: the sandbox has no network"}
	}
	if err == nil && res.Error != nil && res.Error.Code == reason.ProviderExited {
		if msg := strings.TrimSpace(b.redact.String(w.stderr.String())); msg != "" {
			res.Error.Message += ": " + tail(msg, 600)
		}
	}
	return res, err
}

// tail is the last n bytes of s.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append([]byte(nil), t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}

var _ io.Writer = (*tailBuffer)(nil)

func newID() string {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

// decoded reads the applied spec at kind.name into v; found is false when
// it is not applied (or not active).
func decoded(ctx context.Context, db *state.DB, kind schema.Kind, name string, v any) (found bool, err error) {
	spec, status, ok, err := db.AppliedSpec(ctx, string(kind)+"."+name)
	if err != nil || !ok || status != reconcile.StatusActive {
		return false, err
	}
	if err := json.Unmarshal(spec, v); err != nil {
		return false, fmt.Errorf("%s.%s: applied spec: %w", kind, name, err)
	}
	return true, nil
}
