package reconcile

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/nlx-dev/nlx/internal/reason"
	"github.com/nlx-dev/nlx/plan"
	"github.com/nlx-dev/nlx/schema"
)

// reason.PlanNotDerivable refuses a plan that is not exactly the plan nlx
// makes from the config inputs it names and the state at its serial: its
// changes, risks, refusals or summary were written by hand.

// Derive makes again the plan p claims to be: from cfg (loaded from p's
// config inputs, whose bytes the caller proved unchanged) and snap (the
// state at p's serial, read under the lock). What cannot be derived is
// taken from p: who planned it, with which nlx, from which directory, and
// the image digests the plan pins (apply proves those can be had; a digest
// change is gated by image_migration either way). Of the pins, only those
// of images a workspace uses are kept, with their reference and registry
// as configured.
func Derive(p *plan.Plan, cfg *schema.Config, snap *Snapshot, imports map[string]*Import) (*plan.Plan, error) {
	var pins map[string]plan.ImagePin
	for _, w := range cfg.Workspaces {
		if w.Image == "" {
			continue
		}
		pin, ok := p.Inputs.Images[w.Image]
		if !ok {
			// Planned without resolving images (a library caller); apply
			// with an ImageChecker refuses that (RequirePins).
			continue
		}
		if pins == nil {
			pins = map[string]plan.ImagePin{}
		}
		if im := cfg.Images[w.Image]; im != nil {
			pin.Ref, pin.Registry = im.Ref, im.Registry
		}
		pins[w.Image] = pin
	}
	d, err := Plan(PlanInput{Config: cfg, Snapshot: snap, ConfigDir: p.Inputs.ConfigDir,
		NlxVersion: p.NlxVersion, Actor: p.Actor, ActorProof: p.ActorProof, Images: pins, Imports: imports})
	if err != nil {
		return nil, fmt.Errorf("derive the plan: %w", err)
	}
	if d.PlanHash, err = plan.Hash(d); err != nil {
		return nil, fmt.Errorf("derive the plan: %w", err)
	}
	return d, nil
}

// RequirePins refuses a plan that pins no digest for an image one of the
// config's workspaces uses: nlx plan resolves every such image.
func RequirePins(p *plan.Plan, cfg *schema.Config) error {
	for _, name := range slices.Sorted(maps.Keys(cfg.Workspaces)) {
		w := cfg.Workspaces[name]
		if _, ok := p.Inputs.Images[w.Image]; w.Image != "" && !ok {
			return reason.New(reason.PlanNotDerivable, "workspace %s uses image %s, which the plan pins no digest for; nothing was applied (plan again)", name, w.Image)
		}
	}
	return nil
}

// CheckDerivable refuses p unless it is exactly the plan Derive makes. The
// plan hash decides (it covers every field); the message names the first
// difference, so that a reviewer sees what was edited.
func CheckDerivable(p *plan.Plan, cfg *schema.Config, snap *Snapshot, imports map[string]*Import) error {
	d, err := Derive(p, cfg, snap, imports)
	if err != nil {
		return err
	}
	want := p.PlanHash
	if want == "" {
		if want, err = plan.Hash(p); err != nil {
			return err
		}
	}
	if d.PlanHash == want {
		return nil
	}
	return reason.New(reason.PlanNotDerivable, "the plan is not what nlx plans from its config and the state at serial %d: %s; nothing was applied (plan again, and apply the file nlx writes)",
		snap.Serial, firstDifference(p, d))
}

// firstDifference describes where got departs from want, the derived plan.
func firstDifference(got, want *plan.Plan) string {
	same := func(a, b any) bool {
		x, errX := plan.JSON(a)
		y, errY := plan.JSON(b)
		return errX == nil && errY == nil && bytes.Equal(x, y)
	}
	switch {
	case got.FormatVersion != want.FormatVersion:
		return fmt.Sprintf("format_version %d, want %d", got.FormatVersion, want.FormatVersion)
	case got.State != want.State:
		return fmt.Sprintf("state %+v, want %+v", got.State, want.State)
	case got.Inputs.ConfigHash != want.Inputs.ConfigHash || !same(got.Inputs.Files, want.Inputs.Files) || !same(got.Inputs.Dirs, want.Inputs.Dirs):
		return "its config inputs are not those of the config"
	case !same(got.Inputs.Images, want.Inputs.Images):
		return fmt.Sprintf("its image pins %s are not those of the images the config's workspaces use (%s)", images(got), images(want))
	case !same(got.Unknowns, want.Unknowns):
		return fmt.Sprintf("it lists %d unknown outcome(s) where the state has %d", len(got.Unknowns), len(want.Unknowns))
	case !same(got.UnknownClaims, want.UnknownClaims):
		return fmt.Sprintf("it lists %d unknown job occurrence(s) where the state has %d", len(got.UnknownClaims), len(want.UnknownClaims))
	}
	byAddr := make(map[string]*plan.Change, len(want.Changes))
	for i := range want.Changes {
		byAddr[want.Changes[i].Address] = &want.Changes[i]
	}
	for i := range got.Changes {
		c := &got.Changes[i]
		w := byAddr[c.Address]
		switch {
		case w == nil:
			return fmt.Sprintf("it holds a change to %s that nlx does not plan", c.Address)
		case c.Action != w.Action:
			return fmt.Sprintf("%s: action %s, want %s", c.Address, c.Action, w.Action)
		case !same(c.Risks, w.Risks):
			return fmt.Sprintf("%s: risks %s, want %s", c.Address, riskCodes(c.Risks), riskCodes(w.Risks))
		case !same(c.Refused, w.Refused):
			return fmt.Sprintf("%s: refusals %s, want %s", c.Address, refusalCodes(c.Refused), refusalCodes(w.Refused))
		case !same(c.Before, w.Before):
			return fmt.Sprintf("%s: its before is not the applied spec", c.Address)
		case !same(c.After, w.After):
			return fmt.Sprintf("%s: its after is not the configured spec", c.Address)
		case !same(c, w):
			return fmt.Sprintf("%s: its field diff is not the diff of before and after", c.Address)
		}
		delete(byAddr, c.Address)
	}
	if len(byAddr) > 0 {
		missing := make([]string, 0, len(byAddr))
		for a := range byAddr {
			missing = append(missing, a)
		}
		sort.Strings(missing)
		return fmt.Sprintf("it leaves out the change to %s", missing[0])
	}
	if !same(got.Changes, want.Changes) {
		return "its changes are not in apply order"
	}
	if got.Summary != want.Summary {
		return fmt.Sprintf("summary %+v, want %+v", got.Summary, want.Summary)
	}
	return "a field differs" // nlx_version, actor and config_dir are taken from the plan
}

func riskCodes(rs []plan.Risk) string {
	codes := make([]string, len(rs))
	for i, r := range rs {
		codes[i] = string(r.Code)
	}
	return listOrNone(codes)
}

func refusalCodes(rs []plan.Refusal) string {
	codes := make([]string, len(rs))
	for i, r := range rs {
		codes[i] = string(r.Code)
	}
	return listOrNone(codes)
}

func images(p *plan.Plan) string {
	var pins []string
	for _, n := range slices.Sorted(maps.Keys(p.Inputs.Images)) {
		pins = append(pins, n+" "+p.Inputs.Images[n].Digest)
	}
	return listOrNone(pins)
}

// listOrNone joins a list for a message.
func listOrNone(items []string) string {
	if len(items) == 0 {
		return "none"
	}
	return strings.Join(items, ", ")
}
