package serve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nlx-dev/nlx/internal/procid"
	"github.com/nlx-dev/nlx/internal/reason"
	"github.com/nlx-dev/nlx/isolate"
	"github.com/nlx-dev/nlx/launch"
	"github.com/nlx-dev/nlx/state"
)

// Recovery is what Recover found.
type Recovery struct {
	Reaped  []string // launches found gone without a receipt: receipts written
	Unknown []string // dispatched claims marked unknown
	Dropped []string // claimed, never dispatched: skipped (nothing was launched)
	Live    []string // claims whose maker still runs: left alone (it ends them)
	Pending []string // dispatched claims whose maker is gone but whose process may still run: checked again (SettlePending)
	Running int      // launches recorded running and not proven gone (a live nlx's, or a tree still dying with its nlx)
	Locked  []string // unknown claims still unresolved (their conversations stay locked)
	// Catalog refreshes a dead serve left: dispatched ones are unknown,
	// deferred ones released (nothing was sent).
	RefreshUnknown  []string
	RefreshReleased []string
}

// Recover settles what an nlx that died left: launches recorded running
// whose tree is proven gone get their stop receipts; a claim whose owner
// (the nlx that made it) is gone is settled: never dispatched, it is
// skipped (nothing was launched); dispatched, once every launch of its
// turn is proven gone, it is unknown (never retried: its conversation
// stays locked until nlx resolve claim). A claim whose owner lives, or
// whose process may still run, is left alone and reported. It runs once,
// at serve start: the discovery reads the processes and claims recorded
// open, nothing else.
func Recover(ctx context.Context, db *state.DB, logf func(string, ...any)) (*Recovery, error) {
	rec := &Recovery{}
	r := launch.Recorder{DB: db}
	reaped, err := launch.ReapGone(ctx, r)
	if err != nil {
		return nil, err
	}
	rec.Reaped = reaped
	for _, id := range reaped {
		logf("launch %s had ended unrecorded (the nlx that ran it died); its receipt is written", id)
	}
	running, err := db.Processes(ctx, false)
	if err != nil {
		return nil, err
	}
	rec.Running = len(running)
	self, err := procid.Self()
	if err != nil {
		return nil, fmt.Errorf("identify this process: %w", err)
	}
	if err := settleRefreshes(ctx, db, self, rec, logf); err != nil {
		return nil, err
	}
	var after *state.ClaimRow
	for {
		page, err := db.OpenClaimsPage(ctx, after, recoverPage)
		if err != nil {
			return nil, err
		}
		for i := range page {
			if err := settle(ctx, db, self, &page[i], rec, logf); err != nil {
				return nil, err
			}
		}
		if len(page) < recoverPage {
			return rec, nil
		}
		after = &page[len(page)-1]
	}
}

// settleRefreshes settles the catalog refresh attempts a dead serve left
// open: its workers died with it. One it had dispatched is unknown (the
// write may have landed): never retried, resolved by a person. One still
// waiting was never sent: released.
func settleRefreshes(ctx context.Context, db *state.DB, self procid.Identity, rec *Recovery, logf func(string, ...any)) error {
	open, err := db.OpenRefreshes(ctx)
	if err != nil {
		return err
	}
	for _, r := range open {
		owner := r.OwnerIdentity()
		if owner.PID == self.PID && owner.Start == self.Start {
			continue
		}
		if gone, err := procid.Gone(owner); err != nil || !gone {
			continue
		}
		switch r.Phase {
		case state.RefreshDispatched:
			why := fmt.Sprintf("the nlx serve (%s) that dispatched it died before it recorded how it ended: nobody knows whether launch %s took it; never retried (nlx resolve refresh %s)", r.Owner, r.LaunchID, r.ID)
			if ok, err := db.MoveRefresh(ctx, r.ID, state.RefreshDispatched, state.RefreshUnknown, state.RefreshUpdate{Code: reason.RefreshOutcomeUnknown, Reason: why}); err != nil {
				return err
			} else if ok {
				rec.RefreshUnknown = append(rec.RefreshUnknown, r.ID)
				logf("catalog refresh %s of launch %s is unknown: %s", r.ID, r.LaunchID, why)
			}
		case state.RefreshDeferred:
			if ok, err := db.MoveRefresh(ctx, r.ID, state.RefreshDeferred, state.RefreshReleased, state.RefreshUpdate{Code: reason.WorkerReleased,
				Reason: fmt.Sprintf("the nlx serve (%s) that held launch %s stopped before the refresh was sent", r.Owner, r.LaunchID)}); err != nil {
				return err
			} else if ok {
				rec.RefreshReleased = append(rec.RefreshReleased, r.ID)
			}
		}
	}
	unresolved, err := db.UnresolvedRefreshes(ctx)
	if err != nil {
		return err
	}
	for _, r := range unresolved {
		logf("catalog refresh %s of launch %s has an outcome nobody knows: nlx resolve refresh %s", r.ID, r.LaunchID, r.ID)
	}
	return nil
}

// recoverPage is how many open claims Recover reads at once.
const recoverPage = 256

// settle settles one open claim an nlx that died may have left.
func settle(ctx context.Context, db *state.DB, self procid.Identity, c *state.ClaimRow, rec *Recovery, logf func(string, ...any)) error {
	if c.Phase == state.ClaimUnknown {
		rec.Locked = append(rec.Locked, c.ID)
		logf("claim %s of job %s (due %s) has an outcome nobody knows: conversation %s stays locked until nlx resolve claim %s",
			c.ID, c.Job, c.ScheduledAt, c.Conversation, c.ID)
		return nil
	}
	owner := c.OwnerIdentity()
	if owner.PID == self.PID && owner.Start == self.Start {
		return nil
	}
	if gone, err := procid.Gone(owner); err != nil || !gone {
		rec.Live = append(rec.Live, c.ID)
		logf("claim %s of job %s is %s by %s, which still runs: left alone", c.ID, c.Job, c.Phase, c.Owner)
		return nil
	}
	switch c.Phase {
	case state.ClaimClaimed:
		if ok, err := db.EndClaim(ctx, c.ID, state.ClaimClaimed, state.ClaimSkipped, reason.NotDispatched,
			fmt.Sprintf("the nlx that claimed it (%s) stopped before dispatching it: nothing was launched", c.Owner)); err != nil {
			return err
		} else if ok {
			rec.Dropped = append(rec.Dropped, c.ID)
			logf("claim %s of job %s (due %s) was never dispatched: skipped, nothing was launched", c.ID, c.Job, c.ScheduledAt)
		}
	case state.ClaimDispatched:
		gone, launches, err := turnGone(ctx, db, c.TurnID)
		if err != nil {
			return err
		}
		if !gone {
			rec.Pending = append(rec.Pending, c.ID)
			logf("claim %s of job %s: its process may still run (launch %s): left alone for now; nlx stop %s ends it", c.ID, c.Job, launches, launches)
			return nil
		}
		why := fmt.Sprintf("dispatched by %s at %s; that nlx died and its process is gone (%s), and nobody recorded how the turn ended", c.Owner, c.DispatchedAt, launches)
		ok, err := db.MarkClaimUnknown(ctx, c.ID, why)
		if err != nil {
			return err
		}
		if !ok {
			return nil
		}
		// The turn's row ends with it: interrupted, nobody knows how far.
		db.EndTurn(ctx, c.TurnID, state.TurnEnd{Status: state.TurnInterrupted, ErrorCode: string(reason.OutcomeUnknown), ErrorMessage: why})
		rec.Unknown = append(rec.Unknown, c.ID)
		logf("claim %s of job %s (due %s) is unknown: %s; never retried, conversation %s is locked until nlx resolve claim %s",
			c.ID, c.Job, c.ScheduledAt, why, c.Conversation, c.ID)
	}
	return nil
}

// settleAttempts bounds how often SettlePending looks again at a claim
// whose process may still run (1s, 2s, 4s, ... apart).
const settleAttempts = 6

// SettlePending looks again, a bounded number of times, at the claims
// Recover found dispatched by a dead nlx while their process might still
// run (a tree dying with its parent takes a moment): each is settled once
// its process is proven gone, as Recover would; what is still running
// after the last attempt stays dispatched for nlx stop and the next start.
// Nothing else is looked at: with nothing pending there is no query.
//
// Launches recorded running at the start are reaped again at each look
// too (launch.ReapGone writes the receipts of those proven gone): a warm
// worker serve kept when it died dies with it, but maybe only just after
// the start.
func SettlePending(ctx context.Context, db *state.DB, ids []string, running bool, wait func(time.Duration) bool, logf func(string, ...any)) {
	self, err := procid.Self()
	if err != nil {
		return
	}
	for attempt := 0; attempt < settleAttempts && (len(ids) > 0 || running); attempt++ {
		if !wait(time.Duration(1<<attempt) * time.Second) {
			return
		}
		if running {
			reaped, _ := launch.ReapGone(ctx, launch.Recorder{DB: db})
			for _, id := range reaped {
				logf("launch %s had ended unrecorded (the nlx that ran it died); its receipt is written", id)
			}
			left, err := db.Processes(ctx, false)
			running = err == nil && len(left) > 0
		}
		rec := &Recovery{}
		for _, id := range ids {
			c, err := db.ClaimByID(ctx, id)
			if err != nil || c.Phase != state.ClaimDispatched {
				continue
			}
			if err := settle(ctx, db, self, c, rec, logf); err != nil {
				logf("claim %s: %v", id, err)
				rec.Pending = append(rec.Pending, id)
			}
		}
		ids = rec.Pending
	}
	for _, id := range ids {
		logf("claim %s: its process still runs after %d looks: left dispatched; nlx stop ends it, and the next start settles it", id, settleAttempts)
	}
}

// turnGone reports whether every launch of a turn is proven gone: its
// stop receipt written, or never recorded (a launch counts as running
// only once its identity is; one that died before that died with nlx).
func turnGone(ctx context.Context, db *state.DB, turnID string) (bool, string, error) {
	t, err := db.Turn(ctx, turnID)
	if errors.Is(err, state.ErrNoTurn) {
		return true, "no turn", nil
	}
	if err != nil {
		return false, "", err
	}
	ids := []string{t.LaunchID}
	if base, ok := strings.CutSuffix(t.LaunchID, "-2"); ok {
		ids = append(ids, base)
	}
	for _, id := range ids {
		row, err := db.Process(ctx, id)
		if errors.Is(err, state.ErrNoProcess) {
			continue
		}
		if err != nil {
			return false, "", err
		}
		if row.Status == state.ProcessStopped {
			continue
		}
		var ident isolate.Identity
		if json.Unmarshal([]byte(row.Identity), &ident) != nil {
			return false, id, nil
		}
		if gone, err := isolate.Gone(ident); err != nil || !gone {
			return false, id, nil
		}
		if _, err := isolate.Stop(ctx, ident, 0, launch.Recorder{DB: db}); err != nil {
			return false, id, nil
		}
	}
	return true, "launch " + t.LaunchID + ": stop receipt written", nil
}
