package plan

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/nlx-dev/nlx/schema"
)

// trickyStrings are the strings where a hand-written JSON string encoder is
// most likely to part from encoding/json: every control character, the
// characters encoding/json escapes only in HTML mode, the JavaScript line
// terminators, and broken UTF-8.
var trickyStrings = []struct{ name, s string }{
	{"empty", ""},
	{"plain", "plain"},
	{"quotes and backslashes", `quote " and backslash \ and \\ and \"`},
	{"lone backslash", `\`},
	{"lone quote", `"`},
	{"every control character", allControls()},
	{"short escapes", "\b\f\n\r\t"},
	{"NUL inside", "a\x00b"},
	{"ANSI escape", "\x1b[31mred\x1b[0m"},
	{"DEL", "\x7f"},
	{"HTML characters", "<script>alert(1)</script> & &amp;"},
	{"U+2028 and U+2029 inside", "line\u2028separator\u2029paragraph"},
	{"U+2028 and U+2029 alone", "\u2028\u2029"},
	{"neighbours of U+2028", "\u2027\u202a"},
	{"U+2028 cut short", "\xe2\x80"},
	{"U+2028 as bytes", "\xe2\x80\xa8tail"},
	{"byte 0xff", "\xff"},
	{"bytes 0xfe 0xff", "\xfe\xff invalid"},
	{"overlong NUL", "ok\xc0\x80overlong"},
	{"surrogate as UTF-8", "\xed\xa0\x80"},
	{"past U+10FFFF", "\xf4\x90\x80\x80"},
	{"four bytes cut short", "\xf0\x9f\x8e"},
	{"invalid at the end", "tail\xe2"},
	{"U+FFFD itself", "\ufffd"},
	{"non-ASCII", "héllo wörld, 日本語, 🎉"},
	{"C1 and invisible", "\u0085\u00a0\u200b\ufeff"},
	{"quoted map key", `labels["a.b"]`},
	{"long mixed", strings.Repeat("x", 300) + "\"" + strings.Repeat("é", 300) + "\x01"},
}

func allControls() string {
	var b strings.Builder
	for c := 0; c < 0x20; c++ {
		b.WriteByte(byte(c))
		b.WriteByte('.')
	}
	return b.String()
}

// stringsPlan puts s in every string field of a plan.
func stringsPlan(s string) *Plan {
	return &Plan{
		FormatVersion: FormatVersion,
		NlxVersion:    s,
		State:         StateRef{Lineage: s, Serial: -1},
		Inputs: Inputs{
			ConfigDir:  s,
			ConfigHash: s,
			Files:      []schema.InputFile{{Path: s, SHA256: s, Size: 1}},
			Dirs:       []string{s},
		},
		Changes: []Change{{
			Address: s,
			Kind:    schema.Kind(s),
			Name:    s,
			Action:  Action(s),
			Risks:   []Risk{{Code: RiskCode(s), Reason: s}},
			Diff:    []FieldDiff{{Path: s, Before: raw(`1`), After: raw(`2`)}},
			Before:  raw(`{}`),
			After:   raw(`{}`),
		}},
		PlanHash: s,
	}
}

// TestCanonicalMatchesEncodingJSON holds the hand-written canonical encoder
// to its contract: byte for byte what JSON(p) gives.
func TestCanonicalMatchesEncodingJSON(t *testing.T) {
	tests := []struct {
		name string
		p    *Plan
	}{
		{"zero plan", &Plan{}},
		{"empty plan with empty slices", &Plan{
			FormatVersion: FormatVersion,
			Inputs:        Inputs{Files: []schema.InputFile{}, Dirs: []string{}},
			Changes:       []Change{},
		}},
		{"nil changes", &Plan{FormatVersion: FormatVersion, Changes: nil}},
		{"nil risks and diff", &Plan{Changes: []Change{{
			Address: "workspace.a", Kind: schema.KindWorkspace, Name: "a", Action: Create,
			Risks: nil, Diff: nil, After: raw(`{"team":"t"}`),
		}}}},
		{"empty risks and diff", &Plan{Changes: []Change{{
			Address: "workspace.a", Kind: schema.KindWorkspace, Name: "a", Action: Create,
			Risks: []Risk{}, Diff: []FieldDiff{}, Before: raw(`null`), After: raw(`{"team":"t"}`),
		}}}},
		{"nil and null before and after", &Plan{Changes: []Change{
			{Address: "a", Action: Create, Before: nil, After: nil},
			{Address: "b", Action: Delete, Before: raw(`null`), After: raw(`null`)},
		}}},
		{"all four actions", &Plan{Changes: []Change{
			{Address: "provider.p", Kind: schema.KindProvider, Name: "p", Action: Create, After: raw(`{"kind":"acp"}`)},
			{Address: "workspace.w", Kind: schema.KindWorkspace, Name: "w", Action: Update, Before: raw(`{"policy":"read_only"}`), After: raw(`{"policy":"trusted_local"}`)},
			{Address: "job.j", Kind: schema.KindJob, Name: "j", Action: Delete, Before: raw(`{"enabled":true}`)},
			{Address: "image.i", Kind: schema.KindImage, Name: "i", Action: Replace, Before: raw(`{"base":"scratch"}`), After: raw(`{"base":"oci:/x"}`)},
		}, Summary: Summary{Add: 2, Change: 1, Destroy: 2}}},
		{"risks", &Plan{Changes: []Change{{
			Address: "workspace.w", Action: Update,
			Risks: []Risk{
				{Code: "permission_widening", Reason: "policy grows"},
				{Code: "image_migration", Reason: "digest sha256:a -> sha256:b"},
				{},
			},
		}}}},
		{"diff entries", &Plan{Changes: []Change{{
			Address: "workspace.w", Action: Replace,
			Diff: []FieldDiff{
				{Path: "added", After: raw(`"x"`)},
				{Path: "removed", Before: raw(`"x"`)},
				{Path: "changed", Before: raw(`1`), After: raw(`2`)},
				{Path: "neither"},
				{Path: "forced", Before: raw(`"a"`), After: raw(`"b"`), ForcesReplace: true},
				{Path: "forced alone", ForcesReplace: true},
				{Path: "null values", Before: raw(`null`), After: raw(`null`)},
				{Path: "empty raw", Before: raw(``), After: json.RawMessage{}},
				{Path: "list", Before: raw(`["a","b"]`), After: raw(`[]`)},
				{Path: "object", Before: raw(`{}`), After: raw(`{"k":[1,{"n":null}]}`)},
				{Path: "numbers", Before: raw(`-1.5e+300`), After: raw(`0`)},
			},
		}}}},
		{"raw values holding html and line terminators", &Plan{Changes: []Change{{
			Address: "job.j", Action: Create,
			After: raw("{\"prompt\":\"<b>&</b> \u2028 \u2029 \\u003c é\"}"),
			Diff:  []FieldDiff{{Path: "prompt", After: raw("\"<b>&</b> \u2028\"")}},
		}}}},
		{"serials and sizes", &Plan{
			State:  StateRef{Serial: 1<<63 - 1},
			Inputs: Inputs{Files: []schema.InputFile{{Size: -1 << 63}, {Size: 0}}},
		}},
		{"negative format version", &Plan{FormatVersion: -2}},
		{"representative plan", representativePlan(t)},
		{"empty fixture plan", emptyPlan(t)},
	}
	for _, ts := range trickyStrings {
		tests = append(tests, struct {
			name string
			p    *Plan
		}{"strings: " + ts.name, stringsPlan(ts.s)})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want, err := JSON(tt.p)
			if err != nil {
				t.Fatalf("JSON: %v", err)
			}
			got, err := canonical(tt.p)
			if err != nil {
				t.Fatalf("canonical: %v", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("canonical differs from JSON\n got: %s\nwant: %s", got, want)
			}
		})
	}
}

// TestCanonicalRawMessageNotCompact shows where canonical parts from JSON:
// encoding/json compacts (and validates) every json.RawMessage, canonical
// copies it. Encode therefore writes a file that Read, which compacts raw
// values before hashing, refuses as changed.
func TestCanonicalRawMessageNotCompact(t *testing.T) {
	p := &Plan{
		FormatVersion: FormatVersion,
		Changes: []Change{{
			Address: "workspace.a", Kind: schema.KindWorkspace, Name: "a", Action: Create,
			Before: raw(`null`), After: raw("{ \"team\": \"t\" }\n"),
		}},
		Summary: Summary{Add: 1},
	}
	want, err := JSON(p)
	if err != nil {
		t.Fatalf("JSON: %v", err)
	}
	got, err := canonical(p)
	if err != nil {
		t.Fatalf("canonical: %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("canonical differs from JSON\n got: %s\nwant: %s", got, want)
	}
	data, err := Encode(p)
	if err != nil {
		t.Fatalf("Encode: %v", err)
	}
	if _, err := Read(bytes.NewReader(data)); err != nil {
		t.Errorf("Read(Encode(p)) = %v, want no error", err)
	}
}

// jsonString is encoding/json's encoding of s with HTML escaping off.
func jsonString(s string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		panic(err) // a string always encodes
	}
	return strings.TrimSuffix(b.String(), "\n")
}

func TestAppendString(t *testing.T) {
	for _, ts := range trickyStrings {
		s := ts.s
		t.Run(ts.name, func(t *testing.T) {
			want := jsonString(s)
			if got := string(appendString(nil, s)); got != want {
				t.Errorf("appendString(nil, %q)\n got: %s\nwant: %s", s, got, want)
			}
			// It appends: what is already in the buffer stays.
			if got := string(appendString([]byte(`prefix,`), s)); got != "prefix,"+want {
				t.Errorf("appendString(prefix, %q)\n got: %s\nwant: %s", s, got, "prefix,"+want)
			}
		})
	}
}

func FuzzAppendString(f *testing.F) {
	for _, ts := range trickyStrings {
		f.Add(ts.s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want := jsonString(s)
		if got := string(appendString(nil, s)); got != want {
			t.Errorf("appendString(nil, %q)\n got: %s\nwant: %s", s, got, want)
		}
	})
}
