package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/nlx-dev/nlx/isolate"
	"github.com/nlx-dev/nlx/launch"
	"github.com/nlx-dev/nlx/provider"
	"github.com/nlx-dev/nlx/turn"
)

type turnOptions struct {
	workspace      string
	connection     string
	actor          string
	key            string
	conversation   string
	resume         bool
	fallback       string
	permissionWait time.Duration
	idleTimeout    time.Duration
	timeout        time.Duration
	revalidate     time.Duration
	backend        string
}

func newTurnCmd(a *app) *cobra.Command {
	opts := &turnOptions{}
	cmd := &cobra.Command{
		Use:   "turn --workspace W --connection C [--actor A] [--resume] PROMPT...",
		Short: "Run one provider turn of a workspace and connection, from the applied state",
		Long: `Turn runs one turn of the connection's provider (the real Codex app-server or
Claude Code) in workspace W's sandbox, exactly as nlx exec would launch it:
from the applied state only, never a config directory. The binding (actor,
connection, credential owner, provider, billing, generation, policy, launch)
is recorded before the provider starts and checked again every
--revalidate-every and after every permission decision: an actor removed
from the workspace, a connection whose generation changed or a provider
disabled interrupts the turn (membership_revoked,
credential_generation_changed, provider_revoked).

The text view streams the assistant's text on stdout and what happens
around it (tools, permission requests, notes) on stderr; --output json
prints the normalized events, one JSON object per line, the result last.

Every permission request of the provider is stored before nlx answers it.
The actor of a personal workspace decides it; an admin of a team workspace
decides it (nlx permissions allow|deny ID --actor A). On a terminal nlx
asks right there when the actor may decide; otherwise the request waits
--permission-wait for a decision and is then denied. A non-interactive
turn (--permission-wait 0, the default off a terminal) never widens: it
denies, records permission_required and ends blocked (exit 3).

--resume continues the conversation's native session (Codex thread,
Claude session); if the provider refuses it, the turn continues from the
summary nlx keeps of the conversation and says so. A connection whose
provider is disabled is refused (disabled_requested_provider) unless
--fallback-connection names one of the same workspace; the turn then
records the requested and the effective provider and why.

The connection's secret (env:NAME from nlx's environment, file:PATH) is
read at launch and handed to the provider in its own variable; it never
reaches the state, a log or an event. Ctrl-C interrupts the turn the
provider's way; a completion that arrives after that is recorded as
stale, never as the result.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return turnRun(cmd.Context(), a, opts, args)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.workspace, "workspace", "", "workspace (required)")
	f.StringVar(&opts.connection, "connection", "", "connection of that workspace (required)")
	f.StringVar(&opts.actor, "actor", "", "who runs the turn, proven by the OS user or --key (default $NLX_ACTOR, else the actor the OS user proves)")
	keyFlag(cmd, &opts.key)
	f.StringVar(&opts.conversation, "conversation", turn.DefaultConversation, "the conversation of the workspace and connection the turn belongs to")
	f.BoolVar(&opts.resume, "resume", false, "continue the conversation's session")
	f.StringVar(&opts.fallback, "fallback-connection", "", "a connection of the same workspace to run on when the connection's provider is disabled")
	f.DurationVar(&opts.permissionWait, "permission-wait", -1, "how long a permission request waits for a decision (default 5m on a terminal, else 0: denied at once)")
	f.DurationVar(&opts.idleTimeout, "idle-timeout", 10*time.Minute, "interrupt the turn when the provider sends nothing this long (0: never)")
	f.DurationVar(&opts.timeout, "timeout", 0, "interrupt the turn after this long (0: never)")
	f.DurationVar(&opts.revalidate, "revalidate-every", turn.DefaultRevalidate, "how often the binding is checked against the applied state while the turn runs")
	f.StringVar(&opts.backend, "backend", "", "bwrap or runc (default: bwrap where it works, else runc)")
	_ = cmd.MarkFlagRequired("workspace")
	_ = cmd.MarkFlagRequired("connection")
	return cmd
}

func turnRun(ctx context.Context, a *app, opts *turnOptions, args []string) error {
	prompt := strings.Join(args, " ")
	if prompt == "-" {
		data, err := io.ReadAll(io.LimitReader(a.io.In, 1<<20))
		if err != nil {
			return fmt.Errorf("read the prompt: %w", err)
		}
		prompt = string(data)
	}
	db, err := a.openState(ctx, true)
	if err != nil {
		return err
	}
	defer db.Close()
	r, err := runner(db, nil)
	if err != nil {
		return err
	}
	actor, err := actingActor(ctx, db, opts.actor, opts.key)
	if err != nil {
		return err
	}
	interactive := a.io.InTerminal && a.io.ErrTerminal && prompt != ""
	req := turn.Request{
		Workspace: opts.workspace, Connection: opts.connection, Actor: actor,
		Conversation: opts.conversation, Resume: opts.resume, Fallback: opts.fallback, Prompt: prompt,
		PermissionWait: opts.permissionWait, IdleTimeout: opts.idleTimeout, Timeout: opts.timeout,
		Revalidate: opts.revalidate, HostEnv: os.Environ(), Backend: isolate.Backend(opts.backend),
	}
	if req.PermissionWait < 0 {
		req.PermissionWait = 0
		if interactive {
			req.PermissionWait = 5 * time.Minute
		}
	}
	if interactive {
		req.Ask = a.askPermission
	}
	if reaped, err := launch.ReapGone(ctx, launch.Recorder{DB: db}); err == nil {
		for _, id := range reaped {
			fmt.Fprintf(a.io.Err, "nlx: launch %s had ended unrecorded (the nlx that ran it died); its receipt is written\n", id)
		}
	}
	var out *turn.Outcome
	run := func(emit func(provider.Event)) error {
		var err error
		out, err = r.Run(ctx, req, emit)
		return err
	}
	err = a.view.Render(document{
		EncodeJSON: func(w io.Writer) error {
			enc := json.NewEncoder(w)
			return run(func(e provider.Event) {
				enc.Encode(struct {
					Version int `json:"format_version"`
					provider.Event
				}{versionTurnEvent, e})
			})
		},
		Text: func(w io.Writer) error { return run(a.turnText(w)) },
	})
	if err != nil {
		return err
	}
	return out.Err()
}

// turnText prints events for people: the assistant's text on w as it
// streams, the rest on stderr.
func (a *app) turnText(w io.Writer) func(provider.Event) {
	atLineStart := true
	var mu sync.Mutex
	say := func(format string, args ...any) {
		if !atLineStart {
			fmt.Fprintln(w)
			atLineStart = true
		}
		fmt.Fprintf(a.io.Err, "nlx: "+format+"\n", args...)
	}
	return func(e provider.Event) {
		mu.Lock()
		defer mu.Unlock()
		switch e.Type {
		case provider.EventText:
			fmt.Fprint(w, e.Text)
			atLineStart = strings.HasSuffix(e.Text, "\n")
		case provider.EventToolStart:
			say("tool %s: %s", e.Tool.Name, oneLine(e.Tool.Input))
		case provider.EventToolEnd:
			say("tool %s %s", e.Tool.Name, e.Tool.Status)
		case provider.EventPermission:
			p := e.Permission
			if p.Decision == nil {
				say("permission %s: %s %s (waiting for a decision: nlx permissions allow|deny %s)", p.ID, p.Kind, oneLine(permissionSubject(p)), p.ID)
			} else if p.Decision.Allow {
				say("permission %s allowed by %s", p.ID, p.Decision.By)
			} else {
				say("permission %s denied by %s: %s", p.ID, p.Decision.By, p.Decision.Reason)
			}
		case provider.EventNote:
			say("%s", e.Text)
		case provider.EventStale:
			say("stale (after the interrupt, not the result): %s", oneLine(e.Text))
		case provider.EventResult:
			if !atLineStart {
				fmt.Fprintln(w)
				atLineStart = true
			}
			if e.Result.Text == "" && e.Result.Status == provider.StatusCompleted {
				fmt.Fprintln(a.io.Err, "nlx: the turn completed without text")
			}
		}
	}
}

func permissionSubject(p *provider.Permission) string {
	if p.Command != "" {
		return p.Command
	}
	if len(p.Paths) > 0 {
		return strings.Join(p.Paths, ", ")
	}
	return p.Tool
}

func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 160 {
		s = s[:157] + "..."
	}
	return s
}

// askMu keeps two prompts off the terminal at once.
var askMu sync.Mutex

// askPermission asks the person at the terminal about p: y allows, n or
// an empty line denies; the end of the wait leaves it unanswered.
func (a *app) askPermission(ctx context.Context, p provider.Permission) (allow, answered bool) {
	askMu.Lock()
	defer askMu.Unlock()
	fmt.Fprintf(a.io.Err, "nlx: allow %s %s? [y/N] ", p.Kind, oneLine(permissionSubject(&p)))
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(a.io.In).ReadString('\n')
		line <- s
	}()
	select {
	case s := <-line:
		if ctx.Err() != nil {
			return false, false
		}
		s = strings.ToLower(strings.TrimSpace(s))
		return s == "y" || s == "yes", true
	case <-ctx.Done():
		fmt.Fprintln(a.io.Err)
		return false, false
	}
}
