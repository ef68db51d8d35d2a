// Package reconcile turns a desired configuration and the applied state into
// a plan (Diff, pure) and carries a plan out against the state (Apply).
package reconcile

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/nlx-dev/nlx/plan"
	"github.com/nlx-dev/nlx/schema"
)

// Resource is one resource's spec, desired or applied.
type Resource struct {
	Kind   schema.Kind
	Name   string
	Spec   json.RawMessage // plan.JSON of the kind's schema type
	Hash   string          // "sha256:" + hex SHA-256 of Spec
	Status ResourceStatus  // in the state: active or held
	Import string          // desired only: the preservation whose import creates it
}

// ResourceStatus is what the state holds a resource as.
type ResourceStatus string

// The statuses of an applied resource. An imported resource is held (under
// review) until an approved plan releases it; applying a change makes a
// resource active.
const (
	StatusActive ResourceStatus = "active"
	StatusHeld   ResourceStatus = "held"
)

// Address is the resource's kind.name.
func (r *Resource) Address() string { return string(r.Kind) + "." + r.Name }

// HashSpec returns the hash stored beside a spec.
func HashSpec(spec []byte) string {
	sum := sha256.Sum256(spec)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Desired lists the resources of cfg in dependency order.
func Desired(cfg *schema.Config) ([]Resource, error) {
	var out []Resource
	add := func(kind schema.Kind, name string, v any) error {
		spec, err := plan.JSON(v)
		if err != nil {
			return fmt.Errorf("encode %s.%s: %w", kind, name, err)
		}
		out = append(out, Resource{Kind: kind, Name: name, Spec: spec, Hash: HashSpec(spec), Status: StatusActive})
		return nil
	}
	var err error
	each := func(kind schema.Kind, names []string, get func(string) any) {
		for _, n := range names {
			if err == nil {
				err = add(kind, n, get(n))
			}
		}
	}
	// host.config always exists: the first apply on an empty state creates
	// it, bootstrapping the operators.
	host := cfg.Host
	if host == nil {
		host = &schema.Host{Operators: []string{}}
	}
	each(schema.KindHost, []string{schema.HostName}, func(string) any { return host })
	each(schema.KindProvider, slices.Sorted(maps.Keys(cfg.Providers)), func(n string) any { return cfg.Providers[n] })
	each(schema.KindImage, slices.Sorted(maps.Keys(cfg.Images)), func(n string) any { return cfg.Images[n] })
	each(schema.KindTool, slices.Sorted(maps.Keys(cfg.Tools)), func(n string) any { return cfg.Tools[n] })
	each(schema.KindWorkspace, slices.Sorted(maps.Keys(cfg.Workspaces)), func(n string) any { return cfg.Workspaces[n] })
	each(schema.KindConnection, slices.Sorted(maps.Keys(cfg.Connections)), func(n string) any { return cfg.Connections[n] })
	each(schema.KindSkill, slices.Sorted(maps.Keys(cfg.Skills)), func(n string) any { return cfg.Skills[n] })
	each(schema.KindJob, slices.Sorted(maps.Keys(cfg.Jobs)), func(n string) any { return cfg.Jobs[n] })
	each(schema.KindPreservation, slices.Sorted(maps.Keys(cfg.Preservations)), func(n string) any { return cfg.Preservations[n] })
	return out, err
}

// immutable lists, per kind, the fields that cannot change in place: a change
// to one replaces the resource.
var immutable = map[schema.Kind][]string{
	schema.KindProvider:     {"kind"},
	schema.KindWorkspace:    {"team", "kind", "owner"},
	schema.KindConnection:   {"scope", "workspace"},
	schema.KindTool:         {"scope", "owner"},
	schema.KindSkill:        {"scope", "owner"},
	schema.KindJob:          {"workspace"},
	schema.KindPreservation: {"source", "workspace"},
}

func forcesReplace(kind schema.Kind, path string) bool {
	for _, f := range immutable[kind] {
		if path == f || strings.HasPrefix(path, f+".") || strings.HasPrefix(path, f+"[") {
			return true
		}
	}
	return false
}

// Diff compares desired and actual resources and returns the changes, in the
// order apply carries them out: creates, updates and replaces by dependency
// rank (providers, images and tools, workspaces, connections and skills,
// jobs, preservations), then deletes in reverse rank. Within a rank, by address.
func Diff(desired, actual []Resource) ([]plan.Change, error) {
	have := make(map[string]*Resource, len(actual))
	for i := range actual {
		have[actual[i].Address()] = &actual[i]
	}
	// Pair each resource with its counterpart, then diff the pairs on all
	// CPUs: field diffs of a large first plan are a tenth of its time.
	type pair struct {
		kind          schema.Kind
		name          string
		before, after json.RawMessage
	}
	var pairs []pair
	for i := range desired {
		d := &desired[i]
		addr := d.Address()
		a, ok := have[addr]
		delete(have, addr)
		if ok && a.Hash == d.Hash && bytes.Equal(a.Spec, d.Spec) && a.Status == d.Status {
			continue
		}
		p := pair{kind: d.Kind, name: d.Name, after: d.Spec}
		if ok {
			p.before = a.Spec
		}
		pairs = append(pairs, p)
	}
	for _, a := range have {
		pairs = append(pairs, pair{kind: a.Kind, name: a.Name, before: a.Spec})
	}
	changes := make([]plan.Change, len(pairs))
	errs := make([]error, len(pairs))
	parallel(len(pairs), func(i int) {
		changes[i], errs[i] = change(pairs[i].kind, pairs[i].name, pairs[i].before, pairs[i].after)
	})
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	sort.Slice(changes, func(i, j int) bool { return less(&changes[i], &changes[j]) })
	return changes, nil
}

// parallel calls fn(0..n-1) on all CPUs, in chunks.
func parallel(n int, fn func(i int)) {
	workers := min(runtime.GOMAXPROCS(0), (n+255)/256)
	if workers <= 1 {
		for i := 0; i < n; i++ {
			fn(i)
		}
		return
	}
	var wg sync.WaitGroup
	chunk := (n + workers - 1) / workers
	for w := 0; w < workers; w++ {
		lo, hi := w*chunk, min((w+1)*chunk, n)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := lo; i < hi; i++ {
				fn(i)
			}
		}()
	}
	wg.Wait()
}

// less orders changes for apply.
func less(a, b *plan.Change) bool {
	ad, bd := a.Action == plan.Delete, b.Action == plan.Delete
	if ad != bd {
		return bd
	}
	ar, br := a.Kind.Rank(), b.Kind.Rank()
	if ar != br {
		if ad {
			return ar > br
		}
		return ar < br
	}
	return a.Address < b.Address
}

func change(kind schema.Kind, name string, before, after json.RawMessage) (plan.Change, error) {
	c := plan.Change{
		Address: string(kind) + "." + name,
		Kind:    kind,
		Name:    name,
		Risks:   []plan.Risk{},
		Refused: []plan.Refusal{},
		Before:  nullIfEmpty(before),
		After:   nullIfEmpty(after),
	}
	diff, err := FieldDiff(kind, before, after)
	if err != nil {
		return c, fmt.Errorf("diff %s: %w", c.Address, err)
	}
	c.Diff = diff
	switch {
	case before == nil:
		c.Action = plan.Create
	case after == nil:
		c.Action = plan.Delete
	default:
		c.Action = plan.Update
		for _, d := range diff {
			if d.ForcesReplace {
				c.Action = plan.Replace
				break
			}
		}
	}
	return c, nil
}

func nullIfEmpty(b json.RawMessage) json.RawMessage {
	if len(b) == 0 {
		return json.RawMessage("null")
	}
	return b
}

// FieldDiff lists the leaf fields that differ between two specs (either may
// be nil), sorted by path. A list of scalars is one field; a list of objects
// is compared element by element.
func FieldDiff(kind schema.Kind, before, after json.RawMessage) ([]plan.FieldDiff, error) {
	bl, err := leaves(before)
	if err != nil {
		return nil, err
	}
	al, err := leaves(after)
	if err != nil {
		return nil, err
	}
	paths := make([]string, 0, len(al)+len(bl))
	for p := range al {
		paths = append(paths, p)
	}
	for p := range bl {
		if _, ok := al[p]; !ok {
			paths = append(paths, p)
		}
	}
	sort.Strings(paths)
	diff := []plan.FieldDiff{}
	for _, p := range paths {
		b, a := bl[p], al[p]
		if bytes.Equal(b, a) {
			continue
		}
		d := plan.FieldDiff{Path: p, Before: b, After: a}
		// A field of a new or removed resource forces nothing.
		d.ForcesReplace = before != nil && after != nil && forcesReplace(kind, p)
		diff = append(diff, d)
	}
	return diff, nil
}

// leafJSON is plan.JSON for one leaf, with a fast path for the common
// scalars (a large plan has hundreds of thousands of leaves).
func leafJSON(v any) ([]byte, error) {
	switch x := v.(type) {
	case json.Number:
		return []byte(x), nil
	case bool:
		return strconv.AppendBool(nil, x), nil
	case nil:
		return []byte("null"), nil
	case string:
		if plainASCII(x) {
			b := make([]byte, 0, len(x)+2)
			b = append(b, '"')
			b = append(b, x...)
			return append(b, '"'), nil
		}
	}
	return plan.JSON(v)
}

// plainASCII reports whether s encodes in JSON as itself between quotes.
func plainASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// plainKey reports whether a map key can stand in a dotted path unquoted.
func plainKey(k string) bool {
	if k == "" {
		return false
	}
	for i, c := range k {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c == '_':
		case i > 0 && (c >= '0' && c <= '9' || c == '-'):
		default:
			return false
		}
	}
	return true
}
