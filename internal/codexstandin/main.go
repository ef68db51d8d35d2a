// Command codexstandin is a test stand-in for Codex's app-server (`codex
// app-server`, npm @openai/codex, pinned 0.169.0): a small program that
// speaks exactly the part of the app-server protocol nlx's adapter
// (provider/codex) uses, and answers each turn from a Responses API model
// over plain HTTP (internal/fakemodel). It is for tests and the benchmark
// only, never for real work: it runs no tools, offers the model none, and
// sends the model none of Codex's instructions. What it is for is the scale
// tests and the benchmark that run hundreds to a thousand "provider
// processes" at once, which the real program (hundreds of MiB each) is far
// too big for: they build it (go build, CGO_ENABLED=0: static) and run it
// where they would run codex. provider/codex's TestStandin tests it
// (standin_test.go): the adapter against it and the fake model, every
// message it sends validated against the pinned protocol schema;
// TestStandinRSS measures its resident set mid-turn (about 4 MiB, of which
// about 1.3 MiB is its own anonymous memory: the rest is the binary's
// pages, which the stand-ins share), and TestStandinMany (NLX_STANDIN_MANY=N)
// runs N turns at once.
//
// It is run as the adapter runs codex:
//
//	codexstandin app-server -c model="gpt-fake" -c model_provider="fake" \
//	    -c model_providers.fake.base_url="http://127.0.0.1:PORT/v1" ... \
//	    -c shell_environment_policy.ignore_default_excludes=false
//
// (codex.FakeModelArgs and the adapter's Args). Of the -c settings
// (key=value, the value TOML: a quoted string, or taken as it is) it reads
// model, model_provider (default "openai") and that provider's base_url
// and env_key (default OPENAI_API_KEY, whose value it sends as a bearer
// token); every other setting is accepted and ignored. `--version` prints
// "codex-cli 0.169.0", as the pinned program does.
//
// The protocol, JSON-RPC 2.0 without the "jsonrpc" member, one JSON object
// a line on stdin and stdout; it exits when stdin closes:
//
//   - initialize (answered once), then the initialized notification.
//   - thread/start: a new thread (a UUIDv7 id) in params.cwd.
//   - thread/resume: a thread an earlier run of the stand-in kept in
//     $CODEX_HOME/standin/THREAD.json (the conversation's user and agent
//     texts and its token count), whose texts the next model request
//     carries; an id it never kept is refused as 0.169.0 refuses it (a
//     JSON-RPC error -32600, "no rollout found for thread id ID"), and so
//     is a malformed one (in its own words), which the adapter takes as
//     provider.ErrResumeRejected.
//   - turn/start, with text input: answered with the turn (inProgress),
//     then turn/started; one POST {base_url}/responses (stream: true; the
//     thread's earlier texts and the prompt as input, no tools); its SSE
//     stream becomes item/started, item/agentMessage/delta and
//     item/completed for each assistant message (item/reasoning/
//     summaryTextDelta for reasoning summaries), then
//     thread/tokenUsage/updated from response.completed's usage, then
//     turn/completed "completed" with the agent messages. A model error
//     is an error notification (willRetry false) and turn/completed
//     "failed" with the same error; for an HTTP 500, 429 or 400 answer, a
//     cut stream and response.failed the message is the one 0.169.0 (with
//     retries off) sends against the fake model. A tool call by the model
//     fails the turn too: the stand-in runs no tools.
//   - turn/interrupt of the running turn: answered with {}, the model
//     request is cancelled, and turn/completed says "interrupted".
//   - any other request: a JSON-RPC method-not-found error (-32601);
//     notifications and responses from the client are ignored. The
//     stand-in makes no requests of its own (no approvals: it runs
//     nothing that would need one), and sends no notification the adapter
//     does not read (no thread/started, warning or userMessage items).
//
// It is kept small on purpose: no net/http (a hand-written HTTP/1.1 client
// over net.Dial and a small SSE reader), no TLS (base_url must be
// http://), no cgo.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nlx-dev/nlx/provider"
)

// version is the Codex version the stand-in stands in for.
const version = "0.169.0"

// The turn statuses of the protocol's v2 TurnStatus, spelled as
// provider.Status spells them (as the adapter's constants are).
var (
	turnCompleted   = string(provider.StatusCompleted)
	turnInterrupted = string(provider.StatusInterrupted)
	turnFailed      = string(provider.StatusFailed)
)

const turnInProgress = "inProgress"

// The JSON-RPC error codes sent.
const (
	errInvalidRequest = -32600
	errMethodNotFound = -32601
	errInvalidParams  = -32602
)

// maxLine bounds a line read from stdin or from the model's stream.
const maxLine = 64 << 20

func main() {
	cfg, err := parseArgs(os.Args[1:])
	switch {
	case errors.Is(err, errVersion):
		fmt.Println("codex-cli " + version)
		return
	case errors.Is(err, errHelp):
		fmt.Println("usage: codexstandin app-server [-c key=value]... (a test stand-in for codex app-server " + version + ")")
		return
	case err != nil:
		fmt.Fprintln(os.Stderr, "codexstandin:", err)
		os.Exit(2)
	}
	s := newServer(cfg)
	os.Exit(s.serve(os.Stdin))
}

// config is what the stand-in reads of its -c settings and environment.
type config struct {
	model    string
	provider string
	baseURL  string // "" when the provider has none
	envKey   string
	home     string // CODEX_HOME (or ~/.codex); "" keeps no threads
}

var (
	errVersion = errors.New("--version")
	errHelp    = errors.New("--help")
)

// parseArgs reads the command line: app-server and -c (--config)
// settings, in any order.
func parseArgs(args []string) (config, error) {
	kv := map[string]string{}
	sub := false
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--version" || a == "-V":
			return config{}, errVersion
		case a == "--help" || a == "-h":
			return config{}, errHelp
		case a == "-c" || a == "--config":
			if i+1 == len(args) {
				return config{}, fmt.Errorf("%s needs a key=value", a)
			}
			i++
			if err := setting(kv, args[i]); err != nil {
				return config{}, err
			}
		case strings.HasPrefix(a, "--config="):
			if err := setting(kv, strings.TrimPrefix(a, "--config=")); err != nil {
				return config{}, err
			}
		case a == "app-server" && !sub:
			sub = true
		default:
			return config{}, fmt.Errorf("unknown argument %q (the stand-in serves only `app-server [-c key=value]...`)", a)
		}
	}
	if !sub {
		return config{}, errors.New("the stand-in serves only `app-server [-c key=value]...`")
	}
	c := config{model: kv["model"], provider: kv["model_provider"]}
	if c.provider == "" {
		c.provider = "openai"
	}
	if c.model == "" {
		c.model = "gpt-5" // the stand-in's own default: tests name one
	}
	c.baseURL = kv["model_providers."+c.provider+".base_url"]
	c.envKey = kv["model_providers."+c.provider+".env_key"]
	if c.envKey == "" {
		c.envKey = "OPENAI_API_KEY"
	}
	c.home = os.Getenv("CODEX_HOME")
	if c.home == "" {
		if h, err := os.UserHomeDir(); err == nil {
			c.home = filepath.Join(h, ".codex")
		}
	}
	if c.home != "" {
		if abs, err := filepath.Abs(c.home); err == nil {
			c.home = abs
		}
	}
	return c, nil
}

// setting stores one key=value; the value is TOML: a basic or literal
// string is unquoted, anything else is kept as written.
func setting(kv map[string]string, s string) error {
	k, v, ok := strings.Cut(s, "=")
	k = strings.TrimSpace(k)
	if !ok || k == "" {
		return fmt.Errorf("-c %q is not key=value", s)
	}
	v = strings.TrimSpace(v)
	switch {
	case len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"':
		if u, err := strconv.Unquote(v); err == nil {
			v = u
		}
	case len(v) >= 2 && v[0] == '\'' && v[len(v)-1] == '\'':
		v = v[1 : len(v)-1]
	}
	kv[k] = v
	return nil
}

// server is the app-server's state: one client on stdio.
type server struct {
	cfg config

	wmu sync.Mutex // serializes writes to stdout
	out io.Writer

	mu          sync.Mutex // guards what follows, and orders a turn's end against turn/interrupt
	initialized bool
	client      string
	threads     map[string]*thread
	active      *turn
}

// thread is a conversation: its texts so far and its token count.
type thread struct {
	ID        string    `json:"id"`
	Cwd       string    `json:"cwd"`
	CreatedAt int64     `json:"createdAt"`
	Messages  []message `json:"messages"`
	Total     tokens    `json:"total"`
}

// message is one text of a thread: the user's or the agent's.
type message struct {
	Role string `json:"role"` // user or assistant
	Text string `json:"text"`
}

// tokens is the protocol's TokenUsageBreakdown.
type tokens struct {
	TotalTokens           int64 `json:"totalTokens"`
	InputTokens           int64 `json:"inputTokens"`
	CachedInputTokens     int64 `json:"cachedInputTokens"`
	OutputTokens          int64 `json:"outputTokens"`
	ReasoningOutputTokens int64 `json:"reasoningOutputTokens"`
}

func (t tokens) plus(o tokens) tokens {
	return tokens{t.TotalTokens + o.TotalTokens, t.InputTokens + o.InputTokens, t.CachedInputTokens + o.CachedInputTokens,
		t.OutputTokens + o.OutputTokens, t.ReasoningOutputTokens + o.ReasoningOutputTokens}
}

// turn is the running turn.
type turn struct {
	id          string
	th          *thread
	start       time.Time
	cancel      context.CancelFunc
	interrupted bool // turn/interrupt came: it ends interrupted
	prompt      string
}

func newServer(cfg config) *server {
	return &server{cfg: cfg, out: os.Stdout, threads: map[string]*thread{}}
}

// The JSON-RPC messages.
type (
	inMessage struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params json.RawMessage `json:"params"`
	}
	outResponse struct {
		ID     json.RawMessage `json:"id"`
		Result any             `json:"result"`
	}
	outError struct {
		ID    json.RawMessage `json:"id"`
		Error rpcError        `json:"error"`
	}
	rpcError struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}
	outNotification struct {
		Method string `json:"method"`
		Params any    `json:"params"`
	}
)

// send writes one message, a line.
func (s *server) send(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		fmt.Fprintln(os.Stderr, "codexstandin: encode:", err)
		return
	}
	b = append(b, '\n')
	s.wmu.Lock()
	defer s.wmu.Unlock()
	_, _ = s.out.Write(b) // a failed write: the client is gone, stdin ends next
}

func (s *server) reply(id json.RawMessage, result any) { s.send(outResponse{ID: id, Result: result}) }

func (s *server) refuse(id json.RawMessage, code int, msg string) {
	s.send(outError{ID: id, Error: rpcError{Code: code, Message: msg}})
}

func (s *server) notify(method string, params any) {
	s.send(outNotification{Method: method, Params: params})
}

// serve reads requests until stdin ends, and returns the exit code.
func (s *server) serve(in io.Reader) int {
	r := bufio.NewReader(in)
	for {
		line, err := readLine(r)
		if len(bytes.TrimSpace(line)) > 0 {
			s.handle(line)
		}
		if err != nil {
			if err != io.EOF {
				fmt.Fprintln(os.Stderr, "codexstandin: stdin:", err)
			}
			s.mu.Lock()
			if s.active != nil {
				s.active.cancel()
			}
			s.mu.Unlock()
			return 0
		}
	}
}

// readLine reads a line (without its newline) of at most maxLine bytes.
func readLine(r *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		part, err := r.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			line = append(line, part...)
			if len(line) > maxLine {
				return nil, fmt.Errorf("a line longer than %d bytes", maxLine)
			}
			continue
		}
		if line == nil {
			line = part // valid until the next read: handled before it
		} else {
			line = append(line, part...)
		}
		return bytes.TrimRight(line, "\r\n"), err
	}
}

// handle dispatches one message of the client.
func (s *server) handle(line []byte) {
	var m inMessage
	if err := json.Unmarshal(line, &m); err != nil {
		fmt.Fprintf(os.Stderr, "codexstandin: a line that is not a JSON-RPC message (%d bytes): %v\n", len(line), err)
		return
	}
	if len(m.ID) == 0 || string(m.ID) == "null" || m.Method == "" {
		return // a notification (initialized) or a response: nothing to do
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if m.Method != "initialize" && !s.initialized {
		s.refuse(m.ID, errInvalidRequest, "Not initialized")
		return
	}
	switch m.Method {
	case "initialize":
		s.initialize(m)
	case "thread/start", "thread/resume":
		s.openThread(m)
	case "turn/start":
		s.startTurn(m)
	case "turn/interrupt":
		s.interrupt(m)
	default:
		s.refuse(m.ID, errMethodNotFound, "the codex stand-in does not serve "+m.Method)
	}
}

func (s *server) initialize(m inMessage) {
	if s.initialized {
		s.refuse(m.ID, errInvalidRequest, "Already initialized")
		return
	}
	var p struct {
		ClientInfo struct {
			Name    string `json:"name"`
			Version string `json:"version"`
		} `json:"clientInfo"`
	}
	if err := json.Unmarshal(m.Params, &p); err != nil {
		s.refuse(m.ID, errInvalidParams, "initialize: "+err.Error())
		return
	}
	s.initialized = true
	s.client = p.ClientInfo.Name
	if s.client == "" {
		s.client = "codex_standin"
	}
	home := s.cfg.home
	if home == "" {
		home = "/"
	}
	s.reply(m.ID, struct {
		UserAgent      string `json:"userAgent"`
		CodexHome      string `json:"codexHome"`
		PlatformFamily string `json:"platformFamily"`
		PlatformOs     string `json:"platformOs"`
	}{fmt.Sprintf("%s/%s (codex stand-in; %s) (%s; %s)", s.client, version, runtime.GOOS, s.client, p.ClientInfo.Version),
		home, "unix", runtime.GOOS})
}

// threadParams are thread/start's and thread/resume's params read.
type threadParams struct {
	ThreadID          string          `json:"threadId"`
	Cwd               string          `json:"cwd"`
	ApprovalPolicy    json.RawMessage `json:"approvalPolicy"`
	ApprovalsReviewer string          `json:"approvalsReviewer"`
	Sandbox           string          `json:"sandbox"`
}

func (s *server) openThread(m inMessage) {
	var p threadParams
	if len(m.Params) > 0 {
		if err := json.Unmarshal(m.Params, &p); err != nil {
			s.refuse(m.ID, errInvalidParams, m.Method+": "+err.Error())
			return
		}
	}
	var th *thread
	if m.Method == "thread/resume" {
		id, err := parseUUID(p.ThreadID)
		if err != nil {
			s.refuse(m.ID, errInvalidRequest, "invalid session id: "+err.Error())
			return
		}
		if th = s.threads[id]; th == nil {
			if th = s.load(id); th == nil {
				s.refuse(m.ID, errInvalidRequest, "no rollout found for thread id "+p.ThreadID)
				return
			}
		}
	} else {
		th = &thread{ID: newUUIDv7(), CreatedAt: time.Now().Unix()}
	}
	cwd := p.Cwd
	if cwd == "" {
		cwd = th.Cwd
	}
	if cwd == "" {
		cwd, _ = os.Getwd()
	}
	if !filepath.IsAbs(cwd) {
		s.refuse(m.ID, errInvalidParams, m.Method+": cwd "+strconv.Quote(cwd)+" is not an absolute path")
		return
	}
	th.Cwd = filepath.Clean(cwd)
	s.threads[th.ID] = th
	policy := p.ApprovalPolicy
	if len(policy) == 0 || string(policy) == "null" {
		policy = json.RawMessage(`"on-request"`)
	}
	reviewer := p.ApprovalsReviewer
	if reviewer == "" {
		reviewer = "user"
	}
	preview := ""
	for _, msg := range th.Messages {
		if msg.Role == "user" {
			preview = msg.Text
			break
		}
	}
	s.reply(m.ID, threadResponse{
		Thread: wireThread{ID: th.ID, SessionID: th.ID, Preview: preview, ModelProvider: s.cfg.provider, Model: s.cfg.model,
			CreatedAt: th.CreatedAt, UpdatedAt: time.Now().Unix(), Status: threadStatus{Type: "idle"}, Cwd: th.Cwd,
			CliVersion: version, Source: "appServer", Turns: []struct{}{}},
		Model: s.cfg.model, ModelProvider: s.cfg.provider, Cwd: th.Cwd, ApprovalPolicy: policy, ApprovalsReviewer: reviewer,
		Sandbox: sandboxPolicy(p.Sandbox),
	})
}

// threadResponse is ThreadStartResponse and ThreadResumeResponse.
type threadResponse struct {
	Thread            wireThread      `json:"thread"`
	Model             string          `json:"model"`
	ModelProvider     string          `json:"modelProvider"`
	ServiceTier       *string         `json:"serviceTier"`
	Cwd               string          `json:"cwd"`
	ApprovalPolicy    json.RawMessage `json:"approvalPolicy"`
	ApprovalsReviewer string          `json:"approvalsReviewer"`
	Sandbox           threadStatus    `json:"sandbox"`
	ReasoningEffort   *string         `json:"reasoningEffort"`
}

// wireThread is the protocol's Thread: its required members.
type wireThread struct {
	ID            string       `json:"id"`
	SessionID     string       `json:"sessionId"`
	Preview       string       `json:"preview"`
	Ephemeral     bool         `json:"ephemeral"`
	ModelProvider string       `json:"modelProvider"`
	Model         string       `json:"model"`
	CreatedAt     int64        `json:"createdAt"`
	UpdatedAt     int64        `json:"updatedAt"`
	Status        threadStatus `json:"status"`
	Path          *string      `json:"path"`
	Cwd           string       `json:"cwd"`
	CliVersion    string       `json:"cliVersion"`
	Source        string       `json:"source"`
	ProjectID     *string      `json:"projectId"`
	Turns         []struct{}   `json:"turns"`
}

// threadStatus is a {"type": ...} object: a ThreadStatus or a
// SandboxPolicy.
type threadStatus struct {
	Type string `json:"type"`
}

// sandboxPolicy is the SandboxPolicy of a thread's SandboxMode.
func sandboxPolicy(mode string) threadStatus {
	switch mode {
	case "danger-full-access":
		return threadStatus{"dangerFullAccess"}
	case "workspace-write":
		return threadStatus{"workspaceWrite"}
	}
	return threadStatus{"readOnly"}
}

// parseUUID checks that id is a UUID (hyphenated or not, with an
// optional urn:uuid: prefix) and returns it in the canonical form.
func parseUUID(id string) (string, error) {
	h := strings.ToLower(strings.TrimPrefix(id, "urn:uuid:"))
	if len(h) == 36 {
		for _, i := range []int{8, 13, 18, 23} {
			if h[i] != '-' {
				return "", fmt.Errorf("%q is not a UUID", id)
			}
		}
		h = strings.ReplaceAll(h, "-", "")
	}
	if len(h) != 32 {
		return "", fmt.Errorf("%q is not a UUID", id)
	}
	for _, c := range h {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return "", fmt.Errorf("%q is not a UUID", id)
		}
	}
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:], nil
}

// newUUIDv7 is a new time-ordered id, as Codex's thread and turn ids are.
func newUUIDv7() string {
	ms := uint64(time.Now().UnixMilli())
	a, b := rand.Uint64(), rand.Uint64()
	hi := ms<<16 | 0x7000 | a&0x0fff
	lo := b&0x3fffffffffffffff | 0x8000000000000000
	return fmt.Sprintf("%08x-%04x-%04x-%04x-%012x", hi>>32, hi>>16&0xffff, hi&0xffff, lo>>48, lo&0xffffffffffff)
}

// threadFile is where a thread is kept.
func (s *server) threadFile(id string) string {
	return filepath.Join(s.cfg.home, "standin", id+".json")
}

// load reads a kept thread; nil when there is none.
func (s *server) load(id string) *thread {
	if s.cfg.home == "" {
		return nil
	}
	b, err := os.ReadFile(s.threadFile(id))
	if err != nil {
		return nil
	}
	var th thread
	if err := json.Unmarshal(b, &th); err != nil || th.ID != id {
		fmt.Fprintf(os.Stderr, "codexstandin: %s: not a kept thread\n", s.threadFile(id))
		return nil
	}
	return &th
}

// save keeps a thread for a later thread/resume.
func (s *server) save(th *thread) {
	if s.cfg.home == "" {
		return
	}
	b, err := json.Marshal(th)
	if err == nil {
		err = os.MkdirAll(filepath.Dir(s.threadFile(th.ID)), 0o700)
	}
	if err == nil {
		tmp := s.threadFile(th.ID) + ".tmp"
		if err = os.WriteFile(tmp, b, 0o600); err == nil {
			err = os.Rename(tmp, s.threadFile(th.ID))
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "codexstandin: keep the thread:", err)
	}
}

// wireTurn is the protocol's Turn.
type wireTurn struct {
	ID          string     `json:"id"`
	Items       []any      `json:"items"`
	ItemsView   string     `json:"itemsView"`
	Status      string     `json:"status"`
	Error       *turnError `json:"error"`
	StartedAt   *int64     `json:"startedAt"`
	CompletedAt *int64     `json:"completedAt"`
	DurationMs  *int64     `json:"durationMs"`
}

// turnError is the protocol's TurnError.
type turnError struct {
	Message           string  `json:"message"`
	CodexErrorInfo    any     `json:"codexErrorInfo"`
	AdditionalDetails *string `json:"additionalDetails"`
}

type turnNotification struct {
	ThreadID string   `json:"threadId"`
	Turn     wireTurn `json:"turn"`
}

func (s *server) startTurn(m inMessage) {
	var p struct {
		ThreadID string `json:"threadId"`
		Input    []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"input"`
	}
	if err := json.Unmarshal(m.Params, &p); err != nil {
		s.refuse(m.ID, errInvalidParams, "turn/start: "+err.Error())
		return
	}
	th := s.threads[p.ThreadID]
	if th == nil {
		s.refuse(m.ID, errInvalidRequest, "thread not found: "+p.ThreadID)
		return
	}
	if s.active != nil {
		s.refuse(m.ID, errInvalidRequest, "the codex stand-in runs one turn at a time; turn "+s.active.id+" is running")
		return
	}
	var texts []string
	for _, in := range p.Input {
		if in.Type != "text" {
			s.refuse(m.ID, errInvalidParams, "the codex stand-in takes text input only, not "+strconv.Quote(in.Type))
			return
		}
		texts = append(texts, in.Text)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t := &turn{id: newUUIDv7(), th: th, start: time.Now(), cancel: cancel, prompt: strings.Join(texts, "\n")}
	s.active = t
	s.reply(m.ID, struct {
		Turn wireTurn `json:"turn"`
	}{wireTurn{ID: t.id, Items: []any{}, ItemsView: "notLoaded", Status: turnInProgress}})
	started := t.start.Unix()
	s.notify("turn/started", turnNotification{ThreadID: th.ID,
		Turn: wireTurn{ID: t.id, Items: []any{}, ItemsView: "notLoaded", Status: turnInProgress, StartedAt: &started}})
	go s.run(ctx, t)
}

func (s *server) interrupt(m inMessage) {
	var p struct {
		ThreadID string `json:"threadId"`
		TurnID   string `json:"turnId"`
	}
	if err := json.Unmarshal(m.Params, &p); err != nil {
		s.refuse(m.ID, errInvalidParams, "turn/interrupt: "+err.Error())
		return
	}
	t := s.active
	if t == nil || t.th.ID != p.ThreadID || t.id != p.TurnID {
		s.refuse(m.ID, errInvalidRequest, "no running turn "+p.TurnID+" in thread "+p.ThreadID)
		return
	}
	// Under s.mu: the turn ends after this answer, and interrupted.
	t.interrupted = true
	s.reply(m.ID, struct{}{})
	t.cancel()
}

// agentItem is the protocol's AgentMessage ThreadItem.
type agentItem struct {
	Type  string  `json:"type"`
	ID    string  `json:"id"`
	Text  string  `json:"text"`
	Phase *string `json:"phase"`
}

// reasoningItem is the protocol's Reasoning ThreadItem.
type reasoningItem struct {
	Type    string   `json:"type"`
	ID      string   `json:"id"`
	Summary []string `json:"summary"`
	Content []string `json:"content"`
}

type itemStarted struct {
	Item        any    `json:"item"`
	ThreadID    string `json:"threadId"`
	TurnID      string `json:"turnId"`
	StartedAtMs int64  `json:"startedAtMs"`
}

type itemCompleted struct {
	Item          any    `json:"item"`
	ThreadID      string `json:"threadId"`
	TurnID        string `json:"turnId"`
	CompletedAtMs int64  `json:"completedAtMs"`
}

type deltaParams struct {
	ThreadID string `json:"threadId"`
	TurnID   string `json:"turnId"`
	ItemID   string `json:"itemId"`
	Delta    string `json:"delta"`
}

type summaryDeltaParams struct {
	ThreadID     string `json:"threadId"`
	TurnID       string `json:"turnId"`
	ItemID       string `json:"itemId"`
	Delta        string `json:"delta"`
	SummaryIndex int64  `json:"summaryIndex"`
}

// outcome is how the model request ended: err nil when it completed.
type outcome struct {
	err   *turnError
	items []any // the agent messages, for turn/completed
	texts []string
}

// run streams the turn's model request, then ends the turn.
func (s *server) run(ctx context.Context, t *turn) {
	o := s.stream(ctx, t)
	s.mu.Lock()
	defer s.mu.Unlock()
	// Cancelled: by turn/interrupt, or stdin ended (the stand-in exits).
	cancelled := t.interrupted || ctx.Err() != nil
	t.cancel()
	th := t.th
	th.Messages = append(th.Messages, message{Role: "user", Text: t.prompt})
	for _, text := range o.texts {
		th.Messages = append(th.Messages, message{Role: "assistant", Text: text})
	}
	s.save(th)
	started, now := t.start.Unix(), time.Now()
	done, took := now.Unix(), now.Sub(t.start).Milliseconds()
	wt := wireTurn{ID: t.id, Items: []any{}, ItemsView: "notLoaded", StartedAt: &started, CompletedAt: &done, DurationMs: &took}
	switch {
	case cancelled:
		wt.Status = turnInterrupted
	case o.err != nil:
		wt.Status, wt.Error = turnFailed, o.err
		s.notify("error", struct {
			Error     *turnError `json:"error"`
			WillRetry bool       `json:"willRetry"`
			ThreadID  string     `json:"threadId"`
			TurnID    string     `json:"turnId"`
		}{o.err, false, th.ID, t.id})
	default:
		wt.Status, wt.Items, wt.ItemsView = turnCompleted, o.items, "summary"
	}
	s.notify("turn/completed", turnNotification{ThreadID: th.ID, Turn: wt})
	s.active = nil
}

// failure is a TurnError with the given CodexErrorInfo.
func failure(info any, format string, args ...any) *turnError {
	return &turnError{Message: fmt.Sprintf(format, args...), CodexErrorInfo: info}
}

// disconnected is the message of a stream cut before its end, as Codex
// words it.
const disconnected = "stream disconnected before completion: "

// stream makes the turn's model request and turns its events into
// notifications.
func (s *server) stream(ctx context.Context, t *turn) outcome {
	if s.cfg.baseURL == "" {
		return outcome{err: failure("other", "the codex stand-in has no model_providers.%s.base_url: it reaches no real provider", s.cfg.provider)}
	}
	key := os.Getenv(s.cfg.envKey)
	if key == "" {
		return outcome{err: failure("other", "Missing environment variable: `%s`.", s.cfg.envKey)}
	}
	body, err := s.requestBody(t)
	if err != nil {
		return outcome{err: failure("other", "the codex stand-in could not encode its request: %v", err)}
	}
	meta, _ := json.Marshal(map[string]string{"session_id": t.th.ID, "thread_id": t.th.ID, "turn_id": t.id, "request_kind": "turn"})
	resp, err := post(ctx, s.cfg.baseURL+"/responses", [][2]string{
		{"Authorization", "Bearer " + key},
		{"Content-Type", "application/json"},
		{"Accept", "text/event-stream"},
		{"Originator", s.client},
		{"User-Agent", s.client + "/" + version + " (codex stand-in)"},
		{"Session-Id", t.th.ID},
		{"Thread-Id", t.th.ID},
		{"X-Codex-Turn-Metadata", string(meta)},
	}, body)
	if err != nil {
		if ctx.Err() != nil {
			return outcome{}
		}
		return outcome{err: failure(map[string]any{"httpConnectionFailed": map[string]any{"httpStatusCode": nil}},
			"the codex stand-in could not POST %s/responses: %v", s.cfg.baseURL, err)}
	}
	defer resp.close()
	if resp.status != 200 {
		return outcome{err: statusError(resp)}
	}
	return s.events(ctx, t, bufio.NewReader(resp.body))
}

// statusError is the TurnError of an HTTP error answer, as Codex 0.169.0
// (with no retries) reports the fake model's.
func statusError(r *response) *turnError {
	b, _ := io.ReadAll(io.LimitReader(r.body, 64<<10))
	switch {
	case r.status == 429:
		return failure(map[string]any{"responseTooManyFailedAttempts": map[string]any{"httpStatusCode": r.status}},
			"exceeded retry limit, last status: %d %s", r.status, r.reason)
	case r.status >= 500:
		return failure("internalServerError", "We’re currently experiencing high demand, which may cause temporary errors.")
	case len(bytes.TrimSpace(b)) == 0:
		return failure("other", "unexpected status %d %s", r.status, r.reason)
	}
	return failure("other", "%s", b)
}

// requestBody is the Responses API request of the turn: the thread's
// texts so far and the prompt, streamed, no tools.
func (s *server) requestBody(t *turn) ([]byte, error) {
	type part struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	type item struct {
		Type    string `json:"type"`
		Role    string `json:"role"`
		Content []part `json:"content"`
	}
	input := make([]item, 0, len(t.th.Messages)+1)
	for _, m := range t.th.Messages {
		kind := "input_text"
		if m.Role == "assistant" {
			kind = "output_text"
		}
		input = append(input, item{Type: "message", Role: m.Role, Content: []part{{kind, m.Text}}})
	}
	input = append(input, item{Type: "message", Role: "user", Content: []part{{"input_text", t.prompt}}})
	return json.Marshal(struct {
		Model             string     `json:"model"`
		Instructions      string     `json:"instructions"`
		Input             []item     `json:"input"`
		Tools             []struct{} `json:"tools"`
		ToolChoice        string     `json:"tool_choice"`
		ParallelToolCalls bool       `json:"parallel_tool_calls"`
		Store             bool       `json:"store"`
		Stream            bool       `json:"stream"`
		PromptCacheKey    string     `json:"prompt_cache_key"`
	}{s.cfg.model, "You are a test stand-in for a coding agent.", input, []struct{}{}, "auto", false, false, true, t.th.ID})
}

// sseEvent is the part of a Responses API stream event read.
type sseEvent struct {
	Type         string `json:"type"`
	ItemID       string `json:"item_id"`
	Delta        string `json:"delta"`
	SummaryIndex int64  `json:"summary_index"`
	Item         *struct {
		Type    string `json:"type"`
		ID      string `json:"id"`
		Name    string `json:"name"`
		Content []struct {
			Text string `json:"text"`
		} `json:"content"`
		Summary []struct {
			Text string `json:"text"`
		} `json:"summary"`
	} `json:"item"`
	Response *struct {
		Usage *struct {
			InputTokens        int64 `json:"input_tokens"`
			InputTokensDetails struct {
				CachedTokens int64 `json:"cached_tokens"`
			} `json:"input_tokens_details"`
			OutputTokens        int64 `json:"output_tokens"`
			OutputTokensDetails struct {
				ReasoningTokens int64 `json:"reasoning_tokens"`
			} `json:"output_tokens_details"`
			TotalTokens int64 `json:"total_tokens"`
		} `json:"usage"`
		Error *struct {
			Message string `json:"message"`
		} `json:"error"`
		IncompleteDetails *struct {
			Reason string `json:"reason"`
		} `json:"incomplete_details"`
	} `json:"response"`
	Message string `json:"message"` // an error event's
}

// events reads the model's SSE stream to its end.
func (s *server) events(ctx context.Context, t *turn, r *bufio.Reader) outcome {
	var o outcome
	th := t.th
	type open struct {
		reasoning bool
		text      strings.Builder
		started   int64
	}
	items := map[string]*open{}
	var data []byte
	for {
		line, err := readLine(r)
		if err != nil {
			switch {
			case ctx.Err() != nil:
			case errors.Is(err, io.EOF):
				o.err = failure("other", disconnected+"stream closed before response.completed")
			default:
				o.err = failure("other", disconnected+"Transport error: network error: error decoding response body")
			}
			return o
		}
		if v, ok := bytes.CutPrefix(line, []byte("data:")); ok {
			data = append(data, bytes.TrimPrefix(v, []byte(" "))...)
			continue
		}
		if len(line) != 0 || len(data) == 0 {
			continue // event:, id:, comments; or a blank line after nothing
		}
		var e sseEvent
		err = json.Unmarshal(data, &e)
		data = data[:0]
		if err != nil {
			o.err = failure("other", disconnected+"the model sent an event that is not JSON: %v", err)
			return o
		}
		now := time.Now().UnixMilli()
		switch e.Type {
		case "response.output_item.added":
			if e.Item == nil {
				continue
			}
			switch e.Item.Type {
			case "message":
				items[e.Item.ID] = &open{started: now}
				s.notify("item/started", itemStarted{agentItem{Type: "agentMessage", ID: e.Item.ID}, th.ID, t.id, now})
			case "reasoning":
				items[e.Item.ID] = &open{reasoning: true, started: now}
				s.notify("item/started", itemStarted{reasoningItem{"reasoning", e.Item.ID, []string{}, []string{}}, th.ID, t.id, now})
			default:
				name := e.Item.Name
				if name == "" {
					name = e.Item.Type
				}
				o.err = failure("other", "the model called the tool %s, and the codex stand-in runs no tools", name)
				return o
			}
		case "response.output_text.delta":
			if it := items[e.ItemID]; it != nil && !it.reasoning {
				it.text.WriteString(e.Delta)
				s.notify("item/agentMessage/delta", deltaParams{th.ID, t.id, e.ItemID, e.Delta})
			}
		case "response.reasoning_summary_text.delta":
			if it := items[e.ItemID]; it != nil && it.reasoning {
				it.text.WriteString(e.Delta)
				s.notify("item/reasoning/summaryTextDelta", summaryDeltaParams{th.ID, t.id, e.ItemID, e.Delta, e.SummaryIndex})
			}
		case "response.output_item.done":
			if e.Item == nil || items[e.Item.ID] == nil {
				continue
			}
			it := items[e.Item.ID]
			delete(items, e.Item.ID)
			text := it.text.String()
			if it.reasoning {
				summary := []string{}
				if text != "" {
					summary = append(summary, text)
				}
				s.notify("item/completed", itemCompleted{reasoningItem{"reasoning", e.Item.ID, summary, []string{}}, th.ID, t.id, now})
				continue
			}
			if text == "" {
				for _, c := range e.Item.Content {
					text += c.Text
				}
			}
			ai := agentItem{Type: "agentMessage", ID: e.Item.ID, Text: text}
			o.items = append(o.items, ai)
			o.texts = append(o.texts, text)
			s.notify("item/completed", itemCompleted{ai, th.ID, t.id, now})
		case "response.completed":
			if e.Response != nil && e.Response.Usage != nil {
				u := e.Response.Usage
				last := tokens{TotalTokens: u.TotalTokens, InputTokens: u.InputTokens, CachedInputTokens: u.InputTokensDetails.CachedTokens,
					OutputTokens: u.OutputTokens, ReasoningOutputTokens: u.OutputTokensDetails.ReasoningTokens}
				s.mu.Lock()
				th.Total = th.Total.plus(last)
				total := th.Total
				s.mu.Unlock()
				s.notify("thread/tokenUsage/updated", struct {
					ThreadID   string `json:"threadId"`
					TurnID     string `json:"turnId"`
					TokenUsage struct {
						Total tokens `json:"total"`
						Last  tokens `json:"last"`
					} `json:"tokenUsage"`
				}{th.ID, t.id, struct {
					Total tokens `json:"total"`
					Last  tokens `json:"last"`
				}{total, last}})
			}
			return o
		case "response.failed", "error":
			msg := e.Message
			if e.Response != nil && e.Response.Error != nil {
				msg = e.Response.Error.Message
			}
			o.err = failure("other", disconnected+"%s", msg)
			return o
		case "response.incomplete":
			why := ""
			if e.Response != nil && e.Response.IncompleteDetails != nil {
				why = e.Response.IncompleteDetails.Reason
			}
			o.err = failure("other", "Incomplete response returned, reason: %s", why)
			return o
		}
	}
}

// response is an HTTP response being read.
type response struct {
	status int
	reason string
	body   io.Reader
	close  func()
}

// post sends an HTTP/1.1 POST of body to rawURL (http only) and reads the
// response's head. Cancelling ctx closes the connection.
func post(ctx context.Context, rawURL string, header [][2]string, body []byte) (*response, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, err
	}
	if u.Scheme != "http" {
		return nil, fmt.Errorf("%s: the codex stand-in speaks plain http only", rawURL)
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), "80")
	}
	d := net.Dialer{Timeout: 30 * time.Second}
	conn, err := d.DialContext(ctx, "tcp", host)
	if err != nil {
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	closeConn := func() { stop(); conn.Close() }
	var req bytes.Buffer
	fmt.Fprintf(&req, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\nConnection: close\r\n", u.RequestURI(), u.Host, len(body))
	for _, h := range header {
		fmt.Fprintf(&req, "%s: %s\r\n", h[0], h[1])
	}
	req.WriteString("\r\n")
	req.Write(body)
	if _, err := conn.Write(req.Bytes()); err != nil {
		closeConn()
		return nil, err
	}
	br := bufio.NewReader(conn)
	line, err := readLine(br)
	if err != nil {
		closeConn()
		return nil, fmt.Errorf("reading the response: %w", err)
	}
	proto, rest, _ := strings.Cut(string(line), " ")
	code, reason, _ := strings.Cut(rest, " ")
	status, err := strconv.Atoi(code)
	if !strings.HasPrefix(proto, "HTTP/1.") || err != nil {
		closeConn()
		return nil, fmt.Errorf("not an HTTP/1 status line: %q", line)
	}
	r := &response{status: status, reason: reason, close: closeConn}
	length := int64(-1)
	chunked := false
	for {
		line, err := readLine(br)
		if err != nil {
			closeConn()
			return nil, fmt.Errorf("reading the response's header: %w", err)
		}
		if len(line) == 0 {
			break
		}
		k, v, _ := strings.Cut(string(line), ":")
		v = strings.TrimSpace(v)
		switch strings.ToLower(strings.TrimSpace(k)) {
		case "content-length":
			length, _ = strconv.ParseInt(v, 10, 64)
		case "transfer-encoding":
			chunked = strings.EqualFold(v, "chunked")
		}
	}
	switch {
	case chunked:
		r.body = &chunkedReader{r: br}
	case length >= 0:
		r.body = io.LimitReader(br, length)
	default:
		r.body = br // to the connection's end (Connection: close)
	}
	return r, nil
}

// chunkedReader decodes a chunked transfer-coded body. A body cut before
// its last chunk is io.ErrUnexpectedEOF.
type chunkedReader struct {
	r   *bufio.Reader
	n   int64 // left of the current chunk
	err error
}

func (c *chunkedReader) Read(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	if c.n == 0 {
		line, err := readLine(c.r)
		if err != nil {
			return 0, c.fail(err)
		}
		size, _, _ := bytes.Cut(line, []byte(";"))
		n, err := strconv.ParseInt(string(bytes.TrimSpace(size)), 16, 64)
		if err != nil || n < 0 {
			c.err = fmt.Errorf("a bad chunk size %q", line)
			return 0, c.err
		}
		if n == 0 {
			for { // trailers, to the blank line
				line, err := readLine(c.r)
				if err != nil {
					return 0, c.fail(err)
				}
				if len(line) == 0 {
					break
				}
			}
			c.err = io.EOF
			return 0, c.err
		}
		c.n = n
	}
	if int64(len(p)) > c.n {
		p = p[:c.n]
	}
	n, err := c.r.Read(p)
	c.n -= int64(n)
	if err != nil {
		return n, c.fail(err)
	}
	if c.n == 0 {
		if _, err := readLine(c.r); err != nil { // the chunk's CRLF
			return n, c.fail(err)
		}
	}
	return n, nil
}

func (c *chunkedReader) fail(err error) error {
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	c.err = err
	return err
}
