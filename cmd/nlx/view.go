package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/nlx-dev/nlx/internal/reason"
	"github.com/nlx-dev/nlx/schema"
)

// format is an output format, chosen once with --output on the root.
type format string

// The output formats.
const (
	formatText     format = "text"
	formatJSON     format = "json"
	formatMarkdown format = "markdown"
)

// formatsKey is the annotation by which a command lists the formats it
// prints, comma-separated; a command without it prints text and JSON.
const formatsKey = "nlx.formats"

// textOnly and withMarkdown are the other format sets commands declare.
var (
	textOnly     = map[string]string{formatsKey: "text"}
	withMarkdown = map[string]string{formatsKey: "text,json,markdown"}
)

func formatsOf(cmd *cobra.Command) []format {
	list := "text,json"
	if v, ok := cmd.Annotations[formatsKey]; ok {
		list = v
	}
	var out []format
	for _, f := range strings.Split(list, ",") {
		out = append(out, format(f))
	}
	return out
}

// The format_version of each JSON document nlx prints, one per document
// type; a document changes incompatibly only with a new version. (Plans
// carry plan.FormatVersion, written by the plan package.)
const (
	versionError          = 1 // a failed command
	versionValidate       = 1 // nlx validate
	versionVersion        = 1 // nlx version
	versionDoctor         = 1 // nlx doctor
	versionLedger         = 1 // nlx apply: what the apply did
	versionApprove        = 1 // nlx approve
	versionResolve        = 1 // nlx resolve
	versionImageBuild     = 1 // nlx image build
	versionImageInspect   = 1 // nlx image inspect
	versionProcesses      = 1 // nlx ps
	versionStateList      = 1 // nlx state list
	versionStateShow      = 1 // nlx state show
	versionStateHistory   = 1 // nlx state history
	versionStateJournal   = 1 // nlx state journal
	versionStateUnlock    = 1 // nlx state unlock
	versionStateUpgrade   = 1 // nlx state upgrade
	versionStop           = 1 // nlx stop
	versionImagePush      = 1 // nlx image push
	versionImagePull      = 1 // nlx image pull
	versionImageUnpack    = 1 // nlx image unpack
	versionTurnEvent      = 1 // nlx turn --output json: one event per line
	versionTurns          = 1 // nlx turns list
	versionTurn           = 1 // nlx turns show
	versionPermissions    = 1 // nlx permissions list
	versionPermission     = 1 // nlx permissions allow|deny
	versionJobs           = 1 // nlx jobs
	versionJob            = 1 // nlx jobs show
	versionRun            = 1 // nlx run
	versionResolveClaim   = 1 // nlx resolve claim
	versionRefresh        = 1 // nlx refresh
	versionRefreshes      = 1 // nlx refreshes
	versionResolveRefresh = 1 // nlx resolve refresh
	versionStatePublish   = 1 // nlx state publish
	versionPromote        = 1 // nlx promote
	versionFollow         = 1 // nlx follow: one look
	versionWhoami         = 1 // nlx whoami
)

// document is one command's result, in every format it has. Exactly one of
// JSON (the document's fields, a struct or a map, printed with its
// format_version first) and EncodeJSON (a document that writes itself,
// version included) is set; Markdown is nil where there is none.
type document struct {
	Version    int
	JSON       any
	EncodeJSON func(w io.Writer) error
	Text       func(w io.Writer) error
	Markdown   func(w io.Writer) error
}

// view prints results on stdout and errors on stderr (or, in JSON, an error
// document on stdout), in the one format chosen for the command.
type view interface {
	// Render prints a command's result.
	Render(d document) error
	// Error prints err, a failure with reason code code.
	Error(err error, code reason.Code)
	// Format is the view's format.
	Format() format
}

// newView returns the view of format f.
func newView(f format, out, errw io.Writer) view {
	switch f {
	case formatJSON:
		return &jsonView{out: out}
	case formatMarkdown:
		return &markdownView{textView{out: out, err: errw}}
	}
	return &textView{out: out, err: errw}
}

// textView is for people: results as text on stdout, errors on stderr.
type textView struct{ out, err io.Writer }

func (v *textView) Format() format { return formatText }

func (v *textView) Render(d document) error { return d.Text(v.out) }

func (v *textView) Error(err error, code reason.Code) {
	var cfgErrs schema.Errors
	if errors.As(err, &cfgErrs) {
		for _, e := range cfgErrs {
			fmt.Fprintln(v.err, e.Error())
		}
		fmt.Fprintf(v.err, "Error: %s: %d error(s) in the configuration\n", code, len(cfgErrs))
		return
	}
	msg := err.Error()
	if reason.Of(err) == nil && code != reason.Failure {
		msg = string(code) + ": " + msg
	}
	fmt.Fprintf(v.err, "Error: %s\n", msg)
}

// markdownView is the text view with markdown results, for pull-request
// comments; errors stay text on stderr.
type markdownView struct{ textView }

func (v *markdownView) Format() format { return formatMarkdown }

func (v *markdownView) Render(d document) error { return d.Markdown(v.out) }

// jsonView is for programs: one JSON document on stdout, result or error.
type jsonView struct {
	out io.Writer
	// wrote: a document is out; a failure after it is in that document
	// (the apply ledger carries its error), never a second one.
	wrote bool
}

func (v *jsonView) Format() format { return formatJSON }

func (v *jsonView) Render(d document) error {
	v.wrote = true
	if d.EncodeJSON != nil {
		return d.EncodeJSON(v.out)
	}
	return writeVersioned(v.out, d.Version, d.JSON)
}

// diagnostic is one configuration error in the JSON error document.
type diagnostic struct {
	File    string      `json:"file,omitempty"`
	Line    int         `json:"line,omitempty"`
	Column  int         `json:"column,omitempty"`
	Path    string      `json:"path,omitempty"`
	Code    reason.Code `json:"code"`
	Message string      `json:"message"`
}

// errorBody is the error of a JSON document.
type errorBody struct {
	Code        reason.Code  `json:"code"`
	Message     string       `json:"message"`
	Fix         string       `json:"fix,omitempty"`
	Diagnostics []diagnostic `json:"diagnostics,omitempty"`
}

func newErrorBody(err error, code reason.Code) *errorBody {
	b := &errorBody{Code: code, Message: err.Error()}
	if re := reason.Of(err); re != nil {
		b.Fix = re.Fix
	}
	var cfgErrs schema.Errors
	if errors.As(err, &cfgErrs) {
		b.Message = fmt.Sprintf("%d error(s) in the configuration", len(cfgErrs))
		for _, e := range cfgErrs {
			b.Diagnostics = append(b.Diagnostics, diagnostic{
				File: e.Pos.Filename, Line: e.Pos.Line, Column: e.Pos.Column,
				Path: e.Path, Code: e.Code, Message: e.Msg,
			})
		}
	}
	return b
}

func (v *jsonView) Error(err error, code reason.Code) {
	if v.wrote {
		return
	}
	_ = writeVersioned(v.out, versionError, struct {
		Error *errorBody `json:"error"`
	}{newErrorBody(err, code)})
}

// writeVersioned prints one JSON document: format_version first, then the
// fields of doc, a struct or a map (never HTML-escaped).
func writeVersioned(w io.Writer, version int, doc any) error {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(doc); err != nil {
		return err
	}
	data := bytes.TrimSuffix(b.Bytes(), []byte("\n"))
	head := fmt.Appendf(nil, `{"format_version":%d`, version)
	if len(data) > 2 {
		head = append(head, ',')
	}
	_, err := fmt.Fprintf(w, "%s%s\n", head, data[1:])
	return err
}

// chooseView validates --output for cmd and sets the app's view.
func (a *app) chooseView(cmd *cobra.Command) error {
	f := format(a.outputFlag)
	if !slices.Contains(formatsOf(cmd), f) {
		a.view = newView(formatText, a.io.Out, a.io.Err)
		var names []string
		for _, g := range formatsOf(cmd) {
			names = append(names, string(g))
		}
		return reason.New(reason.InvalidUsage, "--output %q: %s prints %s", a.outputFlag, cmd.CommandPath(), strings.Join(names, " or "))
	}
	a.view = newView(f, a.io.Out, a.io.Err)
	return nil
}

// checkRequired refuses a command run without one of its required flags,
// before cobra would (whose error has no code).
func checkRequired(cmd *cobra.Command) error {
	var missing []string
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if req := f.Annotations[cobra.BashCompOneRequiredFlag]; len(req) > 0 && req[0] == "true" && !f.Changed {
			missing = append(missing, "--"+f.Name)
		}
	})
	if len(missing) > 0 {
		return reason.New(reason.InvalidUsage, "%s needs %s", cmd.CommandPath(), strings.Join(missing, ", "))
	}
	return nil
}

// usageCodes gives cobra's own refusals (flags it cannot parse, arguments
// a command does not take) the code invalid_usage, on every command.
func usageCodes(cmd *cobra.Command) {
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return reason.Wrap(reason.InvalidUsage, err, "")
	})
	if args := cmd.Args; args != nil {
		cmd.Args = func(c *cobra.Command, a []string) error {
			if err := args(c, a); err != nil {
				return reason.Wrap(reason.InvalidUsage, err, "")
			}
			return nil
		}
	}
	for _, sub := range cmd.Commands() {
		usageCodes(sub)
	}
}

// say renders a result that is one line of text for people and the fields
// of doc for programs.
func (a *app) say(version int, doc any, format string, args ...any) error {
	return a.view.Render(document{Version: version, JSON: doc, Text: func(w io.Writer) error {
		_, err := fmt.Fprintf(w, format+"\n", args...)
		return err
	}})
}
