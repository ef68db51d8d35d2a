package reconcile

import (
	"github.com/nlx-dev/nlx/plan"
	"github.com/nlx-dev/nlx/schema"
)

// PlanInput is everything a plan is made from.
type PlanInput struct {
	Config     *schema.Config
	Snapshot   *Snapshot
	ConfigDir  string // as the operator gave it; recorded for apply
	NlxVersion string
	Actor      string // who makes the plan
	ActorProof string // how the actor was proven (unix:USER, key:FP), or ""
	// Images are the resolved images, by name: their digests are pinned in
	// the specs of the images and of the workspaces that use them.
	Images map[string]plan.ImagePin
	// Imports are the preservations' exports, by preservation name: their
	// revisions are pinned in the preservations' specs, and the jobs they
	// create are desired, held.
	Imports map[string]*Import
}

// Plan diffs the config against the snapshot and returns the plan, bound to
// the snapshot's lineage and serial and to the config's inputs. It is pure.
func Plan(in PlanInput) (*plan.Plan, error) {
	pinImages(in.Config, in.Images)
	pinImports(in.Config, in.Imports, in.Snapshot)
	desired, err := Desired(in.Config)
	if err != nil {
		return nil, err
	}
	desired, refusals, err := desiredImports(desired, in.Config, in.Imports, in.Snapshot)
	if err != nil {
		return nil, err
	}
	changes, err := Diff(desired, in.Snapshot.Resources)
	if err != nil {
		return nil, err
	}
	if changes == nil {
		changes = []plan.Change{}
	}
	imported := map[string]string{}
	for _, d := range desired {
		if d.Import != "" {
			imported[d.Address()] = d.Import
		}
	}
	for i := range changes {
		if changes[i].Action == plan.Create {
			changes[i].Import = imported[changes[i].Address]
		}
	}
	if err := Assess(changes, in.Config, in.Snapshot); err != nil {
		return nil, err
	}
	for _, r := range refusals {
		for i := range changes {
			if changes[i].Address == r.address {
				changes[i].Refused = append(changes[i].Refused, plan.Refusal{Code: r.code, Reason: r.why})
			}
		}
	}
	unknowns := in.Snapshot.Unknowns
	if unknowns == nil {
		unknowns = []plan.Unknown{}
	}
	basis, err := in.Snapshot.Basis()
	if err != nil {
		return nil, err
	}
	files := in.Config.Inputs.Files
	if files == nil {
		files = []schema.InputFile{}
	}
	return &plan.Plan{
		FormatVersion: plan.FormatVersion,
		NlxVersion:    in.NlxVersion,
		Actor:         in.Actor,
		ActorProof:    in.ActorProof,
		State:         plan.StateRef{Lineage: in.Snapshot.Lineage, Serial: in.Snapshot.Serial, Basis: basis},
		Inputs: plan.Inputs{
			ConfigDir:  in.ConfigDir,
			ConfigHash: in.Config.Inputs.Hash,
			Files:      files,
			Dirs:       in.Config.Inputs.Dirs,
			Images:     in.Images,
		},
		Unknowns:      unknowns,
		UnknownClaims: in.Snapshot.UnknownClaims,
		Changes:       changes,
		Summary:       plan.Summarize(changes),
	}, nil
}

// pinImages writes the resolved digests into the config's images and the
// workspaces using them, so the specs (and so the diff) carry them.
func pinImages(cfg *schema.Config, pins map[string]plan.ImagePin) {
	for name, im := range cfg.Images {
		im.Digest = pins[name].Digest
	}
	for _, w := range cfg.Workspaces {
		if w.Image != "" {
			w.ImageDigest = pins[w.Image].Digest
		}
	}
}
