// Package reason is nlx's one registry of reason codes: every refusal and
// every failure nlx reports carries a Code from Table, and the code alone
// decides the process's exit status. Packages return *Error (or an error
// that presents itself as one through errors.As); cmd/nlx maps it to the
// exit code with one errors.As.
//
// The package imports nothing from nlx, so that schema and plan, which
// import no other nlx package, may use it.
package reason

import (
	"errors"
	"fmt"
)

// Code is a stable reason code: text and JSON output carry it, scripts
// branch on it, and it is never renamed.
type Code string

// Exit is nlx's process exit status, the same for every command.
type Exit int

// The exit statuses.
const (
	ExitOK       Exit = 0 // success, or no changes
	ExitError    Exit = 1 // any error, including invalid config and stale plans
	ExitChanges  Exit = 2 // plan --detailed-exitcode found changes
	ExitApproval Exit = 3 // a change needs an approval or is refused
	ExitLocked   Exit = 4 // another run holds the state lock
)

// Area groups codes by what refuses them, for the reference table.
type Area string

// The areas, in the order the reference lists them.
const (
	AreaConfig   Area = "config"   // loading and checking a configuration
	AreaPlan     Area = "plan"     // plan files and refused changes
	AreaApply    Area = "apply"    // apply, approve and resolve
	AreaState    Area = "state"    // the state file
	AreaImage    Area = "image"    // native images
	AreaLaunch   Area = "launch"   // launches from the applied state
	AreaTurn     Area = "turn"     // provider turns and permission requests
	AreaServe    Area = "serve"    // the scheduler: jobs, occurrence claims, manual runs
	AreaPreserve Area = "preserve" // OpenClaw inventory, export, import and release
	AreaHost     Area = "host"     // this host's sandbox and provider user
	AreaCLI      Area = "cli"      // the command line itself
)

// Areas lists every area in reference order.
var Areas = []Area{AreaConfig, AreaPlan, AreaApply, AreaState, AreaImage, AreaLaunch, AreaTurn, AreaServe, AreaPreserve, AreaHost, AreaCLI}

// Entry is one registered code.
type Entry struct {
	Code    Code
	Exit    Exit
	Area    Area
	Meaning string // one line: when nlx reports it
}

var index = func() map[Code]Entry {
	m := make(map[Code]Entry, len(table))
	for _, e := range table {
		if _, dup := m[e.Code]; dup {
			panic("reason: code registered twice: " + string(e.Code))
		}
		m[e.Code] = e
	}
	return m
}()

// Lookup returns the entry of c; ok is false for a code nobody registered.
func Lookup(c Code) (e Entry, ok bool) {
	e, ok = index[c]
	return e, ok
}

// Table returns every registered code, in reference order.
func Table() []Entry { return append([]Entry(nil), table...) }

// ExitOf is the exit status of c: an unregistered code is an error.
func ExitOf(c Code) Exit {
	if e, ok := index[c]; ok {
		return e.Exit
	}
	return ExitError
}

// Error is an error with a reason code. Msg says what happened in words;
// Fix, when known, says what to do about it (nlx doctor prints it alone);
// Err is the cause, when there is one; Details carries structured facts
// for callers that branch on more than the code (who holds a lock).
type Error struct {
	Code    Code   `json:"code"`
	Msg     string `json:"message"`
	Fix     string `json:"fix,omitempty"`
	Err     error  `json:"-"`
	Details any    `json:"-"`
}

func (e *Error) Error() string {
	s := string(e.Code) + ": " + e.Msg
	if e.Err != nil && e.Msg == "" {
		s = string(e.Code) + ": " + e.Err.Error()
	}
	return s
}

func (e *Error) Unwrap() error { return e.Err }

// New returns an *Error with a formatted message. A %w verb in format
// wraps its argument, as with fmt.Errorf.
func New(code Code, format string, args ...any) *Error {
	err := fmt.Errorf(format, args...)
	e := &Error{Code: code, Msg: err.Error()}
	if u := errors.Unwrap(err); u != nil {
		e.Err = u
	}
	return e
}

// Wrap returns an *Error whose cause is err.
func Wrap(code Code, err error, format string, args ...any) *Error {
	e := New(code, format, args...)
	if err != nil {
		e.Err = err
		if e.Msg == "" {
			e.Msg = err.Error()
		} else {
			e.Msg += ": " + err.Error()
		}
	}
	return e
}

// Of returns the reason error in err's chain, or nil.
func Of(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return nil
}

// CodeOf returns the code of err: its reason error's, or Failure.
func CodeOf(err error) Code {
	if e := Of(err); e != nil {
		return e.Code
	}
	return Failure
}

// Is reports whether err carries code c.
func Is(err error, c Code) bool {
	e := Of(err)
	return e != nil && e.Code == c
}

// Present sets target, when it is a **Error, to e. A typed error that
// keeps its own structure (a list of positioned config errors, the holder
// of a lock) implements As with it, so that errors.As finds its code.
func Present(target any, e *Error) bool {
	if t, ok := target.(**Error); ok {
		*t = e
		return true
	}
	return false
}
