package codex

import (
	"encoding/json"

	"github.com/nlx-dev/nlx/internal/jsonrpc"
	"github.com/nlx-dev/nlx/provider"
)

// The wire types of the app-server protocol this adapter uses, as
// testdata/schema/codex_app_server_protocol.schemas.json (0.169.0)
// defines them. Only the members the adapter reads or sends are declared;
// unknown members are ignored.

// method is a JSON-RPC method name.
type method string

// The client's requests and notifications.
const (
	methodInitialize    method = "initialize"
	methodInitialized   method = "initialized"
	methodThreadStart   method = "thread/start"
	methodThreadResume  method = "thread/resume"
	methodTurnStart     method = "turn/start"
	methodTurnInterrupt method = "turn/interrupt"
)

// The server's notifications the adapter reads.
const (
	notifyTurnStarted       method = "turn/started"
	notifyTurnCompleted     method = "turn/completed"
	notifyItemStarted       method = "item/started"
	notifyItemCompleted     method = "item/completed"
	notifyAgentMessageDelta method = "item/agentMessage/delta"
	notifyReasoningSummary  method = "item/reasoning/summaryTextDelta"
	notifyReasoningText     method = "item/reasoning/textDelta"
	notifyCommandOutput     method = "item/commandExecution/outputDelta"
	notifyFileChangeOutput  method = "item/fileChange/outputDelta"
	notifyTokenUsage        method = "thread/tokenUsage/updated"
	// Spelled as a conversion: internal/reason's test takes a constant
	// whose literal is "error" for a redefinition of reason.Failure.
	notifyError = method("error")
)

// The server's requests the adapter answers other than with a JSON-RPC
// error (the schema's ServerRequest also has item/tool/requestUserInput,
// account/chatgptAuthTokens/refresh and attestation/generate).
const (
	requestCommandApproval    method = "item/commandExecution/requestApproval"
	requestFileChangeApproval method = "item/fileChange/requestApproval"
	requestElicitation        method = "mcpServer/elicitation/request"
	requestPermissions        method = "item/permissions/requestApproval"
	requestDynamicToolCall    method = "item/tool/call"
	requestLegacyPatch        method = "applyPatchApproval"
	requestLegacyExec         method = "execCommandApproval"
)

// message is any JSON-RPC message: a request (ID and Method), a
// notification (Method only) or a response (ID, and Result or Error).
type message struct {
	ID     json.RawMessage `json:"id,omitempty"`
	Method method          `json:"method,omitempty"`
	Params json.RawMessage `json:"params,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  *rpcError       `json:"error,omitempty"`
}

// request is a request the client sends.
type request struct {
	Method method `json:"method"`
	ID     int64  `json:"id"`
	Params any    `json:"params"`
}

// notification is a notification the client sends.
type notification struct {
	Method method `json:"method"`
}

// response answers a server request: Result or Error.
type response struct {
	ID     json.RawMessage `json:"id"`
	Result any             `json:"result,omitempty"`
	Error  *rpcError       `json:"error,omitempty"`
}

// rpcError is a JSON-RPC error.
type rpcError = jsonrpc.Error

// The JSON-RPC error codes the adapter answers with: a request it does
// not serve, a request whose params it cannot read.
const (
	errMethodNotFound = jsonrpc.MethodNotFound
	errInvalidParams  = jsonrpc.InvalidParams
)

// approvalPolicy is Codex's AskForApproval.
type approvalPolicy string

// The approval policies used. Under untrusted Codex asks before every
// command that is not explicitly allowed by an exec policy rule (nlx adds
// none; ls, cat and pwd were asked for in 0.169.0) and before every file
// change; under never it asks for nothing.
const (
	approvalUntrusted approvalPolicy = "untrusted"
	approvalNever     approvalPolicy = "never"
)

// sandboxMode is Codex's SandboxMode (thread/start, thread/resume).
type sandboxMode string

// sandboxNone makes Codex run its commands without a sandbox of its own:
// nlx's sandbox holds the whole program. SandboxMode has no external
// value; turn/start's sandboxPolicy then says externalSandbox.
const sandboxNone sandboxMode = "danger-full-access"

// sandboxPolicyType is the type of Codex's SandboxPolicy (turn/start).
type sandboxPolicyType string

// sandboxExternal tells Codex it runs inside a sandbox it does not
// enforce (the model is told its filesystem is "external").
const sandboxExternal sandboxPolicyType = "externalSandbox"

// networkAccess is an externalSandbox's networkAccess.
type networkAccess string

// networkEnabled: Codex enforces nothing of the network under an external
// sandbox; nlx's sandbox decides what the program reaches, and Codex is
// not to ask for network approvals nlx could not grant.
const networkEnabled networkAccess = "enabled"

// approvalsReviewer is who Codex routes approval requests to.
type approvalsReviewer string

// reviewerUser routes every approval request to the client (never to
// Codex's auto-review subagent, whatever a config says).
const reviewerUser approvalsReviewer = "user"

// decision is the decision of an approval response.
type decision string

// The decisions sent: nlx never accepts for a session nor amends Codex's
// exec policy, and declines rather than cancels (the model goes on,
// told the command was rejected).
const (
	decisionAccept  decision = "accept"
	decisionDecline decision = "decline"
)

type clientInfo struct {
	Name    string `json:"name"`
	Title   string `json:"title"`
	Version string `json:"version"`
}

type initializeParams struct {
	ClientInfo   clientInfo              `json:"clientInfo"`
	Capabilities *initializeCapabilities `json:"capabilities,omitempty"`
}

type initializeCapabilities struct {
	OptOutNotificationMethods []method `json:"optOutNotificationMethods,omitempty"`
}

type threadStartParams struct {
	Cwd               string            `json:"cwd,omitempty"`
	ApprovalPolicy    approvalPolicy    `json:"approvalPolicy"`
	ApprovalsReviewer approvalsReviewer `json:"approvalsReviewer"`
	Sandbox           sandboxMode       `json:"sandbox"`
}

type threadResumeParams struct {
	ThreadID          string            `json:"threadId"`
	Cwd               string            `json:"cwd,omitempty"`
	ApprovalPolicy    approvalPolicy    `json:"approvalPolicy"`
	ApprovalsReviewer approvalsReviewer `json:"approvalsReviewer"`
	Sandbox           sandboxMode       `json:"sandbox"`
	ExcludeTurns      bool              `json:"excludeTurns"`
}

type sandboxPolicy struct {
	Type          sandboxPolicyType `json:"type"`
	NetworkAccess networkAccess     `json:"networkAccess,omitempty"`
}

// inputType is a UserInput's type.
type inputType string

// inputText is a text input (the prompt).
const inputText inputType = "text"

type userInput struct {
	Type inputType `json:"type"`
	Text string    `json:"text"`
}

type turnStartParams struct {
	ThreadID          string            `json:"threadId"`
	Input             []userInput       `json:"input"`
	Cwd               string            `json:"cwd,omitempty"`
	ApprovalPolicy    approvalPolicy    `json:"approvalPolicy"`
	ApprovalsReviewer approvalsReviewer `json:"approvalsReviewer"`
	SandboxPolicy     sandboxPolicy     `json:"sandboxPolicy"`
}

type turnInterruptParams struct {
	ThreadID string `json:"threadId"`
	TurnID   string `json:"turnId"`
}

// threadResult is the part of thread/start's and thread/resume's result
// read.
type threadResult struct {
	Thread struct {
		ID string `json:"id"`
	} `json:"thread"`
}

// turnStatus is a Turn's status (the schema's v2 TurnStatus).
type turnStatus string

// The turn statuses an ended turn has. Codex spells them as
// provider.Status does, whose spelling internal/constcheck lets be
// written once: they are conversions, checked against the schema by
// TestWireEnums.
const (
	turnCompleted   = turnStatus(provider.StatusCompleted)
	turnInterrupted = turnStatus(provider.StatusInterrupted)
	turnFailed      = turnStatus(provider.StatusFailed)
)

type turnError struct {
	Message           string `json:"message"`
	AdditionalDetails string `json:"additionalDetails"`
}

type wireTurn struct {
	ID     string     `json:"id"`
	Status turnStatus `json:"status"`
	Error  *turnError `json:"error"`
	Items  []wireItem `json:"items"`
}

// turnResult is turn/start's result.
type turnResult struct {
	Turn wireTurn `json:"turn"`
}

// turnNotification is turn/started's and turn/completed's params.
type turnNotification struct {
	ThreadID string   `json:"threadId"`
	Turn     wireTurn `json:"turn"`
}

// itemType is a ThreadItem's type.
type itemType string

// The item types the adapter maps to events.
const (
	itemAgentMessage     itemType = "agentMessage"
	itemReasoning        itemType = "reasoning"
	itemCommandExecution itemType = "commandExecution"
	itemFileChange       itemType = "fileChange"
	itemMcpToolCall      itemType = "mcpToolCall"
	itemDynamicToolCall  itemType = "dynamicToolCall"
	itemWebSearch        itemType = "webSearch"
)

// itemStatus is the status of a command, file change or tool call item
// (the schema's v2 CommandExecutionStatus, PatchApplyStatus, ...).
type itemStatus string

// The item statuses; those spelled as provider.ToolStatus are
// conversions, as the turn statuses (TestWireEnums checks them).
const (
	itemInProgress itemStatus = "inProgress"
	itemCompleted             = itemStatus(provider.ToolCompleted)
	itemFailed                = itemStatus(provider.ToolFailed)
	itemDeclined              = itemStatus(provider.ToolDeclined)
)

type fileUpdate struct {
	Path string `json:"path"`
}

// wireItem is the part of a ThreadItem read.
type wireItem struct {
	Type             itemType     `json:"type"`
	ID               string       `json:"id"`
	Text             string       `json:"text"`
	Command          string       `json:"command"`
	Cwd              string       `json:"cwd"`
	Status           itemStatus   `json:"status"`
	AggregatedOutput *string      `json:"aggregatedOutput"`
	Changes          []fileUpdate `json:"changes"`
	Server           string       `json:"server"`
	Tool             string       `json:"tool"`
	Query            string       `json:"query"`
}

// itemNotification is item/started's and item/completed's params.
type itemNotification struct {
	ThreadID string   `json:"threadId"`
	TurnID   string   `json:"turnId"`
	Item     wireItem `json:"item"`
}

// deltaNotification is the params of every item delta notification.
type deltaNotification struct {
	ThreadID string `json:"threadId"`
	TurnID   string `json:"turnId"`
	ItemID   string `json:"itemId"`
	Delta    string `json:"delta"`
}

type tokenBreakdown struct {
	InputTokens           int64 `json:"inputTokens"`
	CachedInputTokens     int64 `json:"cachedInputTokens"`
	OutputTokens          int64 `json:"outputTokens"`
	ReasoningOutputTokens int64 `json:"reasoningOutputTokens"`
}

func (b tokenBreakdown) minus(o tokenBreakdown) tokenBreakdown {
	return tokenBreakdown{InputTokens: b.InputTokens - o.InputTokens, CachedInputTokens: b.CachedInputTokens - o.CachedInputTokens,
		OutputTokens: b.OutputTokens - o.OutputTokens, ReasoningOutputTokens: b.ReasoningOutputTokens - o.ReasoningOutputTokens}
}

type tokenUsageNotification struct {
	ThreadID   string `json:"threadId"`
	TurnID     string `json:"turnId"`
	TokenUsage struct {
		Total tokenBreakdown `json:"total"`
		Last  tokenBreakdown `json:"last"`
	} `json:"tokenUsage"`
}

type errorNotification struct {
	ThreadID  string    `json:"threadId"`
	TurnID    string    `json:"turnId"`
	Error     turnError `json:"error"`
	WillRetry bool      `json:"willRetry"`
}

type networkApprovalContext struct {
	Host     string `json:"host"`
	Protocol string `json:"protocol"`
}

type commandApprovalParams struct {
	ThreadID        string                  `json:"threadId"`
	TurnID          string                  `json:"turnId"`
	ItemID          string                  `json:"itemId"`
	Command         *string                 `json:"command"`
	Cwd             *string                 `json:"cwd"`
	Reason          *string                 `json:"reason"`
	NetworkApproval *networkApprovalContext `json:"networkApprovalContext"`
}

type fileChangeApprovalParams struct {
	ThreadID  string  `json:"threadId"`
	TurnID    string  `json:"turnId"`
	ItemID    string  `json:"itemId"`
	Reason    *string `json:"reason"`
	GrantRoot *string `json:"grantRoot"`
}

// approvalResponse answers both v2 approval requests.
type approvalResponse struct {
	Decision decision `json:"decision"`
}

// elicitationAction is an MCP elicitation's answer.
type elicitationAction string

// elicitationDecline refuses an MCP server's request for input.
const elicitationDecline elicitationAction = "decline"

// grantScope is how long granted permissions last.
type grantScope string

// grantTurn: for the turn (what is granted is nothing).
const grantTurn grantScope = "turn"

// The fail-closed answers to the server requests nlx does not serve.
type (
	permissionsResponse struct {
		Permissions struct{}   `json:"permissions"` // nothing granted
		Scope       grantScope `json:"scope"`
	}
	elicitationResponse struct {
		Action elicitationAction `json:"action"`
	}
	dynamicToolResponse struct {
		ContentItems []struct{} `json:"contentItems"`
		Success      bool       `json:"success"`
	}
	legacyDenied struct {
		Denied struct {
			Rejection string `json:"rejection"`
		} `json:"denied"`
	}
	legacyApprovalResponse struct {
		Decision legacyDenied `json:"decision"`
	}
)
