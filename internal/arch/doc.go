// Package arch holds no code: its test enforces the import rules of
// docs/architecture.md over the whole module.
package arch
