// Package isolate runs provider processes (Codex app-server, Claude Code and
// every subprocess they start) inside a boundary nlx can prove: the
// workspace, the selected connection's credential home and the workspace's
// own skills, and nothing else of the host, under cgroup limits.
//
// A launch goes through four steps, each fail-closed:
//
//  1. Compile turns a Request into one OCI runtime-spec. It only checks
//     paths; a request it cannot prove safe is refused with a *reason.Error whose
//     Code is stable (unknown_policy, workspace_outside_root, ...).
//  2. A backend carries the spec out: bwrap (bubblewrap, also rootless) or
//     runc (an OCI bundle). Both take the same spec; Launch records which ran.
//  3. The launch gets its own cgroup (memory, pids, cpu) under the "nlx"
//     parent on cgroup v1, v2 and hybrid hosts, and every process of the
//     sandbox is in it before it executes anything of the provider. bwrap
//     is created inside it (clone3 CLONE_INTO_CGROUP on v2; on v1 the
//     forking thread joins the cgroup for the fork) and waits on a gate
//     before it executes the provider; runc moves the container into a
//     child of it before the container's first process executes anything.
//  4. The process identity (pid, start time, boot id, host, pid namespace) is
//     given to a Recorder before the provider runs: bwrap waits on
//     --block-fd, runc is held stopped at its exec (see startHeld). Stop signals only a process whose start time still
//     matches the record, kills whatever is left in the cgroup, confirms it
//     empty, removes it, and only then hands a Receipt to the Recorder.
//
// Programs that use Launch must call Reexec first thing in main (and in
// TestMain): on kernels that cannot create a process inside a cgroup,
// Launch falls back to re-executing the current binary, which Reexec turns
// into the backend once the parent has moved it into the cgroup.
//
// Doctor reports what the host can enforce, with a fix for every gap.
package isolate
