package reconcile

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"github.com/nlx-dev/nlx/internal/reason"
	"github.com/nlx-dev/nlx/plan"
	"github.com/nlx-dev/nlx/schema"
)

// Import is what a preservation's export brings into the state: read from
// the export by the caller (package preserve), handed to the planner and,
// proved again against the export, to the apply that writes it.
type Import struct {
	Preservation string
	Manifest     string // "sha256:..." of the export's manifest.json: the source revision
	Era          int
	SourcePath   string
	ExportDir    string
	Counts       map[string]int64
	Hashes       map[string]string
	Jobs         []ImportedJob
	// Conversations are the sessions kept as evidence: only those of
	// workspaces whose chatReset decision is "preserve".
	Conversations []ImportedConversation
}

// ImportedJob is one job an import creates, held.
type ImportedJob struct {
	Name        string
	SourceID    string
	Record      string // "sha256:..." of its canonical record
	Spec        schema.Job
	Unsupported []string // non-empty: it stays held whatever a release says
	Completed   string   // a one-time occurrence that completed: a succeeded claim
	Running     string   // an interrupted run: an unknown claim
	LastOutcome string
}

// ImportedConversation is one session kept as evidence.
type ImportedConversation struct {
	SessionKey   string
	Workspace    string
	Conversation string
	SessionID    string
	Transcript   string // in the export's raw/
	Entries      int64
}

// HeldImport is what the state knows of a held imported resource.
type HeldImport struct {
	Preservation string
	Manifest     string
	Unsupported  []string
}

// pinImports writes each preservation's import pin into its spec: the
// export's revision when there is an export, else the one the state
// already records (an export may be gone once imported).
func pinImports(cfg *schema.Config, imports map[string]*Import, snap *Snapshot) {
	applied := map[string]*schema.ImportPin{}
	for _, r := range snap.Resources {
		if r.Kind != schema.KindPreservation {
			continue
		}
		var p schema.Preservation
		if json.Unmarshal(r.Spec, &p) == nil && p.Import != nil {
			applied[r.Name] = p.Import
		}
	}
	for name, p := range cfg.Preservations {
		switch im := imports[name]; {
		case im != nil:
			p.Import = &schema.ImportPin{Manifest: im.Manifest, Era: im.Era}
		case applied[name] != nil:
			p.Import = applied[name]
		default:
			p.Import = nil
		}
	}
}

// importRefusal is a refusal of a preservation's change found while
// adding its import to the desired resources.
type importRefusal struct {
	address string
	code    reason.Code
	why     string
}

// desiredImports adds to desired the jobs each import creates (held), and
// keeps every held resource the config does not define as it is: a held
// import is never deleted by being absent from the config, and leaves the
// held state only through a reviewed change defining it.
func desiredImports(desired []Resource, cfg *schema.Config, imports map[string]*Import, snap *Snapshot) ([]Resource, []importRefusal, error) {
	inDesired := map[string]bool{}
	for i := range desired {
		inDesired[desired[i].Address()] = true
	}
	inState := map[string]*Resource{}
	for i := range snap.Resources {
		inState[snap.Resources[i].Address()] = &snap.Resources[i]
	}
	var refusals []importRefusal
	for _, name := range slices.Sorted(maps.Keys(imports)) {
		im := imports[name]
		addr := string(schema.KindPreservation) + "." + name
		if r := inState[addr]; r != nil {
			var p schema.Preservation
			if json.Unmarshal(r.Spec, &p) == nil && p.Import != nil {
				if p.Import.Manifest != im.Manifest {
					refusals = append(refusals, importRefusal{addr, reason.PreservationRevisionChanged, fmt.Sprintf(
						"imported from source revision %s, but the export %s now holds %s; nothing more is imported (a new installation needs a preservation of its own)",
						p.Import.Manifest, im.ExportDir, im.Manifest)})
				}
				continue // imported: its jobs are in the state
			}
		}
		if bad := CheckExpected(cfg.Preservations[name], im); len(bad) > 0 {
			for _, r := range bad {
				refusals = append(refusals, importRefusal{addr, r.Code, r.Reason})
			}
			continue // nothing of it is imported
		}
		for _, j := range im.Jobs {
			jaddr := string(schema.KindJob) + "." + j.Name
			if inDesired[jaddr] {
				refusals = append(refusals, importRefusal{addr, reason.ImportNameConflict, fmt.Sprintf(
					"the config defines job %s, which this import creates (from OpenClaw job %s): import first, then release it with that definition", j.Name, j.SourceID)})
				continue
			}
			if inState[jaddr] != nil {
				refusals = append(refusals, importRefusal{addr, reason.ImportNameConflict, fmt.Sprintf(
					"job %s is applied already; this import would create it again (from OpenClaw job %s)", j.Name, j.SourceID)})
				continue
			}
			spec, err := plan.JSON(j.Spec)
			if err != nil {
				return nil, nil, fmt.Errorf("encode imported job %s: %w", j.Name, err)
			}
			desired = append(desired, Resource{Kind: schema.KindJob, Name: j.Name, Spec: spec, Hash: HashSpec(spec), Status: StatusHeld, Import: name})
			inDesired[jaddr] = true
		}
	}
	for i := range snap.Resources {
		r := snap.Resources[i]
		if r.Status == StatusHeld && !inDesired[r.Address()] {
			desired = append(desired, r)
			inDesired[r.Address()] = true
		}
	}
	return desired, refusals, nil
}

// CheckExpected compares an import's counts and hashes with what the
// preservation expects: each difference refuses the import.
func CheckExpected(p *schema.Preservation, im *Import) []plan.Refusal {
	var out []plan.Refusal
	if p == nil {
		return nil
	}
	for _, k := range slices.Sorted(maps.Keys(p.Expected.Counts)) {
		if got, want := im.Counts[k], p.Expected.Counts[k]; got != want {
			out = append(out, plan.Refusal{Code: reason.PreservationCountMismatch, Reason: fmt.Sprintf(
				"the export %s holds %d %s records; expected.counts says %d: nothing is imported", im.ExportDir, got, k, want)})
		}
	}
	for _, k := range slices.Sorted(maps.Keys(p.Expected.Hashes)) {
		if got, want := im.Hashes[k], p.Expected.Hashes[k]; got != want {
			out = append(out, plan.Refusal{Code: reason.PreservationHashMismatch, Reason: fmt.Sprintf(
				"the %s records of the export %s hash to %s; expected.hashes says %s: nothing is imported", k, im.ExportDir, got, want)})
		}
	}
	return out
}
