package preserve

import (
	"context"
	"errors"
	"maps"
	"slices"

	"github.com/nlx-dev/nlx/internal/reason"
	"github.com/nlx-dev/nlx/reconcile"
	"github.com/nlx-dev/nlx/schema"
)

// Import is what the export e brings into the state for the preservation
// name configured as p: the held jobs (placed by p's targets), and the
// conversations of the workspaces whose chatReset decision is "preserve"
// (a reset decided for one workspace never reaches another's).
func (e *Export) Import(name string, p *schema.Preservation) *reconcile.Import {
	m := e.Manifest
	im := &reconcile.Import{Preservation: name, Manifest: e.ManifestHash, Era: int(m.Source.Era), SourcePath: m.Source.Path,
		ExportDir: e.Dir, Counts: map[string]int64{}, Hashes: map[string]string{}}
	for k, n := range m.Counts {
		im.Counts[string(k)] = n
	}
	for k, h := range m.Hashes {
		im.Hashes[string(k)] = h
	}
	for _, j := range e.Projections.Jobs {
		spec, unsupported := j.Spec(p)
		im.Jobs = append(im.Jobs, reconcile.ImportedJob{Name: j.Name, SourceID: j.SourceID, Record: j.Record, Spec: spec,
			Unsupported: unsupported, Completed: j.Completed, Running: j.Running, LastOutcome: j.LastOutcome})
	}
	for _, c := range e.Projections.Conversations {
		w := p.Target(c.Agent).Workspace
		if p.ChatReset[w] != "preserve" {
			continue
		}
		im.Conversations = append(im.Conversations, reconcile.ImportedConversation{SessionKey: c.Agent + "/" + c.SessionKey, Workspace: w,
			Conversation: c.Conversation, SessionID: c.SessionID, Transcript: c.Transcript, Entries: c.Entries})
	}
	return im
}

// Imports reads the export of every preservation of cfg that has one.
// verify names the preservations whose export is proved whole record by
// record (Verify); the others are read by their manifest (ReadExport). A
// preservation without an export imports nothing yet.
func Imports(ctx context.Context, cfg *schema.Config, verify func(name string) bool) (map[string]*reconcile.Import, error) {
	out := map[string]*reconcile.Import{}
	for _, name := range slices.Sorted(maps.Keys(cfg.Preservations)) {
		p := cfg.Preservations[name]
		read := ReadExport
		if verify != nil && verify(name) {
			read = func(dir string) (*Export, error) { return Verify(ctx, dir) }
		}
		e, err := read(p.Export)
		var re *reason.Error
		if errors.As(err, &re) && re.Code == reason.ExportMissing {
			continue
		}
		if err != nil {
			return nil, err
		}
		if e.Manifest.Source.Path != p.Source.Path {
			return nil, reason.New(reason.ExportCorrupt, "the export %s of preservation %s was taken of %s, not of its source %s", p.Export, name, e.Manifest.Source.Path, p.Source.Path)
		}
		out[name] = e.Import(name, p)
	}
	return out, nil
}
