package turn

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/nlx-dev/nlx/provider"
)

// Redacted replaces every secret Redactor finds.
const Redacted = "[redacted]"

// skToken is what an API key looks like (OpenAI's sk-..., Anthropic's
// sk-ant-...): redacted wherever it appears, whoever's it is.
var skToken = regexp.MustCompile(`\bsk-[A-Za-z0-9_-]{16,}`)

// secretKey names a credential file's fields whose values are secrets.
var secretKey = regexp.MustCompile(`(?i)(key|token|secret|password|credential)`)

// Redactor removes secrets from what a turn shows and keeps: the
// connection's secret, every sk-looking token, and the secret fields of
// the JSON files in the connection's credential home (auth.json,
// .credentials.json: the provider's own sign-in).
type Redactor struct {
	secrets []string // longest first
}

// NewRedactor collects the secrets: secret (may be empty) and those in the
// credential home directory home ("" for none).
func NewRedactor(secret, home string) *Redactor {
	r := &Redactor{}
	r.add(secret)
	if home != "" {
		entries, _ := os.ReadDir(home)
		for _, e := range entries {
			if e.Type().IsRegular() && strings.HasSuffix(e.Name(), ".json") {
				r.fromFile(filepath.Join(home, e.Name()))
			}
		}
	}
	slices.SortFunc(r.secrets, func(a, b string) int { return len(b) - len(a) })
	return r
}

// minSecret is the shortest value of a credential file redacted: shorter
// ones (a "type" of "oauth", a boolean) are not secrets and would blank
// out ordinary words.
const minSecret = 12

// add notes a secret; the connection's own is redacted whatever its
// length.
func (r *Redactor) add(s string) {
	if s != "" && !slices.Contains(r.secrets, s) {
		r.secrets = append(r.secrets, s)
	}
}

func (r *Redactor) fromFile(path string) {
	fi, err := os.Stat(path)
	if err != nil || fi.Size() > 1<<20 {
		return
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return
	}
	var v any
	if json.Unmarshal(data, &v) != nil {
		return
	}
	var walk func(key string, v any)
	walk = func(key string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				walk(k, x)
			}
		case []any:
			for _, x := range v {
				walk(key, x)
			}
		case string:
			if secretKey.MatchString(key) && len(v) >= minSecret {
				r.add(v)
			}
		}
	}
	walk("", v)
}

// String returns s with every secret replaced.
func (r *Redactor) String(s string) string {
	if s == "" {
		return s
	}
	for _, sec := range r.secrets {
		s = strings.ReplaceAll(s, sec, Redacted)
	}
	return skToken.ReplaceAllString(s, Redacted)
}

// Event returns e with every text it carries redacted.
func (r *Redactor) Event(e provider.Event) provider.Event {
	e.Text = r.String(e.Text)
	if e.Tool != nil {
		t := *e.Tool
		t.Input, t.Output = r.String(t.Input), r.String(t.Output)
		e.Tool = &t
	}
	if e.Permission != nil {
		p := r.Permission(*e.Permission)
		e.Permission = &p
	}
	if e.Result != nil {
		res := r.Result(*e.Result)
		e.Result = &res
	}
	return e
}

// Permission returns p redacted.
func (r *Redactor) Permission(p provider.Permission) provider.Permission {
	p.Command, p.Reason, p.Cwd = r.String(p.Command), r.String(p.Reason), r.String(p.Cwd)
	paths := make([]string, len(p.Paths))
	for i, x := range p.Paths {
		paths[i] = r.String(x)
	}
	p.Paths = paths
	if p.Decision != nil {
		d := *p.Decision
		d.Reason = r.String(d.Reason)
		p.Decision = &d
	}
	return p
}

// Result returns res redacted.
func (r *Redactor) Result(res provider.Result) provider.Result {
	res.Text, res.Note = r.String(res.Text), r.String(res.Note)
	if res.Error != nil {
		e := *res.Error
		e.Message = r.String(e.Message)
		res.Error = &e
	}
	return res
}
