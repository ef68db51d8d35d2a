package preserve

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/nlx-dev/nlx/internal/reason"
)

// Kind is a record kind of an OpenClaw installation: what inventory counts
// and hashes, and what a preservation's expected.counts names
// (schema.RecordKinds lists the same values).
type Kind string

// The record kinds.
const (
	KindConfig             Kind = "config"
	KindJobs               Kind = "jobs"
	KindQuarantined        Kind = "quarantined"
	KindRuns               Kind = "runs"
	KindSessions           Kind = "sessions"
	KindTranscripts        Kind = "transcripts"
	KindTranscriptEntries  Kind = "transcript_entries"
	KindTranscriptArchives Kind = "transcript_archives"
	KindSkills             Kind = "skills"
	KindSkillInstalls      Kind = "skill_installs"
	KindAuthProfiles       Kind = "auth_profiles"
	KindChannelCredentials Kind = "channel_credentials"
	KindLeftovers          Kind = "leftovers"
	KindSystem             Kind = "system"
	KindUnknown            Kind = "unknown"
)

// Kinds lists every kind, in the order views show them.
var Kinds = []Kind{KindConfig, KindJobs, KindQuarantined, KindRuns, KindSessions, KindTranscripts, KindTranscriptEntries,
	KindTranscriptArchives, KindSkills, KindSkillInstalls, KindAuthProfiles, KindChannelCredentials, KindLeftovers, KindSystem, KindUnknown}

// Era is an OpenClaw storage era: where cron jobs, sessions and
// credentials live (docs/preservation.md).
type Era int

// The eras nlx knows. Eras 1 to 3 are imported; era 4 is detected and
// refused.
const (
	Era1 Era = 1 // cron/jobs.json with each job's state inline
	Era2 Era = 2 // cron/jobs.json definitions, cron/jobs-state.json runtime
	Era3 Era = 3 // state/openclaw.sqlite, table cron_jobs
	Era4 Era = 4 // per-agent agents/<id>/agent/openclaw-agent.sqlite
)

// Action is what nlx does with a kind's records.
type Action string

// The actions.
const (
	ActionImport      Action = "import"      // into the state (jobs held, conversations as evidence)
	ActionReference   Action = "reference"   // a reference to where the secret stays, never the value
	ActionRaw         Action = "raw"         // kept in the export as found, not imported
	ActionUnsupported Action = "unsupported" // kept in the export in its own section; nlx cannot use it
	ActionDropped     Action = "dropped"     // kept raw but superseded; never imported
)

// Decision says what nlx does with a kind, and why.
type Decision struct {
	Kind   Kind   `json:"kind"`
	Action Action `json:"action"`
	Reason string `json:"reason"`
}

// decisions are the per-kind decisions, in Kinds order.
var decisions = map[Kind]Decision{
	KindConfig:             {KindConfig, ActionRaw, "openclaw.json is kept (secrets replaced by references); nlx's config is CUE, written by the operator"},
	KindJobs:               {KindJobs, ActionImport, "each job becomes a held nlx job with its enabled flag as it was; an admin's reviewed plan releases it"},
	KindQuarantined:        {KindQuarantined, ActionUnsupported, "OpenClaw itself quarantined these rows as malformed; kept for review, never imported"},
	KindRuns:               {KindRuns, ActionRaw, "run history is evidence: kept, with each job's last outcome projected; never replayed"},
	KindSessions:           {KindSessions, ActionImport, "session keys become conversation keys (per the workspace's chatReset decision), kept as evidence, never a replay queue"},
	KindTranscripts:        {KindTranscripts, ActionRaw, "transcripts are kept as evidence of their conversation"},
	KindTranscriptEntries:  {KindTranscriptEntries, ActionRaw, "transcript entries are kept as evidence, never replayed to a provider"},
	KindTranscriptArchives: {KindTranscriptArchives, ActionRaw, "reset and deleted transcripts are kept as found"},
	KindSkills:             {KindSkills, ActionRaw, "skill packages are kept and checked against the Agent Skills format; a skills resource of the config adopts one"},
	KindSkillInstalls:      {KindSkillInstalls, ActionRaw, "ClawHub install records are kept as provenance"},
	KindAuthProfiles:       {KindAuthProfiles, ActionReference, "credentials stay where they are: connections get a file: or env: reference, never a copied value"},
	KindChannelCredentials: {KindChannelCredentials, ActionReference, "channel credentials stay where they are; the export holds a reference"},
	KindLeftovers:          {KindLeftovers, ActionDropped, "*.migrated files are what openclaw doctor already moved into state/openclaw.sqlite; importing them would replay stale data"},
	KindSystem:             {KindSystem, ActionRaw, "OpenClaw's own system files (devices, identity, logs, workspace notes) are kept as found (secrets replaced by references)"},
	KindUnknown:            {KindUnknown, ActionUnsupported, "files and rows nlx does not understand are kept in their own section, never interpreted"},
}

// refuse is a reason error of code.
func refuse(code reason.Code, format string, args ...any) error {
	return reason.New(code, format, args...)
}

// DetectEra finds the storage era of the installation at dir, from what is
// there: never configured. It refuses era 4, and a directory that is no
// OpenClaw installation.
func DetectEra(dir string) (Era, error) {
	fi, err := os.Stat(dir)
	if err != nil {
		return 0, refuse(reason.SourceUnreadable, "OpenClaw installation %s: %v", dir, err)
	}
	if !fi.IsDir() {
		return 0, refuse(reason.SourceUnreadable, "OpenClaw installation %s is not a directory", dir)
	}
	if agents, _ := filepath.Glob(filepath.Join(dir, "agents", "*", "agent", "openclaw-agent.sqlite")); len(agents) > 0 {
		rel, _ := filepath.Rel(dir, agents[0])
		return Era4, refuse(reason.SourceEraUnsupported,
			"OpenClaw installation %s is of storage era 4 (found %s: sessions and transcripts in per-agent SQLite, from 2026.7.2-beta.1 on); nlx imports eras 1 to 3: export it with an OpenClaw of an earlier era, or wait for nlx to read era 4", dir, rel)
	}
	exists := func(rel string) bool {
		_, err := os.Lstat(filepath.Join(dir, rel))
		return err == nil
	}
	switch {
	case exists("state/openclaw.sqlite"):
		return Era3, nil
	case exists("cron/jobs-state.json"):
		return Era2, nil
	case exists("cron/jobs.json") || exists("openclaw.json"):
		return Era1, nil
	}
	return 0, refuse(reason.SourceUnreadable, "%s holds no OpenClaw installation (no openclaw.json, cron/jobs.json or state/openclaw.sqlite)", dir)
}

func (e Era) String() string { return fmt.Sprintf("era %d", int(e)) }
