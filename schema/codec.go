package schema

import (
	"encoding/binary"
	"errors"
	"math"

	"cuelang.org/go/cue/token"
	"github.com/nlx-dev/nlx/internal/reason"
)

// The load child (budget.go) hands its result to the parent in this binary
// form: decoding the 14,002-resource fleet's Config from JSON takes ~90 ms,
// a gob round trip ~40 ms, and a round trip through this ~8 ms (3.5 to
// encode, 4.5 to decode; BenchmarkChild), against a first plan's margin of
// a few tens of milliseconds. It keeps nil apart
// from empty, so the parent gets exactly what Load returns, and every
// decoded string is a slice of one copy of the input.

// resultVersion starts every result: parent and child are the same binary,
// but a mismatch must fail loudly, not decode garbage.
const resultVersion = "nlx-load-result-7\n"

const (
	resultConfig = 'C' // a *Config
	resultErrors = 'E' // Errors
	resultFailed = 'F' // another error, as text
)

type encoder struct{ b []byte }

func (e *encoder) uint(n uint64) { e.b = binary.AppendUvarint(e.b, n) }
func (e *encoder) int(n int64)   { e.b = binary.AppendVarint(e.b, n) }
func (e *encoder) str(s string)  { e.uint(uint64(len(s))); e.b = append(e.b, s...) }
func (e *encoder) bool(x bool)   { e.b = append(e.b, boolByte(x)) }
func (e *encoder) length(n int, isNil bool) {
	if isNil {
		e.uint(0)
		return
	}
	e.uint(uint64(n) + 1)
}

func boolByte(x bool) byte {
	if x {
		return 1
	}
	return 0
}

// decoder reads from one string so that every decoded string is a slice of
// it: one allocation for all of them.
type decoder struct {
	s   string
	off int
	err error
}

var errTruncated = errors.New("truncated load result")

func (d *decoder) fail(err error) {
	if d.err == nil {
		d.err = err
	}
	d.off = len(d.s)
}

func (d *decoder) uint() uint64 {
	var n uint64
	var shift uint
	for d.off < len(d.s) {
		c := d.s[d.off]
		d.off++
		if shift == 63 && c > 1 {
			break
		}
		n |= uint64(c&0x7f) << shift
		if c < 0x80 {
			return n
		}
		shift += 7
	}
	d.fail(errTruncated)
	return 0
}

func (d *decoder) int() int64 {
	u := d.uint()
	n := int64(u >> 1)
	if u&1 != 0 {
		n = ^n
	}
	return n
}

func (d *decoder) str() string {
	n := d.uint()
	if n > uint64(len(d.s)-d.off) {
		d.fail(errTruncated)
		return ""
	}
	s := d.s[d.off : d.off+int(n)]
	d.off += int(n)
	return s
}

func (d *decoder) bool() bool {
	if d.off >= len(d.s) {
		d.fail(errTruncated)
		return false
	}
	d.off++
	return d.s[d.off-1] == 1
}

// length returns -1 for nil.
func (d *decoder) length() int {
	n := d.uint()
	if n > uint64(len(d.s)-d.off)+1 { // every element takes at least a byte
		d.fail(errTruncated)
		return -1
	}
	return int(n) - 1
}

// Every type of a Config, field by field in declaration order.
// TestResultRoundTrip fills every field of every one of them by reflection
// and requires the round trip to give it back, so a field added to a type
// and not here fails it.

func encMap[V any](e *encoder, m map[string]V, f func(*encoder, V)) {
	e.length(len(m), m == nil)
	for k, v := range m {
		e.str(k)
		f(e, v)
	}
}

func decMap[V any](d *decoder, f func(*decoder) V) map[string]V {
	n := d.length()
	if n < 0 {
		return nil
	}
	m := make(map[string]V, n)
	for range n {
		k := d.str()
		m[k] = f(d)
	}
	return m
}

func encSlice[V any](e *encoder, s []V, f func(*encoder, V)) {
	e.length(len(s), s == nil)
	for _, v := range s {
		f(e, v)
	}
}

func decSlice[V any](d *decoder, f func(*decoder) V) []V {
	n := d.length()
	if n < 0 {
		return nil
	}
	s := make([]V, n)
	for i := range s {
		s[i] = f(d)
	}
	return s
}

// encPtr and decPtr carry a pointer that may be nil; the map values of a
// Config are never nil, but a nil one must not crash the child.
func encPtr[T any](e *encoder, p *T, f func(*encoder, *T)) {
	e.bool(p != nil)
	if p != nil {
		f(e, p)
	}
}

func decPtr[T any](d *decoder, f func(*decoder, *T)) *T {
	if !d.bool() {
		return nil
	}
	p := new(T)
	f(d, p)
	return p
}

func (e *encoder) config(c *Config) {
	encPtr(e, c.Host, (*encoder).host)
	encMap(e, c.Providers, func(e *encoder, p *Provider) { encPtr(e, p, (*encoder).provider) })
	encMap(e, c.Images, func(e *encoder, p *Image) { encPtr(e, p, (*encoder).image) })
	encMap(e, c.Tools, func(e *encoder, p *Tool) { encPtr(e, p, (*encoder).tool) })
	encMap(e, c.Workspaces, func(e *encoder, p *Workspace) { encPtr(e, p, (*encoder).workspace) })
	encMap(e, c.Connections, func(e *encoder, p *Connection) { encPtr(e, p, (*encoder).connection) })
	encMap(e, c.Skills, func(e *encoder, p *Skill) { encPtr(e, p, (*encoder).skill) })
	encMap(e, c.Jobs, func(e *encoder, p *Job) { encPtr(e, p, (*encoder).job) })
	encMap(e, c.Preservations, func(e *encoder, p *Preservation) { encPtr(e, p, (*encoder).preservation) })
	e.inputs(&c.Inputs)
	e.bool(c.FastPath)
}

func (d *decoder) config(c *Config) {
	c.Host = decPtr(d, (*decoder).host)
	c.Providers = decMap(d, func(d *decoder) *Provider { return decPtr(d, (*decoder).provider) })
	c.Images = decMap(d, func(d *decoder) *Image { return decPtr(d, (*decoder).image) })
	c.Tools = decMap(d, func(d *decoder) *Tool { return decPtr(d, (*decoder).tool) })
	c.Workspaces = decMap(d, func(d *decoder) *Workspace { return decPtr(d, (*decoder).workspace) })
	c.Connections = decMap(d, func(d *decoder) *Connection { return decPtr(d, (*decoder).connection) })
	c.Skills = decMap(d, func(d *decoder) *Skill { return decPtr(d, (*decoder).skill) })
	c.Jobs = decMap(d, func(d *decoder) *Job { return decPtr(d, (*decoder).job) })
	c.Preservations = decMap(d, func(d *decoder) *Preservation { return decPtr(d, (*decoder).preservation) })
	d.inputs(&c.Inputs)
	c.FastPath = d.bool()
}

func (e *encoder) inputs(in *Inputs) {
	encSlice(e, in.Files, func(e *encoder, f InputFile) { e.str(f.Path); e.str(f.SHA256); e.int(f.Size) })
	encStrings(e, in.Dirs)
	e.str(in.Hash)
}

func (d *decoder) inputs(in *Inputs) {
	in.Files = decSlice(d, func(d *decoder) InputFile { return InputFile{Path: d.str(), SHA256: d.str(), Size: d.int()} })
	in.Dirs = decStrings(d)
	in.Hash = d.str()
}

func (e *encoder) host(h *Host) {
	encStrings(e, h.Operators)
	e.bool(h.TwoPersonRule)
	e.bool(h.Retention != nil)
	if h.Retention != nil {
		e.int(int64(h.Retention.Days))
	}
	encMap(e, h.Actors, func(e *encoder, id Identity) { e.str(id.Unix); encStrings(e, id.Keys) })
}

func (d *decoder) host(h *Host) {
	h.Operators = decStrings(d)
	h.TwoPersonRule = d.bool()
	if d.bool() {
		h.Retention = &Retention{Days: int(d.int())}
	}
	h.Actors = decMap(d, func(d *decoder) Identity { return Identity{Unix: d.str(), Keys: decStrings(d)} })
}

func (e *encoder) provider(p *Provider) {
	e.str(p.Kind)
	e.str(p.Status)
	e.str(p.Version)
	encStrings(e, p.Command)
	encStrings(e, p.Capabilities)
	e.str(p.Feature)
	encStringMap(e, p.Env)
	encStrings(e, p.Inference)
}

func (d *decoder) provider(p *Provider) {
	p.Kind, p.Status, p.Version = d.str(), d.str(), d.str()
	p.Command, p.Capabilities = decStrings(d), decStrings(d)
	p.Feature = d.str()
	p.Env = decStringMap(d)
	p.Inference = decStrings(d)
}

func (e *encoder) image(im *Image) {
	e.str(im.Ref)
	encStrings(e, im.Platforms)
	e.str(im.Base)
	encSlice(e, im.Layers, func(e *encoder, l Layer) {
		e.str(l.Files)
		e.str(l.Go)
		encStrings(e, l.Skills)
		e.bool(l.Nlx != nil)
		e.str(l.Dest)
		e.pos(l.Pos)
	})
	encStrings(e, im.Entrypoint)
	encStrings(e, im.Cmd)
	encStringMap(e, im.Env)
	e.str(im.Workdir)
	e.str(im.User)
	encStringMap(e, im.Labels)
	e.str(im.Output)
	e.str(im.Registry)
	e.str(im.Digest)
}

func (d *decoder) image(im *Image) {
	im.Ref = d.str()
	im.Platforms = decStrings(d)
	im.Base = d.str()
	im.Layers = decSlice(d, func(d *decoder) Layer {
		l := Layer{Files: d.str(), Go: d.str(), Skills: decStrings(d)}
		if d.bool() {
			l.Nlx = &NlxLayer{}
		}
		l.Dest, l.Pos = d.str(), d.pos()
		return l
	})
	im.Entrypoint, im.Cmd = decStrings(d), decStrings(d)
	im.Env = decStringMap(d)
	im.Workdir, im.User = d.str(), d.str()
	im.Labels = decStringMap(d)
	im.Output, im.Registry, im.Digest = d.str(), d.str(), d.str()
}

func (e *encoder) tool(t *Tool) {
	encStrings(e, t.Command)
	e.str(t.URL)
	e.str(t.Endpoint)
	encStringMap(e, t.Env)
	encStringMap(e, t.Secrets)
	e.str(t.Egress)
	e.str(t.Scope)
	e.str(t.Owner)
}

func (d *decoder) tool(t *Tool) {
	t.Command = decStrings(d)
	t.URL, t.Endpoint = d.str(), d.str()
	t.Env, t.Secrets = decStringMap(d), decStringMap(d)
	t.Egress, t.Scope, t.Owner = d.str(), d.str(), d.str()
}

func (e *encoder) workspace(w *Workspace) {
	e.str(w.Team)
	e.str(w.Kind)
	e.str(w.Owner)
	e.str(w.Image)
	e.str(w.Policy)
	e.str(w.ChatReset)
	encStringMap(e, w.Members)
	e.str(w.Limits.Memory)
	e.uint(math.Float64bits(w.Limits.CPU))
	e.int(w.Limits.Pids)
	encStrings(e, w.Skills)
	encStrings(e, w.Tools)
	e.str(w.Network.Egress)
	e.str(w.ImageDigest)
	e.str(w.IdleRelease)
}

func (d *decoder) workspace(w *Workspace) {
	w.Team, w.Kind, w.Owner, w.Image, w.Policy, w.ChatReset = d.str(), d.str(), d.str(), d.str(), d.str(), d.str()
	w.Members = decStringMap(d)
	w.Limits = Limits{Memory: d.str(), CPU: math.Float64frombits(d.uint()), Pids: d.int()}
	w.Skills = decStrings(d)
	w.Tools = decStrings(d)
	w.Network = Network{Egress: d.str()}
	w.ImageDigest = d.str()
	w.IdleRelease = d.str()
}

func (e *encoder) connection(c *Connection) {
	e.str(c.Owner)
	e.str(c.Scope)
	e.str(c.Workspace)
	e.str(c.Provider)
	e.str(c.Billing)
	e.str(c.CredentialHome)
	e.str(c.Secret)
	e.int(c.Generation)
}

func (d *decoder) connection(c *Connection) {
	c.Owner, c.Scope, c.Workspace, c.Provider, c.Billing, c.CredentialHome, c.Secret = d.str(), d.str(), d.str(), d.str(), d.str(), d.str(), d.str()
	c.Generation = d.int()
}

func (e *encoder) skill(s *Skill) {
	e.str(s.Path)
	e.str(s.Version)
	e.str(s.Scope)
	e.str(s.Owner)
	e.str(s.Description)
	e.str(s.Digest)
}

func (d *decoder) skill(s *Skill) {
	s.Path, s.Version, s.Scope, s.Owner, s.Description, s.Digest = d.str(), d.str(), d.str(), d.str(), d.str(), d.str()
}

func (e *encoder) job(j *Job) {
	e.str(j.Workspace)
	e.str(j.Connection)
	e.str(j.Schedule.Cron)
	e.str(j.Schedule.Timezone)
	e.str(j.Schedule.Every)
	e.str(j.Schedule.At)
	e.str(j.Conversation)
	e.str(j.Prompt)
	e.str(j.Skill)
	e.str(j.Policy)
	e.str(j.Provider)
	e.str(j.Billing)
	e.str(j.FallbackConnection)
	e.bool(j.Enabled)
	e.bool(j.BackgroundAuthority)
	e.str(j.Concurrency)
	e.str(j.CatchUp)
}

func (d *decoder) job(j *Job) {
	j.Workspace, j.Connection = d.str(), d.str()
	j.Schedule = Schedule{Cron: d.str(), Timezone: d.str(), Every: d.str(), At: d.str()}
	j.Conversation, j.Prompt, j.Skill, j.Policy, j.Provider, j.Billing, j.FallbackConnection = d.str(), d.str(), d.str(), d.str(), d.str(), d.str(), d.str()
	j.Enabled, j.BackgroundAuthority = d.bool(), d.bool()
	j.Concurrency, j.CatchUp = d.str(), d.str()
}

func (e *encoder) preservation(p *Preservation) {
	e.str(p.Source.Kind)
	e.str(p.Source.Path)
	e.str(p.Source.LockDir)
	e.str(p.Workspace)
	e.str(p.Connection)
	encMap(e, p.Agents, func(e *encoder, t AgentTarget) { e.str(t.Workspace); e.str(t.Connection) })
	e.str(p.Timezone)
	e.str(p.Export)
	encMap(e, p.Expected.Counts, (*encoder).int)
	encStringMap(e, p.Expected.Hashes)
	encStringMap(e, p.ChatReset)
	encPtr(e, p.Import, func(e *encoder, i *ImportPin) { e.str(i.Manifest); e.int(int64(i.Era)) })
}

func (d *decoder) preservation(p *Preservation) {
	p.Source = Source{Kind: d.str(), Path: d.str(), LockDir: d.str()}
	p.Workspace, p.Connection = d.str(), d.str()
	p.Agents = decMap(d, func(d *decoder) AgentTarget { return AgentTarget{Workspace: d.str(), Connection: d.str()} })
	p.Timezone, p.Export = d.str(), d.str()
	p.Expected = Expected{Counts: decMap(d, (*decoder).int), Hashes: decStringMap(d)}
	p.ChatReset = decStringMap(d)
	p.Import = decPtr(d, func(d *decoder, i *ImportPin) { i.Manifest, i.Era = d.str(), int(d.int()) })
}

func encStrings(e *encoder, s []string) {
	e.length(len(s), s == nil)
	for _, x := range s {
		e.str(x)
	}
}

func decStrings(d *decoder) []string {
	n := d.length()
	if n < 0 {
		return nil
	}
	s := make([]string, n)
	for i := range s {
		s[i] = d.str()
	}
	return s
}

func encStringMap(e *encoder, m map[string]string) {
	e.length(len(m), m == nil)
	for k, v := range m {
		e.str(k)
		e.str(v)
	}
}

func decStringMap(d *decoder) map[string]string {
	n := d.length()
	if n < 0 {
		return nil
	}
	m := make(map[string]string, n)
	for range n {
		k := d.str()
		m[k] = d.str()
	}
	return m
}

// encodeResult encodes what LoadWith returned.
func encodeResult(cfg *Config, err error) []byte {
	size := 1 << 12
	if cfg != nil {
		for _, f := range cfg.Inputs.Files {
			size += int(min(max(f.Size, 0), 1<<30)) // about twice what the config encodes to
		}
		size = min(size, 1<<30)
	}
	e := &encoder{b: make([]byte, 0, size)}
	e.b = append(e.b, resultVersion...)
	var errs Errors
	switch {
	case err == nil:
		e.b = append(e.b, resultConfig)
		e.config(cfg)
	case errors.As(err, &errs):
		e.b = append(e.b, resultErrors)
		e.uint(uint64(len(errs)))
		for _, x := range errs {
			encodeError(e, x)
		}
	default:
		e.b = append(e.b, resultFailed)
		e.str(err.Error())
	}
	return e.b
}

func (e *encoder) pos(p token.Position) {
	e.str(p.Filename)
	e.int(int64(p.Offset))
	e.int(int64(p.Line))
	e.int(int64(p.Column))
}

func (d *decoder) pos() token.Position {
	return token.Position{Filename: d.str(), Offset: int(d.int()), Line: int(d.int()), Column: int(d.int())}
}

func encodeError(e *encoder, x *Error) {
	e.pos(x.Pos)
	e.str(x.Path)
	e.str(string(x.Code))
	e.str(x.Msg)
	encStrings(e, x.labels)
	e.str(x.format)
	encStrings(e, x.args)
}

func decodeError(d *decoder) *Error {
	x := &Error{}
	x.Pos = d.pos()
	x.Path, x.Code, x.Msg = d.str(), reason.Code(d.str()), d.str()
	x.labels = decStrings(d)
	x.format, x.args = d.str(), decStrings(d)
	return x
}

// result is what the child's LoadWith returned.
type result struct {
	cfg *Config
	err error
}

// decodeResult decodes the child's result; ok is false unless data is one
// whole result (the child may have died writing it, or before).
func decodeResult(data []byte) (r result, ok bool) {
	d := &decoder{s: string(data)}
	if len(d.s) < len(resultVersion)+1 || d.s[:len(resultVersion)] != resultVersion {
		return result{}, false
	}
	d.off = len(resultVersion) + 1
	switch d.s[len(resultVersion)] {
	case resultConfig:
		r.cfg = &Config{}
		d.config(r.cfg)
	case resultErrors:
		n := d.uint()
		if n > uint64(len(d.s)) {
			d.fail(errTruncated)
			break
		}
		errs := make(Errors, n)
		for i := range errs {
			errs[i] = decodeError(d)
		}
		r.err = errs
	case resultFailed:
		r.err = errors.New(d.str())
	default:
		return result{}, false
	}
	if d.err != nil || d.off != len(d.s) {
		return result{}, false
	}
	if r.err != nil {
		r.cfg = nil
	}
	return r, true
}
