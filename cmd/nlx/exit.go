package main

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nlx-dev/nlx/host"
	"github.com/nlx-dev/nlx/images"
	"github.com/nlx-dev/nlx/isolate"
	"github.com/nlx-dev/nlx/plan"
	"github.com/nlx-dev/nlx/reconcile"
	"github.com/nlx-dev/nlx/schema"
	"github.com/nlx-dev/nlx/state"
)

// ExitCode is nlx's process exit status.
type ExitCode int

// The exit codes, the same for every command.
const (
	ExitOK       ExitCode = 0 // success, or no changes
	ExitError    ExitCode = 1 // any error, including invalid config and stale plans
	ExitChanges  ExitCode = 2 // plan --detailed-exitcode found changes
	ExitApproval ExitCode = 3 // a change needs an approval or is refused
	ExitLocked   ExitCode = 4 // another run holds the state lock
)

// exitStatus ends a command with a non-zero code that is not an error.
type exitStatus ExitCode

func (e exitStatus) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// Reason codes the command layer gives to errors without one of their own.
const (
	codeInvalidConfig  = "invalid_config"
	codeStateTooNew    = "state_too_new"
	codeNoState        = "no_state"
	codeConfirmation   = "confirmation_required"
	codeGenericFailure = "error"
)

// approvalCodes are refusals that exit 3: the plan is fine but a person must
// approve it, or the change can never be applied as configured.
var approvalCodes = map[string]bool{
	reconcile.CodeApprovalMissing:    true,
	reconcile.CodeUnknownUnresolved:  true,
	reconcile.CodeApproverNotAdmin:   true,
	reconcile.CodeTwoPersonRule:      true,
	plan.RefusedDisabledProvider:     true,
	plan.RefusedImplicitSubstitution: true,
	plan.RefusedRawSecret:            true,
}

// classify returns an error's reason code and exit code.
func classify(err error) (string, ExitCode) {
	var (
		refusal    *plan.Refusal
		locked     *reconcile.LockedError
		cfgErrs    schema.Errors
		newer      *state.NewerSchemaError
		imageErr   *images.Error
		isoRefusal *isolate.Refusal
		userErr    *host.UserError
	)
	switch {
	case errors.As(err, &userErr):
		return userErr.Code, ExitError
	case errors.As(err, &imageErr):
		return imageErr.Code, ExitError
	case errors.As(err, &isoRefusal):
		return isoRefusal.Code, ExitError
	case errors.As(err, &locked):
		return reconcile.CodeStateLocked, ExitLocked
	case errors.As(err, &refusal):
		if approvalCodes[refusal.Code] {
			return refusal.Code, ExitApproval
		}
		return refusal.Code, ExitError
	case errors.As(err, &cfgErrs):
		return codeInvalidConfig, ExitError
	case errors.As(err, &newer):
		return codeStateTooNew, ExitError
	case errors.Is(err, state.ErrNoState):
		return codeNoState, ExitError
	}
	return codeGenericFailure, ExitError
}

// diagnostic is one configuration error in the JSON error document.
type diagnostic struct {
	File    string `json:"file,omitempty"`
	Line    int    `json:"line,omitempty"`
	Column  int    `json:"column,omitempty"`
	Path    string `json:"path,omitempty"`
	Code    string `json:"code"`
	Message string `json:"message"`
}

// errorDoc is what --output json prints for a failed command.
type errorDoc struct {
	FormatVersion int `json:"format_version"`
	Error         struct {
		Code        string       `json:"code"`
		Message     string       `json:"message"`
		Diagnostics []diagnostic `json:"diagnostics,omitempty"`
	} `json:"error"`
}

// report prints err (if any) and returns the exit code.
func (a *app) report(err error) ExitCode {
	if err == nil {
		return ExitOK
	}
	var st exitStatus
	if errors.As(err, &st) {
		return ExitCode(st)
	}
	code, exit := classify(err)
	if a.output == "json" && !a.jsonReported {
		var doc errorDoc
		doc.FormatVersion = 1
		doc.Error.Code = code
		doc.Error.Message = err.Error()
		var cfgErrs schema.Errors
		if errors.As(err, &cfgErrs) {
			doc.Error.Message = fmt.Sprintf("%d error(s) in the configuration", len(cfgErrs))
			for _, e := range cfgErrs {
				doc.Error.Diagnostics = append(doc.Error.Diagnostics, diagnostic{
					File: e.Pos.Filename, Line: e.Pos.Line, Column: e.Pos.Column,
					Path: e.Path, Code: e.Code, Message: e.Msg,
				})
			}
		}
		data, _ := json.Marshal(doc)
		fmt.Fprintln(a.io.Out, string(data))
	}
	var cfgErrs schema.Errors
	if errors.As(err, &cfgErrs) {
		for _, e := range cfgErrs {
			fmt.Fprintln(a.io.Err, e.Error())
		}
		fmt.Fprintf(a.io.Err, "Error: %s: %d error(s) in the configuration\n", code, len(cfgErrs))
		return exit
	}
	msg := err.Error()
	var refusal *plan.Refusal
	var imageErr *images.Error
	var isoRefusal *isolate.Refusal
	var userErr *host.UserError
	if !errors.As(err, &refusal) && !errors.As(err, &imageErr) && !errors.As(err, &isoRefusal) && !errors.As(err, &userErr) &&
		code != codeGenericFailure && code != reconcile.CodeStateLocked {
		msg = code + ": " + msg
	}
	fmt.Fprintf(a.io.Err, "Error: %s\n", msg)
	return exit
}
