// Package preserve imports an OpenClaw installation, read-only: it detects
// the installation's storage era, inventories it (per record kind a count
// and a SHA-256 over the canonical records, what nlx will import, keep raw
// or not support, and where secrets are, never their values), gates the
// export on the gateway being stopped, exports a consistent snapshot (the
// raw records as found with secrets replaced by a marker and a reference,
// the source schemas, nlx's projections and a versioned manifest), and
// verifies an export against its manifest. The import itself is an apply
// of the preservation's change (reconcile and state); this package reads
// what it imports.
//
// The record kinds and how each is made canonical are in
// docs/preservation.md; that document and this package change together.
package preserve
