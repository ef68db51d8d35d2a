// Package seccomp is the system-call filter of every nlx launch: what a
// provider process and every shell it starts may ask of the kernel. It is
// Docker's default seccomp profile for a process without capabilities,
// tightened where a sandbox that holds a provider's credentials needs more
// than a container does (see deviations in profile.go), for the native ABI
// only.
//
// Profile gives the filter as an OCI runtime-spec linux.seccomp, which the
// runc backend hands to runc (runc compiles it with libseccomp); Program
// compiles the same profile, in pure Go, into the classic BPF program
// bubblewrap loads from --seccomp FD, deciding exactly as the kernel does
// with runc's. Available says whether the host kernel can enforce either,
// RuncSupports whether a runc binary can; both fail with an *reason.Error whose
// Code is reason.SeccompUnavailable ("seccomp_unavailable"), for isolate to refuse
// the launch and nlx doctor to report.
//
// The package does not install filters itself: the backends do, just
// before they execute the provider, after no-new-privs.
package seccomp
