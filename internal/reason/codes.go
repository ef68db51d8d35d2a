package reason

// Every code nlx reports. A code is added here, with its entry in table,
// and nowhere else; TestEveryCodeRegistered fails on a code made elsewhere.
const (
	// config
	InvalidConfig        Code = "invalid_config"
	CUESyntax            Code = "cue_syntax"
	SchemaViolation      Code = "schema_violation"
	InvalidName          Code = "invalid_name"
	RawSecretValue       Code = "raw_secret_value"
	DanglingReference    Code = "dangling_reference"
	ConnectionWorkspace  Code = "connection_workspace"
	PersonalOnTeam       Code = "personal_connection_on_team_workspace"
	SkillScopeMismatch   Code = "skill_scope_mismatch"
	ToolScopeMismatch    Code = "tool_scope_mismatch"
	PersonalOwner        Code = "personal_workspace_owner"
	InvalidValue         Code = "invalid_value"
	JobPolicyWider       Code = "job_policy_wider_than_workspace"
	SkillPackage         Code = "skill_package"
	NoConfig             Code = "no_config"
	JobPinMismatch       Code = "job_pin_mismatch"
	ConfigIO             Code = "io"
	ConfigTooComplex     Code = "config_too_complex"
	EscapingSymlink      Code = "escaping_symlink"
	ImageForeignSkills   Code = "image_carries_foreign_skills"
	DisabledProvider     Code = "disabled_requested_provider"
	ImplicitSubstitution Code = "implicit_substitution"
	PlanHashMismatch     Code = "plan_hash_mismatch"
	UnknownPlanFormat    Code = "unknown_plan_format"
	InvalidPlanFile      Code = "invalid_plan_file"
	PlanTooLarge         Code = "plan_too_large"
	LineageMismatch      Code = "lineage_mismatch"
	StalePlan            Code = "stale_plan"
	ConfigChanged        Code = "config_changed"
	PlanNotDerivable     Code = "plan_not_derivable"
	ConfirmationRequired Code = "confirmation_required"
	ApprovalMissing      Code = "approval_missing"
	UnknownUnresolved    Code = "unknown_unresolved"
	ApproverNotAdmin     Code = "approver_not_admin"
	TwoPersonRule        Code = "two_person_rule"
	ApprovalNotNeeded    Code = "approval_not_needed"
	NotInPlan            Code = "not_in_plan"
	NothingToResolve     Code = "nothing_to_resolve"
	ActorUnproven        Code = "actor_unproven"
	StateBasisMismatch   Code = "state_basis_mismatch"
	ApprovalSignature    Code = "approval_signature_invalid"
	ApprovalKeyUnknown   Code = "approval_key_unknown"
	ApprovalMismatch     Code = "approval_mismatch"
	ApprovalExpired      Code = "approval_expired"
	ApprovalReplayed     Code = "approval_replayed"
	StateLocked          Code = "state_locked"
	LockNotHeld          Code = "lock_not_held"
	NoState              Code = "no_state"
	StateTooNew          Code = "state_too_new"
	NotAnNlxState        Code = "not_an_nlx_state"
	StateDamaged         Code = "state_damaged"
	StateOutdated        Code = "state_outdated"
	StateReadOnly        Code = "state_read_only"
	NotInState           Code = "not_in_state"
	UnknownImage         Code = "unknown_image"
	UnpinnedBase         Code = "unpinned_base"
	GoBuild              Code = "go_build"
	ImageNotAvailable    Code = "image_not_available"
	ImageRefMoved        Code = "image_ref_moved"
	AbsolutePath         Code = "absolute_path"
	PathTraversal        Code = "path_traversal"
	EscapingLink         Code = "escaping_link"
	LinkInPath           Code = "link_in_path"
	EscapingHardlink     Code = "escaping_hardlink"
	DeviceNode           Code = "device_node"
	SpecialFile          Code = "special_file"
	BadWhiteout          Code = "bad_whiteout"
	NotApplied           Code = "not_applied"
	Held                 Code = "held"
	ProviderDisabled     Code = "provider_disabled"
	ProviderFeatureOff   Code = "provider_feature_off"
	SkillNotInstalled    Code = "skill_not_installed"
	InvalidAppliedSpec   Code = "invalid_applied_spec"
	NoSuchLaunch         Code = "no_such_launch"
	LaunchStopped        Code = "launch_already_stopped"
	UnknownPolicy        Code = "unknown_policy"
	WorkspaceOutsideRoot Code = "workspace_outside_root"
	CredentialHomeUnsafe Code = "credential_home_unsafe"
	BindSourceUnsafe     Code = "bind_source_unsafe"
	ProviderCannotReach  Code = "provider_cannot_reach"
	InvalidRequest       Code = "invalid_request"
	NoBackend            Code = "no_backend"
	CgroupMemory         Code = "cgroup_memory_unavailable"
	CgroupPids           Code = "cgroup_pids_unavailable"
	CgroupCPU            Code = "cgroup_cpu_unavailable"
	SeccompUnavailable   Code = "seccomp_unavailable"
	ProviderUserRoot     Code = "provider_user_root"
	ProviderUserNoSwitch Code = "provider_user_unavailable"
	ProviderUserMissing  Code = "provider_user_missing"
	CannotLaunch         Code = "cannot_launch"
	InvalidUsage         Code = "invalid_usage"
	Failure              Code = "error"

	// A launch's credential home that is not there; one that is there
	// but a symlink, outside its root or no directory is
	// CredentialHomeUnsafe.
	CredentialHomeMissing Code = "credential_home_missing"

	// Provider turns and their permission requests.
	NoAdapter                   Code = "no_adapter"
	ProviderNotFound            Code = "provider_not_found"
	ProviderVersionMismatch     Code = "provider_version_mismatch"
	SecretUnavailable           Code = "secret_unavailable"
	NotAMember                  Code = "not_a_member"
	MembershipRevoked           Code = "membership_revoked"
	CredentialGenerationChanged Code = "credential_generation_changed"
	ProviderRevoked             Code = "provider_revoked"
	ResumeRejected              Code = "resume_rejected"
	TurnCancelled               Code = "turn_cancelled"
	TurnTimeout                 Code = "turn_timeout"
	ProviderError               Code = "provider_error"
	ProviderExited              Code = "provider_exited"
	ProviderProtocol            Code = "provider_protocol"
	PermissionRequired          Code = "permission_required"
	NotADecider                 Code = "not_a_decider"
	PermissionDecided           Code = "permission_decided"
	NoSuchPermission            Code = "no_such_permission"
	NoSuchTurn                  Code = "no_such_turn"
	NoConversation              Code = "no_conversation"
	EgressProxyUnavailable      Code = "egress_proxy_unavailable"

	// Tools: nlx's MCP proxy and the catalog refresh of running workers.
	ToolNotAllowed           Code = "tool_not_allowed"
	ToolUnavailable          Code = "tool_unavailable"
	ToolsProxyUnavailable    Code = "tools_proxy_unavailable"
	RefreshUnknownUnresolved Code = "refresh_unknown_unresolved"
	RefreshOutcomeUnknown    Code = "refresh_outcome_unknown"
	ConfigVersionConflict    Code = "config_version_conflict"
	RefreshUnsupported       Code = "refresh_unsupported"
	RefreshUnverified        Code = "refresh_unverified"
	RefreshFailed            Code = "refresh_failed"
	WorkerNotProven          Code = "worker_not_proven"
	WorkerReleased           Code = "worker_released"
	NoSuchRefresh            Code = "no_such_refresh"
	RefreshNotUnknown        Code = "refresh_not_unknown"

	// The scheduler: jobs, occurrence claims, manual runs.
	ServeLocked                 Code = "serve_locked"
	NoSuchJob                   Code = "no_such_job"
	NoSuchClaim                 Code = "no_such_claim"
	ClaimNotUnknown             Code = "claim_not_unknown"
	JobDisabled                 Code = "job_disabled"
	JobHeld                     Code = "job_held"
	BackgroundAuthorityRequired Code = "background_authority_required"
	WorkflowLocked              Code = "workflow_locked"
	PreviousRunning             Code = "previous_running"
	ConversationBusy            Code = "conversation_busy"
	NotDispatched               Code = "not_dispatched"
	OutcomeUnknown              Code = "outcome_unknown"
	ServeStopping               Code = "serve_stopping"
	ConnectionNotAllowed        Code = "connection_not_allowed"

	// Preservation: OpenClaw inventory, export, import, release.
	SourceEraUnsupported        Code = "source_era_unsupported"
	SourceUnreadable            Code = "source_unreadable"
	SourceBusy                  Code = "source_busy"
	SourceChanged               Code = "source_changed"
	NoSuchPreservation          Code = "no_such_preservation"
	ExportMissing               Code = "export_missing"
	ExportExists                Code = "export_exists"
	ExportCorrupt               Code = "export_corrupt"
	PreservationCountMismatch   Code = "preservation_count_mismatch"
	PreservationHashMismatch    Code = "preservation_hash_mismatch"
	PreservationRevisionChanged Code = "preservation_revision_changed"
	ImportNameConflict          Code = "import_name_conflict"
	ImportUnsupported           Code = "import_unsupported"
	ReleaseGenerationChanged    Code = "release_generation_changed"
)

var table = []Entry{
	{InvalidConfig, ExitError, AreaConfig, "the configuration has errors; each is listed with file:line:col and its own code below"},
	{CUESyntax, ExitError, AreaConfig, "a .cue file does not parse"},
	{SchemaViolation, ExitError, AreaConfig, "a value breaks a rule of #Config"},
	{InvalidName, ExitError, AreaConfig, "a resource name breaks ^[a-z][a-z0-9-]{0,62}$"},
	{RawSecretValue, ExitApproval, AreaConfig, "a secret field holds a value instead of an env:, file: or keychain: reference (the value is never printed)"},
	{DanglingReference, ExitError, AreaConfig, "a reference names no resource"},
	{ConnectionWorkspace, ExitError, AreaConfig, "a job's connection belongs to another workspace"},
	{PersonalOnTeam, ExitError, AreaConfig, "a personal connection is used for a team workspace"},
	{SkillScopeMismatch, ExitError, AreaConfig, "a skill's scope or owner does not match the workspace that uses it"},
	{ToolScopeMismatch, ExitError, AreaConfig, "a tool's scope or owner does not match the workspace granted it (a personal tool is never a team workspace's)"},
	{PersonalOwner, ExitError, AreaConfig, "a personal workspace lacks its one owner"},
	{InvalidValue, ExitError, AreaConfig, "a value CUE cannot judge is wrong: a version, a cron line, a time zone, a size"},
	{JobPolicyWider, ExitError, AreaConfig, "a job's policy is wider than its workspace's"},
	{SkillPackage, ExitError, AreaConfig, "a skill package's SKILL.md is missing or not in the Agent Skills format"},
	{NoConfig, ExitError, AreaConfig, "the directory holds no .cue file"},
	{JobPinMismatch, ExitError, AreaConfig, "a job's provider or billing pin contradicts its connection"},
	{ConfigIO, ExitError, AreaConfig, "a config file could not be read"},
	{ConfigTooComplex, ExitError, AreaConfig, "evaluating the config exceeds its budget (NLX_CONFIG_MEMORY, NLX_CONFIG_CPU, NLX_CONFIG_TIMEOUT, or the stack)"},
	{ImageForeignSkills, ExitError, AreaConfig, "a workspace's image bakes in a team or personal skill the workspace is not entitled to; skills are mounted per launch"},
	{EscapingSymlink, ExitError, AreaConfig, "a config file or image layer source is a symbolic link leading out of its directory"},

	{DisabledProvider, ExitApproval, AreaPlan, "a change needs a provider that is disabled; the config must change"},
	{ImplicitSubstitution, ExitApproval, AreaPlan, "a change would substitute a provider, billing or connection implicitly; the config must change"},
	{PlanHashMismatch, ExitError, AreaPlan, "the plan file was changed after nlx wrote it"},
	{UnknownPlanFormat, ExitError, AreaPlan, "the plan file has a format_version this nlx does not read"},
	{InvalidPlanFile, ExitError, AreaPlan, "not a plan file nlx can trust, or not a regular file"},
	{PlanTooLarge, ExitError, AreaPlan, "the plan file is larger than NLX_MAX_PLAN_BYTES"},

	{LineageMismatch, ExitError, AreaApply, "the plan was made against another state (or there is no state)"},
	{StalePlan, ExitError, AreaApply, "the state's serial moved since the plan"},
	{ConfigChanged, ExitError, AreaApply, "a config input changed, appeared or vanished since the plan (names them)"},
	{PlanNotDerivable, ExitError, AreaApply, "the plan is not exactly what nlx plans from its config and the state at its serial (names the first difference)"},
	{ConfirmationRequired, ExitError, AreaApply, "apply DIR with nobody to ask: pass --yes or apply a saved plan"},
	{ApprovalMissing, ExitApproval, AreaApply, "a risky change has no valid approval"},
	{UnknownUnresolved, ExitApproval, AreaApply, "a change touches an outcome nobody resolved (nlx resolve)"},
	{ApproverNotAdmin, ExitApproval, AreaApply, "the actor is neither an operator nor an admin of every workspace the change is inside, in the applied state"},
	{TwoPersonRule, ExitApproval, AreaApply, "under the two-person rule the plan's author may not approve it"},
	{ApprovalNotNeeded, ExitError, AreaApply, "the change has no risk an approval clears"},
	{NotInPlan, ExitError, AreaApply, "--change names no change of the plan"},
	{NothingToResolve, ExitError, AreaApply, "the address has no unknown outcome to resolve"},
	{ActorUnproven, ExitApproval, AreaApply, "a command acting for an actor could not prove it is them: the calling OS user is not the actor's, and no key of the actor signed (host.actors in the applied state)"},
	{StateBasisMismatch, ExitError, AreaApply, "the plan was made from a state snapshot whose content is not this state's at that serial (a snapshot edited after publishing, or another state)"},
	{ApprovalSignature, ExitApproval, AreaApply, "a signed approval does not verify: not the SSH signature format, another namespace, or the statement was changed after signing"},
	{ApprovalKeyUnknown, ExitApproval, AreaApply, "a signed approval's key is not its actor's in the applied state (a key added only in the plan being approved counts for nothing)"},
	{ApprovalMismatch, ExitApproval, AreaApply, "a signed approval of this plan names a change or a risk the plan does not have"},
	{ApprovalExpired, ExitApproval, AreaApply, "a signed approval expired before the apply"},
	{ApprovalReplayed, ExitApproval, AreaApply, "a signed approval was already used by an earlier apply; each is used once"},

	{StateLocked, ExitLocked, AreaState, "another run holds the state lock (names it and how to release it)"},
	{LockNotHeld, ExitError, AreaState, "nlx state unlock named a lock that is not held, or a run lost its lock"},
	{NoState, ExitError, AreaState, "there is no state file yet (nlx apply creates it)"},
	{StateTooNew, ExitError, AreaState, "the state was written by a newer nlx; nothing was changed"},
	{NotAnNlxState, ExitError, AreaState, "the state file is another program's database; nothing was changed"},
	{StateDamaged, ExitError, AreaState, "the state has lost its lineage row; it is never reinitialised"},
	{StateOutdated, ExitError, AreaState, "a reading command found a state from an older nlx: run nlx state upgrade"},
	{StateReadOnly, ExitError, AreaState, "a write was attempted on a state opened read-only"},
	{NotInState, ExitError, AreaState, "no resource at that address in the state"},

	{UnknownImage, ExitError, AreaImage, "no images entry of that name"},
	{UnpinnedBase, ExitError, AreaImage, "a registry base without a digest"},
	{GoBuild, ExitError, AreaImage, "a Go or nlx layer of an image cannot be built: the config directory is in no Go module, the package is unknown or does not compile; reported at the layer's field"},
	{ImageNotAvailable, ExitError, AreaImage, "the pinned digest is neither in the image store nor in a registry"},
	{ImageRefMoved, ExitError, AreaImage, "a tag points elsewhere than when the plan was made"},
	{AbsolutePath, ExitError, AreaImage, "a layer entry has an absolute name"},
	{PathTraversal, ExitError, AreaImage, "a layer entry climbs out of the root through a parent directory (..)"},
	{EscapingLink, ExitError, AreaImage, "a layer symlink points outside the root"},
	{LinkInPath, ExitError, AreaImage, "a layer entry would be written through a symlink"},
	{EscapingHardlink, ExitError, AreaImage, "a layer hardlink names a file outside the root or not yet unpacked"},
	{DeviceNode, ExitError, AreaImage, "a layer holds a character or block device"},
	{SpecialFile, ExitError, AreaImage, "a layer holds a fifo or another file type a rootfs does not need"},
	{BadWhiteout, ExitError, AreaImage, "a whiteout names nothing it may remove"},

	{NotApplied, ExitError, AreaLaunch, "the workspace or connection is in no applied state"},
	{Held, ExitError, AreaLaunch, "the resource is held (an import under review)"},
	{ProviderDisabled, ExitError, AreaLaunch, "the connection's provider is applied disabled"},
	{ProviderFeatureOff, ExitError, AreaLaunch, "the provider needs a feature flag nothing turns on"},
	{SkillNotInstalled, ExitError, AreaLaunch, "an applied skill's package is not in the skill store"},
	{InvalidAppliedSpec, ExitError, AreaLaunch, "an applied spec nlx cannot read"},
	{NoSuchLaunch, ExitError, AreaLaunch, "no launch with that id is recorded (nlx ps --all lists them)"},
	{LaunchStopped, ExitError, AreaLaunch, "nlx stop named a launch that has already stopped"},
	{UnknownPolicy, ExitError, AreaLaunch, "the workspace's policy is not one nlx knows"},
	{WorkspaceOutsideRoot, ExitError, AreaLaunch, "the workspace directory is not inside the workspace root"},
	{CredentialHomeUnsafe, ExitError, AreaLaunch, "the credential home is a symlink, escapes its root, is not a directory, or cannot be opened"},
	{CredentialHomeMissing, ExitError, AreaLaunch, "the connection's credential home, or the credential root, does not exist (nlx apply creates a connection's home; the message says how to make one by hand)"},
	{BindSourceUnsafe, ExitError, AreaLaunch, "a directory the sandbox binds is writable by someone other than root along its path"},
	{ProviderCannotReach, ExitError, AreaLaunch, "the provider user cannot reach a directory it must use"},
	{InvalidRequest, ExitError, AreaLaunch, "a launch request nlx cannot compile into a spec"},

	{NoAdapter, ExitError, AreaTurn, "the connection's provider is of a kind nlx has no adapter for (opencode, acp)"},
	{ProviderNotFound, ExitError, AreaTurn, "the provider's command is not an absolute path to a program, nor found on PATH, on this host"},
	{ProviderVersionMismatch, ExitError, AreaTurn, "the provider program's version, probed in the sandbox, is outside its registration's constraint"},
	{SecretUnavailable, ExitError, AreaTurn, "the connection's secret reference (env:, file:) cannot be read at launch; the value is never shown"},
	{NotAMember, ExitError, AreaTurn, "the actor is not a member of the workspace in the applied state"},
	{MembershipRevoked, ExitError, AreaTurn, "the actor stopped being a member of the workspace while the turn ran: the turn was interrupted"},
	{CredentialGenerationChanged, ExitError, AreaTurn, "the connection's generation changed (or it was removed) while the turn ran: the turn was interrupted"},
	{ProviderRevoked, ExitError, AreaTurn, "the provider was disabled or removed while the turn ran: the turn was interrupted"},
	{ResumeRejected, ExitError, AreaTurn, "the provider refused the conversation's stored session handle (the turn falls back to nlx's summary and says so)"},
	{TurnCancelled, ExitError, AreaTurn, "the turn was cancelled (Ctrl-C, SIGTERM): the provider was interrupted"},
	{TurnTimeout, ExitError, AreaTurn, "the provider sent nothing for the idle timeout, or the turn ran past its timeout: it was interrupted"},
	{ProviderError, ExitError, AreaTurn, "the provider reported a failed turn (the model's error, a disconnect); the message is the provider's"},
	{ProviderExited, ExitError, AreaTurn, "the provider program exited before it ended the turn"},
	{ProviderProtocol, ExitError, AreaTurn, "the provider sent what its protocol does not allow there"},
	{PermissionRequired, ExitApproval, AreaTurn, "the provider asked for a permission nobody granted (no one may be asked, or the request timed out): it was denied and the turn ended blocked"},
	{NotADecider, ExitApproval, AreaTurn, "the actor may not decide this permission request (the turn's actor decides in a personal workspace, an admin in a team one)"},
	{PermissionDecided, ExitError, AreaTurn, "the permission request was already decided (or timed out)"},
	{NoSuchPermission, ExitError, AreaTurn, "no permission request with that id"},
	{NoSuchTurn, ExitError, AreaTurn, "no turn with that id"},
	{NoConversation, ExitError, AreaTurn, "--resume named a conversation that has no session yet"},

	{ToolNotAllowed, ExitError, AreaTurn, "the provider called a tool its workspace does not have in the applied state (never granted, or removed): nlx's tool proxy refused it"},
	{ToolUnavailable, ExitError, AreaTurn, "a tool server the workspace may use could not be started or reached; its tools are missing from the catalog until it can"},
	{ToolsProxyUnavailable, ExitError, AreaLaunch, "nlx's tool proxy for a launch could not start: nothing is launched"},
	{RefreshUnknownUnresolved, ExitApproval, AreaServe, "a catalog refresh of this worker has an outcome nobody knows: no further refresh of it until nlx resolve refresh"},
	{RefreshOutcomeUnknown, ExitApproval, AreaServe, "a catalog refresh wrote to the worker (or was about to) and its acknowledgment was lost: never retried, resolve it"},
	{ConfigVersionConflict, ExitError, AreaServe, "the worker's private configuration changed under nlx since it read it: nothing was written a second time"},
	{RefreshUnsupported, ExitError, AreaServe, "the running provider did not take the changed catalog (it did not list the tools again): the worker keeps its tools until its next launch"},
	{RefreshUnverified, ExitError, AreaServe, "after the refresh the provider's own list of nlx's tools is not the current projection"},
	{RefreshFailed, ExitError, AreaServe, "a catalog refresh failed before it wrote anything (the message says why)"},
	{WorkerNotProven, ExitError, AreaServe, "the worker to refresh is not proven to be the same process and connection nlx launched: nothing was sent to it"},
	{WorkerReleased, ExitError, AreaServe, "the worker was released before its deferred refresh ran: its next launch gets the current tools"},
	{NoSuchRefresh, ExitError, AreaServe, "no catalog refresh attempt with that id"},
	{RefreshNotUnknown, ExitError, AreaServe, "nlx resolve refresh named an attempt whose outcome is known, or already resolved"},
	{EgressProxyUnavailable, ExitError, AreaLaunch, "a launch with egress inference has no proxy: it could not start (nothing is launched), or it died (the sandbox has no network and the turn is interrupted)"},

	{SourceEraUnsupported, ExitError, AreaPreserve, "the OpenClaw installation is of a storage era nlx does not import (names what was found)"},
	{SourceUnreadable, ExitError, AreaPreserve, "the OpenClaw installation cannot be read: missing, not a directory, or a file nlx must parse is malformed"},
	{SourceBusy, ExitError, AreaPreserve, "an OpenClaw gateway (or agent) still holds the installation's locks; stop it, or export with --drain"},
	{SourceChanged, ExitError, AreaPreserve, "the installation changed while it was exported; nothing was kept: stop the writer and export again"},
	{NoSuchPreservation, ExitError, AreaPreserve, "no preservations entry of that name in the config"},
	{ExportMissing, ExitError, AreaPreserve, "the preservation's export directory holds no export (run nlx preserve export)"},
	{ExportExists, ExitError, AreaPreserve, "the export directory already holds an export; nlx never overwrites one (--replace, or another directory)"},
	{ExportCorrupt, ExitError, AreaPreserve, "the export does not match its manifest: a record, count or hash differs (names the first)"},
	{PreservationCountMismatch, ExitApproval, AreaPreserve, "a count of the export differs from the preservation's expected.counts; nothing is imported"},
	{PreservationHashMismatch, ExitApproval, AreaPreserve, "a hash of the export differs from the preservation's expected.hashes; nothing is imported"},
	{PreservationRevisionChanged, ExitApproval, AreaPreserve, "the export now holds another source revision than the one imported or planned; nothing is imported or released"},
	{ImportNameConflict, ExitApproval, AreaPreserve, "the config defines a job an import is about to create; import first, then release it with that definition"},
	{ImportUnsupported, ExitApproval, AreaPreserve, "a held import carries work nlx cannot do (names it); it stays held"},
	{ReleaseGenerationChanged, ExitApproval, AreaPreserve, "a release's connection changes its credential generation in the same plan; release in a plan of its own"},
	{ServeLocked, ExitLocked, AreaServe, "another nlx serve runs on this state (names it); one serve per state"},
	{NoSuchJob, ExitError, AreaServe, "no job of that name is applied"},
	{NoSuchClaim, ExitError, AreaServe, "no occurrence claim with that id"},
	{ClaimNotUnknown, ExitError, AreaServe, "nlx resolve claim named a claim whose outcome is known, or already resolved"},
	{JobDisabled, ExitError, AreaServe, "the job is applied with enabled: false: nothing runs it"},
	{JobHeld, ExitError, AreaServe, "the job is held (an import under review): nothing runs it until a reviewed plan releases it"},
	{BackgroundAuthorityRequired, ExitApproval, AreaServe, "a scheduled job on a personal connection runs on one person's credentials with nobody present: it needs backgroundAuthority: true"},
	{WorkflowLocked, ExitApproval, AreaServe, "an occurrence of the conversation has an outcome nobody knows: nothing runs in it until nlx resolve claim"},
	{PreviousRunning, ExitError, AreaServe, "concurrency skip: the occurrence was due while the previous one of the job still ran, and was skipped"},
	{ConversationBusy, ExitError, AreaServe, "nlx run waited --wait for another turn of the conversation to end"},
	{NotDispatched, ExitError, AreaServe, "the occurrence was claimed but nlx stopped before dispatching it: nothing was launched"},
	{OutcomeUnknown, ExitApproval, AreaServe, "the occurrence was dispatched and its process is gone without a recorded outcome: never retried, resolve it"},
	{ServeStopping, ExitError, AreaServe, "nlx serve was stopped (SIGTERM) and the turn did not end within the grace period: it was interrupted"},
	{ConnectionNotAllowed, ExitError, AreaServe, "nlx run --connection named a connection the actor may not run the job on (another workspace's, or someone else's personal one)"},

	{NoBackend, ExitError, AreaHost, "neither bubblewrap nor runc can enforce the sandbox here (nlx doctor says why)"},
	{CgroupMemory, ExitError, AreaHost, "the cgroup memory controller is not available (on a Raspberry Pi: cgroup_enable=memory)"},
	{CgroupPids, ExitError, AreaHost, "the cgroup pids controller is not available"},
	{CgroupCPU, ExitError, AreaHost, "the cgroup cpu controller is not available"},
	{SeccompUnavailable, ExitError, AreaHost, "the kernel or runc cannot enforce nlx's seccomp filter"},
	{ProviderUserRoot, ExitError, AreaHost, "the provider would run as root"},
	{ProviderUserNoSwitch, ExitError, AreaHost, "nlx, not root, cannot run the provider as another user"},
	{ProviderUserMissing, ExitError, AreaHost, "the provider user does not exist and nlx may not create it"},

	{CannotLaunch, ExitError, AreaHost, "nlx doctor found a gap that keeps a provider from launching safely here"},

	{InvalidUsage, ExitError, AreaCLI, "a flag, flag value or argument the command does not take"},
	{Failure, ExitError, AreaCLI, "any other failure (the message says what)"},
}
