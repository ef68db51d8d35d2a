package main

import (
	"errors"
	"fmt"

	"github.com/nlx-dev/nlx/internal/reason"
)

// ExitCode is nlx's process exit status.
type ExitCode = reason.Exit

// The exit codes, the same for every command (reason.Exit*).
const (
	ExitOK       = reason.ExitOK
	ExitError    = reason.ExitError
	ExitChanges  = reason.ExitChanges
	ExitApproval = reason.ExitApproval
	ExitLocked   = reason.ExitLocked
)

// exitStatus ends a command with a non-zero code that is not an error.
type exitStatus ExitCode

func (e exitStatus) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// classify returns an error's reason code and exit code: the code of the
// reason error in its chain (the registry gives the exit), else error.
func classify(err error) (reason.Code, ExitCode) {
	code := reason.CodeOf(err)
	return code, reason.ExitOf(code)
}

// report prints err (if any) through the command's view and returns the
// exit code.
func (a *app) report(err error) ExitCode {
	if err == nil {
		return ExitOK
	}
	var st exitStatus
	if errors.As(err, &st) {
		return ExitCode(st)
	}
	code, exit := classify(err)
	if a.view == nil {
		// cobra refused the arguments before the view was chosen: the
		// --output it parsed, when it is a format at all.
		f := format(a.outputFlag)
		if f != formatJSON && f != formatMarkdown {
			f = formatText
		}
		a.view = newView(f, a.io.Out, a.io.Err)
	}
	a.view.Error(err, code)
	return exit
}
