//go:build !nlxfault

package fault

// Enabled reports whether this binary honours NLX_FAULT.
const Enabled = false

// Point is a no-op outside nlxfault builds.
func Point(string) {}
