package reconcile

import (
	"context"
	"fmt"
	"time"

	"github.com/nlx-dev/nlx/internal/procid"
	"github.com/nlx-dev/nlx/internal/reason"
	"github.com/nlx-dev/nlx/plan"
)

// Snapshot is the applied state at one serial.
type Snapshot struct {
	Lineage   string
	Serial    int64
	Resources []Resource // sorted by address
	// Unknowns are the effects whose outcome nobody knows and nobody has
	// resolved: marked unknown, or dispatched by an apply that has not
	// recorded how they went.
	Unknowns []plan.Unknown
	// UnknownClaims are the job occurrences whose outcome nobody knows
	// and nobody has resolved (nlx serve's claims).
	UnknownClaims []plan.UnknownClaim
	// Held are the held imported resources, by address: which import
	// made each and what of it nlx cannot do.
	Held map[string]HeldImport
}

// Approval is one recorded approval of one risk of one change of one plan.
type Approval struct {
	ID         int64
	PlanHash   string
	Address    string
	Risk       plan.RiskCode
	Actor      string
	Reason     string
	CreatedAt  time.Time
	ExpiresAt  time.Time
	Consumed   bool
	ConsumedBy int64 // the apply that used it
	// Proof is how the actor was proven: unix:USER or key:FINGERPRINT.
	Proof string
	// Signature is the digest of a signed approval's SSH signature; the
	// apply that uses it records it (ID 0 until then), and a signature is
	// used once.
	Signature string
	// Source is where a signed approval came from (a file, a registry
	// reference), for messages.
	Source string
}

// Outcome is what an operator resolved an unknown outcome as.
type Outcome string

// Outcomes of nlx resolve.
const (
	OutcomeApplied    Outcome = "applied"     // what was dispatched happened
	OutcomeNotApplied Outcome = "not_applied" // nothing happened
)

// ParseOutcome reads nlx resolve's --outcome: applied, not_applied, or
// not-applied as the command line spells it.
func ParseOutcome(s string) (Outcome, error) {
	switch o := Outcome(s); o {
	case OutcomeApplied, OutcomeNotApplied:
		return o, nil
	}
	if s == "not-applied" {
		return OutcomeNotApplied, nil
	}
	return "", reason.New(reason.InvalidUsage, "--outcome %q: want applied or not-applied", s)
}

// Holder describes who holds the state lock.
type Holder struct {
	LockID     string
	Operation  string
	Process    procid.Identity
	AcquiredAt time.Time
}

func (h *Holder) String() string {
	return fmt.Sprintf("%s (lock %s, %s, since %s)", h.Operation, h.LockID, h.Process, h.AcquiredAt.UTC().Format(time.RFC3339))
}

// LockedError means another run holds the state lock.
type LockedError struct {
	Holder Holder
	// Changing: the holder is changing the state (an apply or a resolve),
	// so a plan of it now would be a plan of half its changes.
	Changing bool
}

// As presents the error as state_locked, with the holder in Details.
func (e *LockedError) As(target any) bool {
	return reason.Present(target, &reason.Error{Code: reason.StateLocked, Msg: e.message(), Err: e, Details: e.Holder})
}

func (e *LockedError) Error() string { return string(reason.StateLocked) + ": " + e.message() }

func (e *LockedError) message() string {
	if e.Changing {
		return fmt.Sprintf("%s is changing the state; plan again once it has ended (if that run is gone, `nlx state unlock %s` releases it)",
			e.Holder.String(), e.Holder.LockID)
	}
	return fmt.Sprintf("the state is locked by %s; if that run is gone, `nlx state unlock %s` releases it",
		e.Holder.String(), e.Holder.LockID)
}

// Lock is a held state lock.
type Lock struct {
	ID string
	// TookOverFrom is set when the lock was taken from a holder proven dead.
	TookOverFrom *Holder
}

// ApplyResult is what an apply reports when it ends.
type ApplyResult struct {
	Committed int
	Failed    int
	Err       error
}

// Locker is the state's single-writer lock.
type Locker interface {
	// Lock takes the single-writer lock or fails with *LockedError.
	Lock(ctx context.Context, operation string) (*Lock, error)
	Unlock(ctx context.Context, lockID string) error
}

// Store is the state as Apply sees it: the lock, the journal and the
// resources an apply changes.
type Store interface {
	Locker
	// SnapshotLocked reads lineage, serial and resources consistently,
	// for the holder of the lock lockID.
	SnapshotLocked(ctx context.Context, lockID string) (*Snapshot, error)
	// Meta reads lineage and serial.
	Meta(ctx context.Context) (lineage string, serial int64, err error)
	// BeginApply checks that the lock is held, that lineage and serial are
	// still those the plan was made from, bumps the serial and records the
	// apply, all in one transaction. It returns the apply id and new serial.
	BeginApply(ctx context.Context, lockID, planHash, actor, lineage string, serial int64) (id, newSerial int64, err error)
	// Intend journals that the changes are about to be applied.
	Intend(ctx context.Context, applyID int64, changes []plan.Change) error
	// Dispatch journals that the effects of changes are about to be carried
	// out, durably: from here an unrecorded outcome is unknown.
	Dispatch(ctx context.Context, applyID int64, changes []plan.Change) error
	// Fail journals that changes failed (or were never started after a
	// dispatch) with the reason.
	Fail(ctx context.Context, applyID int64, changes []plan.Change, reason string) error
	// Commit applies changes to the resources, journals each committed and
	// consumes the approvals they used, all in one transaction: each change
	// is wholly applied or wholly not, and an approval is used once.
	// With the change of a preservation that imports, the import's
	// records (imports, by preservation) are written in the same
	// transaction as the jobs it creates held: an import is wholly there
	// or not at all.
	// Signed approvals (ID 0) are recorded in the same transaction, used.
	Commit(ctx context.Context, applyID, serial int64, changes []plan.Change, approvals []Approval, imports map[string]*Import) error
	// MarkUnknown marks every dispatched effect without an outcome unknown
	// and ends the applies that left them; the caller holds the lock, so
	// no apply that dispatched them is still running.
	MarkUnknown(ctx context.Context, lockID string) ([]plan.Unknown, error)
	// Unknowns lists the outcomes nobody knows and nobody resolved.
	Unknowns(ctx context.Context) ([]plan.Unknown, error)
	// UnknownClaims lists the job occurrences whose outcome nobody knows
	// and nobody resolved.
	UnknownClaims(ctx context.Context) ([]plan.UnknownClaim, error)
	// Authority reads who may approve: operators, workspace admins, policy.
	Authority(ctx context.Context) (*Authority, error)
	// Approvals lists the approvals recorded for a plan.
	Approvals(ctx context.Context, planHash string) ([]Approval, error)
	// FinishApply records how the apply ended.
	FinishApply(ctx context.Context, applyID int64, r ApplyResult) error
}

// ApprovalStore is the state as Approve sees it.
type ApprovalStore interface {
	Locker
	Meta(ctx context.Context) (lineage string, serial int64, err error)
	Authority(ctx context.Context) (*Authority, error)
	// RecordApprovals stores approvals under the lock.
	RecordApprovals(ctx context.Context, lockID string, approvals []Approval) error
}
