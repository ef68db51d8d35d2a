package reconcile

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/nlx-dev/nlx/internal/fault"
	"github.com/nlx-dev/nlx/plan"
	"github.com/nlx-dev/nlx/schema"
)

// Reason codes of apply refusals. Nothing is written when apply refuses.
const (
	CodeLineageMismatch = "lineage_mismatch" // the plan was made against another state
	CodeStalePlan       = "stale_plan"       // the state's serial moved since the plan
	CodeConfigChanged   = "config_changed"   // a config input changed since the plan
)

// ApplyOptions tune Apply.
type ApplyOptions struct {
	// ConfigDir is read to prove the config is unchanged; empty skips the
	// check (the caller has just planned from it in the same process).
	ConfigDir string
	Actor     string // who applies; recorded in the state
	// BatchSize is how many state-only changes share one transaction
	// (default DefaultBatchSize). Each change is still journaled on its own.
	BatchSize int
}

// DefaultBatchSize is the default ApplyOptions.BatchSize: large enough that
// a 14,000-change apply costs tens of transactions, not thousands.
const DefaultBatchSize = 500

func (o ApplyOptions) batchSize() int {
	if o.BatchSize > 0 {
		return o.BatchSize
	}
	return DefaultBatchSize
}

// LedgerEntry is one change as it actually ended.
type LedgerEntry struct {
	Address string      `json:"address"`
	Action  plan.Action `json:"action"`
	Phase   string      `json:"phase"` // committed, failed, or not_started
	Error   string      `json:"error,omitempty"`
}

// Ledger is what an apply actually did; it is returned on every exit path
// once the state was touched.
type Ledger struct {
	PlanHash     string        `json:"plan_hash"`
	Lineage      string        `json:"lineage"`
	SerialBefore int64         `json:"serial_before"`
	SerialAfter  int64         `json:"serial_after"`
	Entries      []LedgerEntry `json:"changes"`
	Summary      plan.Summary  `json:"summary"` // of committed changes only
	TookOverLock *Holder       `json:"-"`
}

func (l *Ledger) committed() int {
	n := 0
	for _, e := range l.Entries {
		if e.Phase == "committed" {
			n++
		}
	}
	return n
}

// CheckInputs proves that the config in dir is byte for byte what p was
// planned from.
func CheckInputs(dir string, p *plan.Plan) error {
	now, err := schema.Rehash(dir, p.Inputs.Dirs)
	if err != nil {
		return plan.Refusef(CodeConfigChanged, "config %s cannot be read as planned: %v", dir, err)
	}
	if now.Hash == p.Inputs.ConfigHash {
		return nil
	}
	planned := schema.Inputs{Files: p.Inputs.Files}
	changed := schema.Changed(planned, now)
	return plan.Refusef(CodeConfigChanged, "config %s changed since the plan (%s); plan again",
		dir, strings.Join(limit(changed, 10), ", "))
}

func limit(s []string, n int) []string {
	if len(s) <= n {
		return s
	}
	return append(s[:n:n], "and "+strconv.Itoa(len(s)-n)+" more")
}

// Apply carries out p against store: it verifies that the config and the
// state are those p was made from, takes the lock, bumps the serial once,
// and applies each change in its own transaction, journaled intended then
// committed. A refusal writes nothing.
func Apply(ctx context.Context, store Store, p *plan.Plan, opts ApplyOptions) (*Ledger, error) {
	if opts.ConfigDir != "" {
		if err := CheckInputs(opts.ConfigDir, p); err != nil {
			return nil, err
		}
	}
	lock, err := store.Lock(ctx, "apply")
	if err != nil {
		return nil, err
	}
	defer store.Unlock(context.WithoutCancel(ctx), lock.ID)
	fault.Point("apply.locked")

	lineage, serial, err := store.Meta(ctx)
	if err != nil {
		return nil, err
	}
	ledger := &Ledger{PlanHash: p.PlanHash, Lineage: lineage, SerialBefore: serial, SerialAfter: serial, TookOverLock: lock.TookOverFrom}
	switch {
	case lineage != p.State.Lineage:
		return ledger, plan.Refusef(CodeLineageMismatch, "the plan was made against state lineage %s, but this state is lineage %s", p.State.Lineage, lineage)
	case serial != p.State.Serial:
		return ledger, plan.Refusef(CodeStalePlan, "the plan was made at state serial %d, but the state is at serial %d; plan again", p.State.Serial, serial)
	}
	for _, c := range p.Changes {
		ledger.Entries = append(ledger.Entries, LedgerEntry{Address: c.Address, Action: c.Action, Phase: "not_started"})
	}
	if p.Empty() {
		return ledger, nil
	}

	id, newSerial, err := store.BeginApply(ctx, lock.ID, p.PlanHash, opts.Actor, lineage, serial)
	if err != nil {
		return ledger, fmt.Errorf("begin apply: %w", err)
	}
	ledger.SerialAfter = newSerial
	fault.Point("apply.begun")
	for start, batch := 0, 1; start < len(p.Changes); batch++ {
		end := min(start+opts.batchSize(), len(p.Changes))
		group := p.Changes[start:end]
		if err := ctx.Err(); err != nil {
			return ledger, finish(ctx, store, id, ledger, fmt.Errorf("interrupted before %s: %w", group[0].Address, err))
		}
		if err := store.Intend(ctx, id, group); err != nil {
			return ledger, finish(ctx, store, id, ledger, fmt.Errorf("journal intents: %w", err))
		}
		fault.Point("apply.intended." + strconv.Itoa(batch))
		if err := store.Commit(ctx, id, newSerial, group); err != nil {
			for i := start; i < end; i++ {
				ledger.Entries[i].Phase, ledger.Entries[i].Error = "failed", err.Error()
			}
			return ledger, finish(ctx, store, id, ledger, err)
		}
		for i := start; i < end; i++ {
			ledger.Entries[i].Phase = "committed"
		}
		fault.Point("apply.committed." + strconv.Itoa(batch))
		start = end
	}
	return ledger, finish(ctx, store, id, ledger, nil)
}

// finish records the end of an apply, even when ctx was cancelled, and
// returns the apply's error.
func finish(ctx context.Context, store Store, id int64, l *Ledger, applyErr error) error {
	var done []plan.Change
	failed := 0
	for _, e := range l.Entries {
		switch e.Phase {
		case "committed":
			done = append(done, plan.Change{Action: e.Action})
		case "failed":
			failed++
		}
	}
	l.Summary = plan.Summarize(done)
	err := store.FinishApply(context.WithoutCancel(ctx), id, ApplyResult{Committed: l.committed(), Failed: failed, Err: applyErr})
	return errors.Join(applyErr, err)
}
