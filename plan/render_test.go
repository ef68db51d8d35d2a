package plan

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/nlx-dev/nlx/schema"
)

var update = flag.Bool("update", false, "rewrite golden files")

// golden compares got with testdata/render/name, or writes it there with
// -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", "render", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./plan -update to write it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs (run go test ./plan -update to accept)\n%s\n--- got:\n%s\n--- want:\n%s", path, firstDiff(got, want), got, want)
	}
}

// firstDiff names the first line where got and want part.
func firstDiff(got, want []byte) string {
	g, w := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
	for i := 0; i < max(len(g), len(w)); i++ {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl || i >= len(g) || i >= len(w) {
			return fmt.Sprintf("line %d:\n got: %q\nwant: %q", i+1, gl, wl)
		}
	}
	return "same lines"
}

func render(t *testing.T, v View, p *Plan) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := v.Render(&b, p); err != nil {
		t.Fatalf("Render(%+v): %v", v, err)
	}
	return b.Bytes()
}

func TestRenderGolden(t *testing.T) {
	plans := []struct {
		name string
		p    func(testing.TB) *Plan
	}{
		{"plan", representativePlan},
		{"empty", emptyPlan},
	}
	formats := []struct {
		ext string
		v   View
	}{
		{"text", View{Format: FormatText}},
		{"json", View{Format: FormatJSON}},
		{"markdown", View{Format: FormatMarkdown}},
		// Pushed to a registry (nlx plan --push), for reviewers with no
		// shell on the host: the approve commands are signed ones.
		{"pushed.markdown", View{Format: FormatMarkdown, Pushed: "registry.example/team/pi/plan@sha256:" + strings.Repeat("ab", 32)}},
	}
	for _, pl := range plans {
		for _, f := range formats {
			name := pl.name + "." + f.ext + ".golden"
			t.Run(name, func(t *testing.T) {
				got := render(t, f.v, pl.p(t))
				golden(t, name, got)
			})
		}
	}
}

// TestRenderJSONIsThePlanFile: the JSON view is the plan file itself, so a
// program can Read what --output json printed.
func TestRenderJSONIsThePlanFile(t *testing.T) {
	for _, mk := range []func(testing.TB) *Plan{representativePlan, emptyPlan} {
		p := mk(t)
		got := render(t, View{Format: FormatJSON}, p)
		if want := encode(t, mk(t)); !bytes.Equal(got, want) {
			t.Errorf("JSON view\n%s\nwant Encode's bytes\n%s", got, want)
		}
		q, err := Read(bytes.NewReader(got))
		if err != nil {
			t.Fatalf("Read of the JSON view: %v", err)
		}
		if q.PlanHash != p.PlanHash {
			t.Errorf("JSON view hash %s, want %s", q.PlanHash, p.PlanHash)
		}
	}
}

func TestRenderDefaultsToText(t *testing.T) {
	p := representativePlan(t)
	got := render(t, View{}, p)
	want := render(t, View{Format: FormatText}, p)
	if !bytes.Equal(got, want) {
		t.Errorf("zero View\n%s\nwant the text view\n%s", got, want)
	}
}

var ansi = regexp.MustCompile("\x1b\\[[0-9;]*m")

func TestRenderColor(t *testing.T) {
	tests := []struct {
		name     string
		v        View
		p        func(testing.TB) *Plan
		wantANSI bool
	}{
		{"text with colour", View{Format: FormatText, Color: true}, representativePlan, true},
		{"text without colour", View{Format: FormatText}, representativePlan, false},
		{"empty text with colour", View{Format: FormatText, Color: true}, emptyPlan, false},
		{"markdown ignores colour", View{Format: FormatMarkdown, Color: true}, representativePlan, false},
		{"json ignores colour", View{Format: FormatJSON, Color: true}, representativePlan, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := render(t, tt.v, tt.p(t))
			if has := bytes.Contains(got, []byte("\x1b[")); has != tt.wantANSI {
				t.Errorf("output contains ANSI escapes: %v, want %v\n%q", has, tt.wantANSI, got)
			}
		})
	}

	// With the escapes taken out, the coloured text view is the plain one.
	p := representativePlan(t)
	colored := render(t, View{Format: FormatText, Color: true}, p)
	plain := render(t, View{Format: FormatText}, p)
	if got := ansi.ReplaceAll(colored, nil); !bytes.Equal(got, plain) {
		t.Errorf("coloured text without its escapes\n%s\nwant the plain text\n%s", got, plain)
	}
	for _, want := range []string{
		ansiGreen + "  +" + ansiReset,
		ansiYellow + "  ~" + ansiReset,
		ansiRed + "  -" + ansiReset,
		ansiRed + "-/+" + ansiReset,
		ansiRed + " # forces replacement" + ansiReset,
		ansiRed + "# ! destructive: deleting connection old-api" + ansiReset,
		ansiBold + "Plan: 3 to add, 1 to change, 2 to destroy." + ansiReset,
	} {
		if !bytes.Contains(colored, []byte(want)) {
			t.Errorf("coloured text lacks %q:\n%q", want, colored)
		}
	}
}

func TestSummaryLine(t *testing.T) {
	c := func(a Action, name string) Change {
		before, after := raw(`{"v":1}`), raw(`{"v":2}`)
		switch a {
		case Create:
			before = raw(`null`)
		case Delete:
			after = raw(`null`)
		}
		return Change{Address: "job." + name, Kind: schema.KindJob, Name: name, Action: a, Before: before, After: after}
	}
	tests := []struct {
		name    string
		changes []Change
		want    Summary
		line    string
	}{
		{"one create", []Change{c(Create, "a")}, Summary{Add: 1}, "Plan: 1 to add, 0 to change, 0 to destroy."},
		{"one update", []Change{c(Update, "a")}, Summary{Change: 1}, "Plan: 0 to add, 1 to change, 0 to destroy."},
		{"one delete", []Change{c(Delete, "a")}, Summary{Destroy: 1}, "Plan: 0 to add, 0 to change, 1 to destroy."},
		{"a replace adds and destroys", []Change{c(Replace, "a")}, Summary{Add: 1, Destroy: 1}, "Plan: 1 to add, 0 to change, 1 to destroy."},
		{"one of each", []Change{c(Create, "a"), c(Update, "b"), c(Delete, "c"), c(Replace, "d")},
			Summary{Add: 2, Change: 1, Destroy: 2}, "Plan: 2 to add, 1 to change, 2 to destroy."},
		{"many", []Change{c(Create, "a"), c(Create, "b"), c(Create, "c"), c(Replace, "d"), c(Replace, "e"), c(Update, "f")},
			Summary{Add: 5, Change: 1, Destroy: 2}, "Plan: 5 to add, 1 to change, 2 to destroy."},
		{"unknown actions count nothing", []Change{{Action: "upsert"}, {Action: ""}}, Summary{}, "Plan: 0 to add, 0 to change, 0 to destroy."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := Summarize(tt.changes)
			if s != tt.want {
				t.Errorf("Summarize = %+v, want %+v", s, tt.want)
			}
			if got := s.Headline(); got != tt.line {
				t.Errorf("Headline = %q, want %q", got, tt.line)
			}
			p := &Plan{FormatVersion: FormatVersion, Changes: tt.changes, Summary: s}
			lines := strings.Split(strings.TrimSuffix(string(render(t, View{Format: FormatText}, p)), "\n"), "\n")
			if got := lines[len(lines)-1]; got != tt.line {
				t.Errorf("last line of the text view %q, want %q", got, tt.line)
			}
		})
	}
}

func TestActionSymbols(t *testing.T) {
	tests := []struct {
		a                                 Action
		symbol                            string
		valid, creates, destroys, replace bool
	}{
		{Create, "+", true, true, false, false},
		{Update, "~", true, false, false, false},
		{Delete, "-", true, false, true, false},
		{Replace, "-/+", true, true, true, true},
		{"", "?", false, false, false, false},
		{"upsert", "?", false, false, false, false},
		{"Create", "?", false, false, false, false},
	}
	for _, tt := range tests {
		t.Run(strconv.Quote(string(tt.a)), func(t *testing.T) {
			if got := tt.a.Symbol(); got != tt.symbol {
				t.Errorf("Symbol = %q, want %q", got, tt.symbol)
			}
			got := [4]bool{tt.a.Valid(), tt.a.Creates(), tt.a.Destroys(), tt.a.IsReplace()}
			want := [4]bool{tt.valid, tt.creates, tt.destroys, tt.replace}
			if got != want {
				t.Errorf("Valid, Creates, Destroys, IsReplace = %v, want %v", got, want)
			}
		})
	}
}

// bigPlan has n job creates, each with a prompt and a list of skills.
func bigPlan(t testing.TB, n int) *Plan {
	t.Helper()
	changes := make([]Change, n)
	for i := range changes {
		name := fmt.Sprintf("job-%05d", i)
		changes[i] = Change{
			Address: "job." + name, Kind: schema.KindJob, Name: name, Action: Create,
			Risks: []Risk{},
			Diff: []FieldDiff{
				{Path: "prompt", After: raw(`"summarise the day"`)},
				{Path: "skills", After: raw(`["digest","notify"]`)},
			},
			Before: raw(`null`),
			After:  raw(`{"prompt":"summarise the day","skills":["digest","notify"]}`),
		}
	}
	if n > 0 {
		changes[n-1].Risks = []Risk{{Code: "held_import", Reason: "imported job leaves the held state"}}
	}
	p := &Plan{
		FormatVersion: FormatVersion,
		State:         StateRef{Lineage: testLineage, Serial: 1},
		Inputs:        Inputs{ConfigHash: testConfigHash, Files: []schema.InputFile{}},
		Changes:       changes,
		Summary:       Summarize(changes),
	}
	fillHash(t, p)
	return p
}

var notShown = regexp.MustCompile("\n_([0-9]+) more change\\(s\\) not shown; run `nlx show` on the plan file for all of them._\n")

// TestMarkdownLimit: a pull-request comment has a size cap, so the markdown
// view of a huge plan stops early and says how many changes it left out.
func TestMarkdownLimit(t *testing.T) {
	big := bigPlan(t, 20000)
	tests := []struct {
		name      string
		p         *Plan
		limit     int // the View's MarkdownLimit
		effective int // the cap it stands for
		truncated bool
	}{
		{"20,000 changes, default limit", big, 0, 60000, true},
		{"20,000 changes, 65,536", big, 65536, 65536, true},
		{"20,000 changes, 10,000", big, 10000, 10000, true},
		{"20,000 changes, negative limit is the default", big, -1, 60000, true},
		{"20 changes fit", bigPlan(t, 20), 0, 60000, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := string(render(t, View{Format: FormatMarkdown, MarkdownLimit: tt.limit}, tt.p))
			if n := utf8.RuneCountInString(out); n >= tt.effective {
				t.Errorf("markdown view is %d characters, want under %d", n, tt.effective)
			}
			rows := strings.Count(out, "\n| `+` | `job.")
			m := notShown.FindStringSubmatch(out)
			switch {
			case !tt.truncated:
				if m != nil || rows != len(tt.p.Changes) {
					t.Errorf("%d rows and note %q, want all %d rows and no note", rows, m, len(tt.p.Changes))
				}
			case m == nil:
				t.Errorf("no note on changes not shown; the view ends\n%s", out[max(0, len(out)-400):])
			default:
				hidden, _ := strconv.Atoi(m[1])
				if rows == 0 || rows+hidden != len(tt.p.Changes) {
					t.Errorf("%d rows shown and %d said not shown, want a sum of %d", rows, hidden, len(tt.p.Changes))
				}
			}
			// What is shown is whole: every shown row has its field block,
			// the code fence is closed and the footer is there.
			if got := strings.Count(out, "\n+ job."); got != rows {
				t.Errorf("%d field blocks, want one per row (%d)", got, rows)
			}
			assertFenceIntact(t, out)
			if !strings.Contains(out, "</details>") {
				t.Errorf("the field changes block is not closed:\n%s", out[max(0, len(out)-400):])
			}
			if !strings.HasSuffix(out, "plan `"+tt.p.PlanHash[:len("sha256:")+12]+"`</sub>\n") {
				t.Errorf("the view does not end with the footer:\n%s", out[max(0, len(out)-200):])
			}
			if !strings.HasPrefix(out, fmt.Sprintf("#### nlx plan: %d to add, 0 to change, 0 to destroy\n", len(tt.p.Changes))) {
				t.Errorf("the view does not start with the summary:\n%.200s", out)
			}
		})
	}
}

// TestMarkdownEscapes: values and reasons cannot break out of the table or
// the code block of the pull-request comment.
func TestMarkdownEscapes(t *testing.T) {
	p := representativePlan(t)
	p.Changes[2].Risks[0].Reason = "a | b"
	p.Changes[3].Diff[1].After = raw("\"```\\n# injected\"")
	out := string(render(t, View{Format: FormatMarkdown}, p))
	if !strings.Contains(out, `**permission_widening**: a \| b |`) {
		t.Errorf("the pipe in a risk reason is not escaped:\n%s", out)
	}
	assertFenceIntact(t, out)
}

// assertFenceIntact checks that the field changes block is opened and
// closed by one fence that nothing inside it can end.
func assertFenceIntact(t *testing.T, out string) {
	t.Helper()
	lines := strings.Split(out, "\n")
	open := -1
	for i, l := range lines {
		if strings.HasPrefix(l, "```") && strings.HasSuffix(l, "diff") {
			open = i
			break
		}
	}
	if open < 0 {
		t.Fatalf("no code block:\n%s", out)
	}
	fence := strings.TrimSuffix(lines[open], "diff")
	closed := 0
	for _, l := range lines[open+1:] {
		if strings.HasPrefix(strings.TrimLeft(l, "+-! "), fence) && strings.TrimSpace(l) != fence {
			t.Errorf("a line inside the block holds the fence %s: %q", fence, l)
		}
		if l == fence {
			closed++
		}
	}
	if closed != 1 {
		t.Errorf("the fence %s closes %d times, want once:\n%s", fence, closed, out)
	}
}

// TestMarkdownFenceInPath: a map key may hold backticks (an OCI label key is
// free text), and the field path shows it verbatim inside the code block.
func TestMarkdownFenceInPath(t *testing.T) {
	p := representativePlan(t)
	p.Changes[2].Diff[0].Path = "labels[\"```\"]"
	out := string(render(t, View{Format: FormatMarkdown}, p))
	assertFenceIntact(t, out)
	if !strings.Contains(out, "labels[\"```\"]") {
		t.Errorf("the path is not shown as it is:\n%s", out)
	}
}

// TestRenderDoesNotChangeThePlan: a view shows a plan, it does not fix it.
func TestRenderDoesNotChangeThePlan(t *testing.T) {
	for _, f := range []Format{FormatText, FormatJSON, FormatMarkdown} {
		t.Run(string(f), func(t *testing.T) {
			p := representativePlan(t)
			before, err := json.Marshal(p)
			if err != nil {
				t.Fatal(err)
			}
			render(t, View{Format: f, Color: true}, p)
			after, err := json.Marshal(p)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(after, before) {
				t.Errorf("plan after Render\n%s\nwant unchanged\n%s", after, before)
			}
		})
	}
}
