package publish

import "time"

// SetAttachHook makes f run before each of Push's checks of the referrers
// list (round 0 after its write, 1 after settle); the returned function
// restores the previous hook.
func SetAttachHook(f func(round int)) (restore func()) {
	old := attachHook
	attachHook = f
	return func() { attachHook = old }
}

// SetSettle sets how long Push waits before its second look at a referrers
// tag; the returned function restores it.
func SetSettle(d time.Duration) (restore func()) {
	old := settle
	settle = d
	return func() { settle = old }
}
