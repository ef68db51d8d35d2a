// Package fault lets tests stop nlx at named points of its work, to prove
// that a crash or a race at any of them leaves the state consistent.
//
// Faults exist only in binaries built with the nlxfault build tag; in every
// other build Point compiles to nothing and no environment variable changes
// what nlx does.
package fault
