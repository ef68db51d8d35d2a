// Package nlx is nlx's own source, embedded in every nlx binary: an image
// layer `nlx: {}` cross-compiles the running nlx from it for each platform
// the image is built for, from any directory, without a checkout of nlx or
// a published module version (docs/images.md, "How an image carries nlx").
package nlx

import "embed"

// Source holds go.mod, go.sum and every package the nlx command is built
// from, by directory (their test files come along with the globs: ~1.2 MB
// in all). TestSourceHoldsTheBuild fails when a package the command needs
// is missing here, or one listed here is no longer needed.
//
//go:embed go.mod go.sum *.go
//go:embed cmd/nlx/*.go
//go:embed approval/*.go
//go:embed egress/*.go
//go:embed host/*.go
//go:embed images/*.go
//go:embed internal/atomicfile/*.go internal/bytesize/*.go internal/fault/*.go internal/fdpass/*.go internal/jsonrpc/*.go internal/procid/*.go internal/reason/*.go
//go:embed isolate/*.go isolate/seccomp/*.go
//go:embed launch/*.go
//go:embed plan/*.go
//go:embed preserve/*.go
//go:embed provider/*.go provider/codex/*.go provider/claude/*.go
//go:embed publish/*.go
//go:embed reconcile/*.go
//go:embed schema/*.go schema/schema.cue
//go:embed serve/*.go
//go:embed state/*.go state/migrations/*.sql
//go:embed toolproxy/*.go
//go:embed turn/*.go
var Source embed.FS

// Main is the directory of Source holding the nlx command.
const Main = "cmd/nlx"
