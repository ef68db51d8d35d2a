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

// ParseFormat checks a --output value.
func ParseFormat(s string) (Format, error) {
	switch f := Format(s); f {
	case FormatText, FormatJSON, FormatMarkdown:
		return f, nil
	}
	return "", fmt.Errorf("unknown output format %q (want text, json or markdown)", s)
}

// View renders plans in one format.
type View struct {
	Format Format
	Color  bool // ANSI colour in the text view; only for terminals
	// MarkdownLimit caps the markdown view in characters (a pull-request
	// comment holds 65,536); 0 means 60,000.
	MarkdownLimit int
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
	if p.Empty() {
		fmt.Fprintln(w, "No changes. The state matches the configuration.")
		return
	}
	fmt.Fprintln(w, "nlx will perform the following actions:")
	for i := range p.Changes {
		c := &p.Changes[i]
		fmt.Fprintf(w, "\n  %s\n", v.paint(ansiBold, "# "+c.Address+" "+describe(c.Action)))
		for _, r := range c.Risks {
			fmt.Fprintf(w, "  %s\n", v.paint(ansiRed, "# ! "+r.Code+": "+r.Reason))
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
	if risky > 0 {
		fmt.Fprintf(&b, "**%d change(s) need a named approver before apply.**\n\n", risky)
	}
	b.WriteString("| | Resource | Action | Risks |\n|:-:|---|---|---|\n")
	var details strings.Builder
	shown := 0
	// Room for the footer, the truncation note and the code block's frame.
	reserve := len(footer) + 300
	for _, c := range p.Changes {
		row := fmt.Sprintf("| `%s` | `%s` | %s | %s |\n", c.Action.Symbol(), c.Address, c.Action, mdRisks(c.Risks))
		block := mdDetail(c)
		if b.Len()+len(row)+details.Len()+len(block)+reserve > limit {
			break
		}
		b.WriteString(row)
		details.WriteString(block)
		shown++
	}
	if shown < len(p.Changes) {
		fmt.Fprintf(&b, "\n_%d more change(s) not shown; run `nlx show` on the plan file for all of them._\n", len(p.Changes)-shown)
	}
	if details.Len() > 0 {
		// A fence longer than any run of backticks inside cannot be closed
		// by a value or a key.
		fence := strings.Repeat("`", max(3, longestRun(details.String(), '`')+1))
		b.WriteString("\n<details><summary>Field changes</summary>\n\n" + fence + "diff\n")
		b.WriteString(details.String())
		b.WriteString(fence + "\n\n</details>\n")
	}
	w.WriteString(b.String() + footer)
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

func mdRisks(rs []Risk) string {
	var parts []string
	for _, r := range rs {
		parts = append(parts, "**"+r.Code+"**: "+strings.ReplaceAll(r.Reason, "|", `\|`))
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
