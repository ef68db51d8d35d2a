package plan

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// Format is an output view of a plan.
type Format string

// The views.
const (
	FormatText     Format = "text"
	FormatJSON     Format = "json"
	FormatMarkdown Format = "markdown"
)

// View renders plans in one format.
type View struct {
	Format Format
	Color  bool // ANSI colour in the text view; only for terminals
	// MarkdownLimit caps the markdown view in characters (a pull-request
	// comment holds 65,536); 0 means 60,000.
	MarkdownLimit int
	// PlanFile is where the plan was saved, for the nlx approve commands the
	// views print; empty when it was not saved.
	PlanFile string
	// Pushed is the registry digest reference the plan was pushed to (nlx
	// plan --push): the approve commands are then signed ones, attached
	// there, for a reviewer with no shell on the host.
	Pushed string
}

// approveCommand is the exact command that approves change c of the plan.
func (v View) approveCommand(c *Change) string {
	if v.Pushed != "" {
		return SignedApproveCommand(v.Pushed, c)
	}
	file := v.PlanFile
	if file == "" {
		file = "PLANFILE" // the plan must be saved (--out) to be approved
	}
	return ApproveCommand(file, c)
}

// ApproveCommand is the exact command that approves change c of the plan
// saved as file.
func ApproveCommand(file string, c *Change) string {
	return fmt.Sprintf("nlx approve %s --change %s --actor NAME --reason TEXT", ShellQuote(file), c.Address)
}

// SignedApproveCommand is the exact command that signs an approval of
// change c of the plan pushed to ref and attaches it there.
func SignedApproveCommand(ref string, c *Change) string {
	return fmt.Sprintf("nlx approve %s --sign --key ~/.ssh/id_ed25519 --push --change %s --actor NAME --reason TEXT", ShellQuote(ref), c.Address)
}

// resolveCommand is the command that records what happened to an unknown.
func resolveCommand(address string) string {
	return fmt.Sprintf("nlx resolve %s --outcome applied|not-applied --actor NAME --reason TEXT", address)
}

// resolveClaimCommand is the command that resolves an unknown claim.
func resolveClaimCommand(id string) string {
	return fmt.Sprintf("nlx resolve claim %s --outcome succeeded|failed|not-run --actor NAME --reason TEXT", id)
}

// ShellQuote quotes s for a POSIX shell when it needs it.
func ShellQuote(s string) string {
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("-_./:@%+=,", c)) {
			return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
		}
	}
	return s
}

// NeedsApproval reports whether c has a risk an approval clears.
func (c *Change) NeedsApproval() bool {
	for _, r := range c.Risks {
		if NeedsApproval(r.Code) {
			return true
		}
	}
	return false
}

// Render writes p in the view's format.
func (v View) Render(w io.Writer, p *Plan) error {
	bw := bufio.NewWriterSize(w, 64<<10)
	var err error
	switch v.Format {
	case FormatJSON:
		var data []byte
		data, err = Encode(p)
		if err == nil {
			_, err = bw.Write(data)
		}
	case FormatMarkdown:
		v.markdown(bw, p)
	default:
		v.text(bw, p)
	}
	if err != nil {
		return err
	}
	return bw.Flush()
}

// Headline is the summary line of the text view.
func (s Summary) Headline() string {
	return fmt.Sprintf("Plan: %d to add, %d to change, %d to destroy.", s.Add, s.Change, s.Destroy)
}

const (
	ansiReset  = "\x1b[0m"
	ansiBold   = "\x1b[1m"
	ansiGreen  = "\x1b[32m"
	ansiYellow = "\x1b[33m"
	ansiRed    = "\x1b[31m"
)

func (v View) paint(color, s string) string {
	if !v.Color {
		return s
	}
	return color + s + ansiReset
}

func actionColor(a Action) string {
	switch a {
	case Create:
		return ansiGreen
	case Update:
		return ansiYellow
	default:
		return ansiRed
	}
}

func describe(a Action) string {
	switch a {
	case Create:
		return "will be created"
	case Update:
		return "will be updated in-place"
	case Delete:
		return "will be destroyed"
	case Replace:
		return "must be replaced"
	}
	return "?"
}

func (v View) text(w *bufio.Writer, p *Plan) {
	if len(p.Unknowns) > 0 {
		fmt.Fprintln(w, v.paint(ansiRed, "Outcomes nobody knows (never replayed; changes touching them carry unknown_claim):"))
		for _, u := range p.Unknowns {
			fmt.Fprintf(w, "  %s: %s dispatched by apply %d at %s\n    resolve: %s\n", u.Address, u.Action, u.ApplyID, u.At, resolveCommand(u.Address))
		}
		fmt.Fprintln(w)
	}
	if len(p.UnknownClaims) > 0 {
		fmt.Fprintln(w, v.paint(ansiRed, "Job occurrences nobody knows the outcome of (never run again; their conversations are locked; changes to the job, its workspace or connection carry unknown_claim):"))
		for _, u := range p.UnknownClaims {
			fmt.Fprintf(w, "  claim %s: job.%s due %s, dispatched at %s (workspace %s, connection %s)\n    resolve: %s\n",
				u.ID, u.Job, u.ScheduledAt, u.At, u.Workspace, u.Connection, resolveClaimCommand(u.ID))
		}
		fmt.Fprintln(w)
	}
	if p.Empty() {
		fmt.Fprintln(w, "No changes. The state matches the configuration.")
		return
	}
	fmt.Fprintln(w, "nlx will perform the following actions:")
	for i := range p.Changes {
		c := &p.Changes[i]
		what := describe(c.Action)
		if c.Import != "" {
			what += " held (imported by preservation." + c.Import + "; a reviewed plan releases it)"
		}
		fmt.Fprintf(w, "\n  %s\n", v.paint(ansiBold, "# "+c.Address+" "+what))
		for _, r := range c.Refused {
			fmt.Fprintf(w, "  %s\n", v.paint(ansiRed, "# x refused, "+string(r.Code)+": "+r.Reason))
		}
		for _, r := range c.Risks {
			fmt.Fprintf(w, "  %s\n", v.paint(ansiRed, "# ! "+string(r.Code)+": "+r.Reason))
		}
		if c.NeedsApproval() && len(c.Refused) == 0 {
			fmt.Fprintf(w, "  #   approve: %s\n", v.approveCommand(c))
		}
		sym := c.Action.Symbol()
		fmt.Fprintf(w, "%s %s %q {\n", v.paint(actionColor(c.Action), fmt.Sprintf("%3s", sym)), c.Kind, c.Name)
		width := 0
		for _, d := range c.Diff {
			width = max(width, len(d.Path))
		}
		for _, d := range c.Diff {
			mark, color, val := fieldLine(d)
			fmt.Fprintf(w, "      %s %-*s = %s", v.paint(color, mark), width, d.Path, val)
			if d.ForcesReplace {
				fmt.Fprint(w, v.paint(ansiRed, " # forces replacement"))
			}
			fmt.Fprintln(w)
		}
		fmt.Fprintln(w, "    }")
	}
	fmt.Fprintf(w, "\n%s\n", v.paint(ansiBold, p.Summary.Headline()))
	if n := p.Summary.Refused; n > 0 {
		fmt.Fprintf(w, "%s\n", v.paint(ansiRed, fmt.Sprintf("%d change(s) refused: no approval can apply them; the config must change.", n)))
	}
	if n := p.Summary.Gated; n > 0 {
		fmt.Fprintf(w, "%d change(s) need a named approver before apply.\n", n)
	}
}

// fieldLine returns the mark, its colour and the value text of one field.
func fieldLine(d FieldDiff) (mark, color, val string) {
	switch {
	case len(d.Before) == 0:
		return "+", ansiGreen, display(d.After)
	case len(d.After) == 0:
		return "-", ansiRed, display(d.Before) + " -> null"
	default:
		return "~", ansiYellow, display(d.Before) + " -> " + display(d.After)
	}
}

// display spaces out a list of scalars for reading: ["a", "b"].
func display(raw json.RawMessage) string {
	var l []json.RawMessage
	if len(raw) == 0 || raw[0] != '[' || json.Unmarshal(raw, &l) != nil {
		return string(raw)
	}
	parts := make([]string, len(l))
	for i, e := range l {
		parts[i] = string(e)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

func (v View) markdown(w *bufio.Writer, p *Plan) {
	limit := v.MarkdownLimit
	if limit <= 0 {
		limit = 60000
	}
	footer := fmt.Sprintf("\n<sub>state `%s` serial %d · config `%s` · plan `%s`</sub>\n",
		orNone(p.State.Lineage), p.State.Serial, short(p.Inputs.ConfigHash), short(p.PlanHash))
	var b strings.Builder
	s := p.Summary
	if p.Empty() {
		b.WriteString("#### nlx plan: no changes\n\nThe state matches the configuration.\n")
		w.WriteString(b.String() + footer)
		return
	}
	fmt.Fprintf(&b, "#### nlx plan: %d to add, %d to change, %d to destroy\n\n", s.Add, s.Change, s.Destroy)
	risky := 0
	for _, c := range p.Changes {
		if len(c.Risks) > 0 {
			risky++
		}
	}
	if s.Refused > 0 {
		fmt.Fprintf(&b, "**%d change(s) refused: no approval can apply them; the config must change.**\n\n", s.Refused)
	}
	if risky > 0 {
		fmt.Fprintf(&b, "**%d change(s) need a named approver before apply.**\n\n", risky)
	}
	for _, u := range p.Unknowns {
		fmt.Fprintf(&b, "- outcome unknown: `%s` (%s dispatched by apply %d at %s); never replayed, resolve with `%s`\n", u.Address, u.Action, u.ApplyID, u.At, resolveCommand(u.Address))
	}
	for _, u := range p.UnknownClaims {
		fmt.Fprintf(&b, "- outcome unknown: claim `%s` of `job.%s` (due %s, dispatched at %s); never run again, its conversation is locked; resolve with `%s`\n",
			u.ID, u.Job, u.ScheduledAt, u.At, resolveClaimCommand(u.ID))
	}
	if len(p.Unknowns)+len(p.UnknownClaims) > 0 {
		b.WriteString("\n")
	}
	b.WriteString("| | Resource | Action | Risks |\n|:-:|---|---|---|\n")
	var details, approvals strings.Builder
	shown := 0
	// Room for the footer, the truncation note and the code block's frame.
	reserve := len(footer) + 300
	for _, c := range p.Changes {
		row := fmt.Sprintf("| `%s` | `%s` | %s | %s |\n", c.Action.Symbol(), c.Address, c.Action, mdRisks(c))
		block := mdDetail(c)
		approve := ""
		if c.NeedsApproval() && len(c.Refused) == 0 {
			approve = v.approveCommand(&c) + "\n"
		}
		if b.Len()+len(row)+details.Len()+len(block)+approvals.Len()+len(approve)+reserve > limit {
			break
		}
		b.WriteString(row)
		details.WriteString(block)
		approvals.WriteString(approve)
		shown++
	}
	if shown < len(p.Changes) {
		fmt.Fprintf(&b, "\n_%d more change(s) not shown; run `nlx show` on the plan file for all of them._\n", len(p.Changes)-shown)
	}
	if approvals.Len() > 0 {
		b.WriteString("\nApprove each risky change (an operator, or an admin of its workspace):\n\n")
		b.WriteString(fenced("sh", approvals.String()))
	}
	if details.Len() > 0 {
		b.WriteString("\n<details><summary>Field changes</summary>\n\n")
		b.WriteString(fenced("diff", details.String()))
		b.WriteString("\n</details>\n")
	}
	w.WriteString(b.String() + footer)
}

// fenced wraps content in a code block whose fence is longer than any run
// of backticks inside, so no value or key can close it.
func fenced(lang, content string) string {
	fence := strings.Repeat("`", max(3, longestRun(content, '`')+1))
	return fence + lang + "\n" + content + fence + "\n"
}

// longestRun returns the length of the longest run of c in s.
func longestRun(s string, c byte) int {
	longest, run := 0, 0
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			run++
			longest = max(longest, run)
		} else {
			run = 0
		}
	}
	return longest
}

func mdRisks(c Change) string {
	var parts []string
	for _, r := range c.Refused {
		parts = append(parts, "refused, **"+string(r.Code)+"**: "+strings.ReplaceAll(r.Reason, "|", `\|`))
	}
	for _, r := range c.Risks {
		parts = append(parts, "**"+string(r.Code)+"**: "+strings.ReplaceAll(r.Reason, "|", `\|`))
	}
	return strings.Join(parts, "<br>")
}

func mdDetail(c Change) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s\n", diffMark(c.Action), c.Address)
	for _, d := range c.Diff {
		mark, _, val := fieldLine(d)
		if mark == "~" {
			mark = "!"
		}
		suffix := ""
		if d.ForcesReplace {
			suffix = "  # forces replacement"
		}
		fmt.Fprintf(&b, "%s   %s = %s%s\n", mark, d.Path, val, suffix)
	}
	return b.String()
}

func diffMark(a Action) string {
	switch a {
	case Create:
		return "+"
	case Delete:
		return "-"
	default:
		return "!"
	}
}

func short(h string) string {
	if h == "" {
		return "none"
	}
	if i := strings.IndexByte(h, ':'); i >= 0 && len(h) > i+13 {
		return h[:i+13]
	}
	return h
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
