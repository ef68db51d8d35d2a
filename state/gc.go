package state

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nlx-dev/nlx/internal/reason"
	"github.com/nlx-dev/nlx/reconcile"
	"github.com/nlx-dev/nlx/schema"
)

// Retention (nlx gc): settled state expires host.retention.days after it
// ended; live and unknown state never does. What expires, what stays and
// why are in docs/retention.md; this file and that page change together.

// GCKind is what a gc item is.
type GCKind string

// The kinds of gc items, in the order a report lists them.
const (
	// GCJournal is one apply: its journal rows, the resolutions of its
	// unknown rows, the approvals it consumed and its applies row. An
	// apply's rows go together or not at all: a dispatched row is settled
	// only by the row after it, and removing that one alone would make the
	// effect look open again.
	GCJournal GCKind = "journal"
	// GCReceipt is a stopped launch: its identity and stop receipt.
	GCReceipt GCKind = "receipt"
	// GCClaim is an occurrence claim that ended.
	GCClaim GCKind = "claim"
	// GCExport is a preservation's export directory. The state removes
	// nothing of it: a removed export item names a directory that expired,
	// for the caller to remove (after checking it is one).
	GCExport GCKind = "export"
	// GCRefresh is a catalog refresh attempt that ended, or a person's
	// nlx refresh request that was done and whose attempts are all gone.
	GCRefresh GCKind = "refresh"
)

// GCKinds lists every kind in report order.
var GCKinds = []GCKind{GCJournal, GCReceipt, GCClaim, GCExport, GCRefresh}

// GCItem is one thing gc removes, or keeps although it is older than the
// cutoff.
type GCItem struct {
	Kind GCKind `json:"kind"`
	// ID is the apply id (journal), the launch id (receipt), the claim id
	// (claim), the preservation (export) or the attempt's or request's id
	// (refresh).
	ID string `json:"id"`
	// At is when it ended (an apply's last row or resolution, a stop, a
	// claim's end or resolution, an import), or, for what has not ended,
	// when it began; "" when nothing says.
	At   string      `json:"at,omitempty"`
	Why  string      `json:"why"`
	Code reason.Code `json:"code,omitempty"` // why it stays, where a reason code says it
	// Path and Manifest are an export's directory and the digest of the
	// manifest.json that was imported from it.
	Path     string `json:"path,omitempty"`
	Manifest string `json:"manifest,omitempty"`
}

// GCReport is what a gc removed (or, in a dry run, would remove) and what
// it keeps although it is older than the cutoff. Newer counts, by kind,
// what is kept because it is newer than the cutoff (applies, receipts and
// running launches, claims, imports); those are not listed.
type GCReport struct {
	Cutoff  time.Time      `json:"cutoff"`
	Removed []GCItem       `json:"removed"`
	Kept    []GCItem       `json:"kept"`
	Newer   map[GCKind]int `json:"newer"`
}

// Retention is how long settled state is kept, host.retention.days of the
// applied host.config (schema.DefaultRetentionDays when none is applied),
// and the cutoff that makes at the state's now (to the second): what
// ended before it has expired.
func (db *DB) Retention(ctx context.Context) (days int, cutoff time.Time, err error) {
	address := string(schema.KindHost) + "." + schema.HostName
	r, err := db.Resource(ctx, address)
	if err != nil {
		return 0, time.Time{}, fmt.Errorf("state %s: %w", db.path, err)
	}
	var h *schema.Host
	if r != nil {
		h = &schema.Host{}
		if err := json.Unmarshal(r.Spec, h); err != nil {
			return 0, time.Time{}, reason.Wrap(reason.InvalidAppliedSpec, err, "%s: applied spec", address)
		}
	}
	days = h.RetentionDays()
	return days, db.now().UTC().Truncate(time.Second).Add(-time.Duration(days) * 24 * time.Hour), nil
}

// GC removes the settled state that ended before cutoff, in one write
// transaction, under the state lock lockID (which it checks). With dryRun
// it removes nothing and reports exactly what the same GC would remove.
// Export directories are only reported (GCExport): the caller removes
// them.
func (db *DB) GC(ctx context.Context, lockID string, cutoff time.Time, dryRun bool) (*GCReport, error) {
	var rep *GCReport
	run := db.write
	if dryRun {
		run = db.read
	}
	err := run(ctx, func(tx *sql.Tx) error {
		if err := holds(ctx, tx, lockID); err != nil {
			return err
		}
		g := &gc{tx: tx, cutoff: cutoff, rep: &GCReport{Cutoff: cutoff, Removed: []GCItem{}, Kept: []GCItem{},
			Newer: map[GCKind]int{GCJournal: 0, GCReceipt: 0, GCClaim: 0, GCExport: 0, GCRefresh: 0}}}
		for _, step := range []func(context.Context) error{g.applies, g.receipts, g.claims, g.exports, g.refreshes} {
			if err := step(ctx); err != nil {
				return err
			}
		}
		rep = g.rep
		if dryRun {
			return nil
		}
		return g.removeExpired(ctx)
	})
	if err != nil {
		return nil, fmt.Errorf("gc of state %s: %w", db.path, err)
	}
	return rep, nil
}

// gc is one run's reading of the state and what it decided.
type gc struct {
	tx     *sql.Tx
	cutoff time.Time
	rep    *GCReport
	// What the removal deletes, by kind.
	applyIDs, launchIDs, claimIDs, refreshIDs, requestIDs []any
}

func (g *gc) expire(it GCItem, id any) {
	g.rep.Removed = append(g.rep.Removed, it)
	switch it.Kind {
	case GCJournal:
		g.applyIDs = append(g.applyIDs, id)
	case GCReceipt:
		g.launchIDs = append(g.launchIDs, id)
	case GCClaim:
		g.claimIDs = append(g.claimIDs, id)
	case GCRefresh:
		if r, ok := id.(refreshRequest); ok {
			g.requestIDs = append(g.requestIDs, string(r))
		} else {
			g.refreshIDs = append(g.refreshIDs, id)
		}
	}
}

func (g *gc) keep(it GCItem) { g.rep.Kept = append(g.rep.Kept, it) }

// age reads a state time: old is true when it is before the cutoff; ok is
// false when it cannot be read, and what cannot be read stays.
func (g *gc) age(at string) (old, ok bool) {
	t, err := time.Parse(time.RFC3339Nano, at)
	if err != nil {
		return false, false
	}
	return t.Before(g.cutoff), true
}

// later is the later of two state times (RFC 3339, UTC); an unreadable
// one wins, so that what holds it stays.
func later(a, b string) string {
	ta, errA := time.Parse(time.RFC3339Nano, a)
	tb, errB := time.Parse(time.RFC3339Nano, b)
	switch {
	case b == "":
		return a
	case a == "":
		return b
	case errA != nil:
		return a
	case errB != nil || tb.After(ta):
		return b
	}
	return a
}

// endOf is when something that ended did: its end, or its resolution
// when that is later (only an unknown outcome is resolved); when neither
// is written, when it began.
func endOf(ended, resolved, began string) string {
	if at := later(ended, resolved); at != "" {
		return at
	}
	return began
}

// maxStamp is the SQL of the latest of a column of state times. The state
// writes them in UTC as RFC 3339 with the fraction of a second only when
// there is one, whose text does not sort as its time does within one
// second ("05Z" after "05.3Z"); without the Z it does ("05" is a prefix
// of "05.3"). The Z is put back when the value is read.
func maxStamp(col string) string { return `max(rtrim(` + col + `, 'Z'))` }

func unstamp(s string) string {
	if s == "" {
		return ""
	}
	return s + "Z"
}

// inList is a SQL list of the values, for text that names phases and
// statuses (so that SQLite can use the partial indexes that name them).
func inList[T ~string](vs ...T) string {
	q := make([]string, len(vs))
	for i, v := range vs {
		q[i] = `'` + string(v) + `'`
	}
	return `(` + strings.Join(q, `, `) + `)`
}

// openJournal selects a journal row whose effect is open, as openOutcomes
// does: unknown and unresolved, or dispatched with no later row of its
// apply and address.
const openJournal = `j.phase IN ('` + string(PhaseDispatched) + `', '` + string(PhaseUnknown) + `')
	AND NOT EXISTS (SELECT 1 FROM journal k WHERE k.address = j.address AND k.apply_id = j.apply_id AND k.id > j.id)
	AND NOT EXISTS (SELECT 1 FROM resolutions r WHERE r.journal_id = j.id)`

// applies decides each apply: a finished one whose every row is settled
// and whose last row (or resolution) is older than the cutoff expires,
// unless something names it.
func (g *gc) applies(ctx context.Context) error {
	type apply struct {
		id                          int64
		status                      ApplyStatus
		started, finished           string
		rows, resolutions, approved int
		lastRow, lastResolution     string
		open                        int
		openAt                      string
	}
	list, err := collect(ctx, g.tx, "applies", `SELECT a.id, a.status, a.started_at, coalesce(a.finished_at, ''),
		(SELECT count(*) FROM journal j WHERE j.apply_id = a.id),
		(SELECT count(*) FROM resolutions r JOIN journal j ON j.id = r.journal_id WHERE j.apply_id = a.id),
		(SELECT count(*) FROM approvals p WHERE p.consumed_by = a.id),
		coalesce((SELECT `+maxStamp("j.at")+` FROM journal j WHERE j.apply_id = a.id), ''),
		coalesce((SELECT `+maxStamp("r.at")+` FROM resolutions r JOIN journal j ON j.id = r.journal_id WHERE j.apply_id = a.id), ''),
		(SELECT count(*) FROM journal j WHERE j.apply_id = a.id AND `+openJournal+`),
		coalesce((SELECT group_concat(DISTINCT j.address) FROM journal j WHERE j.apply_id = a.id AND `+openJournal+`), '')
		FROM applies a ORDER BY a.id`, nil,
		func(rows *sql.Rows, a *apply) error {
			return rows.Scan(&a.id, &a.status, &a.started, &a.finished, &a.rows, &a.resolutions, &a.approved,
				&a.lastRow, &a.lastResolution, &a.open, &a.openAt)
		})
	if err != nil {
		return err
	}
	// An apply whose id something else holds stays: SQLite gives the next
	// row max(id)+1, so removing the newest apply, journal row or approval
	// would hand its id to the next one; imports and releases name the
	// apply that made them.
	var newestApply, newestRowOf, newestApprovalOf sql.NullInt64
	err = g.tx.QueryRowContext(ctx, `SELECT (SELECT max(id) FROM applies),
		(SELECT apply_id FROM journal ORDER BY id DESC LIMIT 1),
		(SELECT consumed_by FROM approvals ORDER BY id DESC LIMIT 1)`).Scan(&newestApply, &newestRowOf, &newestApprovalOf)
	if err != nil {
		return fmt.Errorf("read the newest ids: %w", err)
	}
	named := map[int64]string{}
	type namer struct {
		id   int64
		what string
	}
	names, err := collect(ctx, g.tx, "imports and releases", `SELECT apply_id, 'the import of preservation ' || preservation FROM imports
		UNION ALL SELECT apply_id, 'release ' || id || ' of ' || address FROM releases ORDER BY 1, 2`, nil,
		func(rows *sql.Rows, n *namer) error { return rows.Scan(&n.id, &n.what) })
	if err != nil {
		return err
	}
	for _, n := range names {
		if _, ok := named[n.id]; !ok {
			named[n.id] = n.what
		}
	}
	for _, a := range list {
		id := strconv.FormatInt(a.id, 10)
		if a.status == ApplyRunning || a.finished == "" {
			if old, ok := g.age(a.started); old || !ok {
				g.keep(GCItem{Kind: GCJournal, ID: id, At: a.started,
					Why: fmt.Sprintf("apply %d has not finished: it runs, or it died and the next apply records it failed", a.id)})
			} else {
				g.rep.Newer[GCJournal]++
			}
			continue
		}
		end := later(later(a.finished, unstamp(a.lastRow)), unstamp(a.lastResolution))
		old, ok := g.age(end)
		it := GCItem{Kind: GCJournal, ID: id, At: end}
		switch {
		case !ok:
			it.Why = fmt.Sprintf("apply %d: its end time %q is unreadable", a.id, end)
		case !old:
			g.rep.Newer[GCJournal]++
			continue
		case a.open > 0:
			it.Code = reason.UnknownUnresolved
			it.Why = fmt.Sprintf("apply %d has %d effect(s) whose outcome nobody knows (%s): dispatched without an outcome, or unknown and unresolved (nlx resolve ADDRESS)",
				a.id, a.open, strings.ReplaceAll(a.openAt, ",", ", "))
		case newestApply.Valid && a.id == newestApply.Int64:
			it.Why = fmt.Sprintf("apply %d is the newest apply: SQLite would give its id to the next one", a.id)
		case newestRowOf.Valid && a.id == newestRowOf.Int64:
			it.Why = fmt.Sprintf("apply %d holds the newest journal row: SQLite would give its id to the next one", a.id)
		case newestApprovalOf.Valid && a.id == newestApprovalOf.Int64:
			it.Why = fmt.Sprintf("apply %d consumed the newest approval: SQLite would give its id to the next one", a.id)
		case named[a.id] != "":
			it.Why = fmt.Sprintf("apply %d is named by %s", a.id, named[a.id])
		default:
			it.Why = fmt.Sprintf("apply %d (%s): %d journal row(s), %d resolution(s), %d consumed approval(s), all settled",
				a.id, a.status, a.rows, a.resolutions, a.approved)
			g.expire(it, a.id)
			continue
		}
		g.keep(it)
	}
	return nil
}

// receipts decides each launch: a stop receipt older than the cutoff
// expires unless an open claim or a running turn is carried out by it.
func (g *gc) receipts(ctx context.Context) error {
	// The launches of open claims and running turns: a turn's launch id,
	// and the first launch of a turn whose resume was refused ("-2"), as
	// serve's recovery reads them.
	held := map[string]GCItem{}
	hold := func(launchID string, it GCItem) {
		for _, id := range []string{launchID, strings.TrimSuffix(launchID, "-2")} {
			if _, ok := held[id]; !ok {
				held[id] = it
			}
		}
	}
	type open struct {
		launch, turn, claim string
		phase               ClaimPhase
	}
	opens, err := collect(ctx, g.tx, "open claims", `SELECT t.launch_id, t.id, c.id, c.phase FROM claims c JOIN turns t ON t.id = c.turn_id
		WHERE c.phase IN `+openPhases+` AND c.resolved_at = '' ORDER BY c.claimed_at, c.id`, nil,
		func(rows *sql.Rows, o *open) error { return rows.Scan(&o.launch, &o.turn, &o.claim, &o.phase) })
	if err != nil {
		return err
	}
	for _, o := range opens {
		it := GCItem{Why: fmt.Sprintf("the launch of turn %s, whose claim %s is %s: kept while the claim is not settled", o.turn, o.claim, o.phase)}
		if o.phase == ClaimUnknown {
			it.Code = reason.OutcomeUnknown
		}
		hold(o.launch, it)
	}
	type running struct{ turn, launch string }
	turns, err := collect(ctx, g.tx, "running turns", `SELECT id, launch_id FROM turns WHERE status = '`+string(TurnRunning)+`' ORDER BY id`, nil,
		func(rows *sql.Rows, r *running) error { return rows.Scan(&r.turn, &r.launch) })
	if err != nil {
		return err
	}
	for _, r := range turns {
		hold(r.launch, GCItem{Why: fmt.Sprintf("the launch of turn %s, which is recorded running", r.turn)})
	}
	procs, err := collect(ctx, g.tx, "processes", `SELECT launch_id, workspace, pid, started_at, identity, status,
		coalesce(receipt, ''), coalesce(stopped_at, '') FROM processes ORDER BY launch_id`, nil,
		func(rows *sql.Rows, p *ProcessRow) error {
			return rows.Scan(&p.LaunchID, &p.Workspace, &p.PID, &p.StartedAt, &p.Identity, &p.Status, &p.Receipt, &p.StoppedAt)
		})
	if err != nil {
		return err
	}
	for _, p := range procs {
		if p.Status != ProcessStopped {
			// A launch recorded running may still run: never removed.
			if old, ok := g.age(p.StartedAt); old || !ok {
				g.keep(GCItem{Kind: GCReceipt, ID: p.LaunchID, At: p.StartedAt,
					Why: fmt.Sprintf("launch of workspace %s recorded running: it may still run, and has no stop receipt yet (nlx stop %s writes one once its tree is proven gone)", p.Workspace, p.LaunchID)})
			} else {
				g.rep.Newer[GCReceipt]++
			}
			continue
		}
		old, ok := g.age(p.StoppedAt)
		it := GCItem{Kind: GCReceipt, ID: p.LaunchID, At: p.StoppedAt}
		h, isHeld := held[p.LaunchID]
		switch {
		case !ok:
			it.Why = fmt.Sprintf("launch of workspace %s: its stop time %q is unreadable", p.Workspace, p.StoppedAt)
		case !old:
			g.rep.Newer[GCReceipt]++
			continue
		case isHeld:
			it.Why, it.Code = h.Why, h.Code
		default:
			it.Why = fmt.Sprintf("launch of workspace %s (pid %d), stopped with its receipt", p.Workspace, p.PID)
			g.expire(it, p.LaunchID)
			continue
		}
		g.keep(it)
	}
	return nil
}

// claims decides each occurrence claim: one that ended (resolved, if it
// was unknown) before the cutoff expires, unless serve or nlx jobs rely on
// it.
func (g *gc) claims(ctx context.Context) error {
	rows, err := collect(ctx, g.tx, "claims", `SELECT id, job, scheduled_at, trigger, phase, claimed_at, dispatched_at, ended_at,
		resolved_outcome, resolved_at FROM claims ORDER BY claimed_at, id`, nil,
		func(rows *sql.Rows, c *ClaimRow) error {
			return rows.Scan(&c.ID, &c.Job, &c.ScheduledAt, &c.Trigger, &c.Phase, &c.ClaimedAt, &c.DispatchedAt, &c.EndedAt,
				&c.ResolvedOutcome, &c.ResolvedAt)
		})
	if err != nil {
		return err
	}
	// What LatestEnded returns for each job (its last outcome in nlx
	// jobs): the claims at the job's latest claim time among those that
	// ended, compared as SQLite compares text.
	latest := map[string]string{}
	for _, c := range rows {
		if c.Phase.Terminal() && c.ClaimedAt > latest[c.Job] {
			latest[c.Job] = c.ClaimedAt
		}
	}
	// The occurrence of each applied one-time job: claims are unique by
	// job and instant, and that claim is what keeps the occurrence from
	// being claimed again.
	type job struct {
		name string
		spec []byte
	}
	jobs, err := collect(ctx, g.tx, "jobs", `SELECT name, spec FROM resources WHERE kind = ? ORDER BY name`, []any{string(schema.KindJob)},
		func(rows *sql.Rows, j *job) error { return rows.Scan(&j.name, &j.spec) })
	if err != nil {
		return err
	}
	once := map[[2]string]bool{}
	var unreadable []string
	for _, j := range jobs {
		var spec schema.Job
		if err := json.Unmarshal(j.spec, &spec); err != nil {
			unreadable = append(unreadable, j.name)
			continue
		}
		if spec.Schedule.At == "" {
			continue
		}
		at, err := time.Parse(time.RFC3339, spec.Schedule.At)
		if err != nil {
			unreadable = append(unreadable, j.name)
			continue
		}
		once[[2]string{j.name, FormatInstant(at)}] = true
	}
	for _, c := range rows {
		it := GCItem{Kind: GCClaim, ID: c.ID}
		unresolved := c.Phase == ClaimUnknown && c.ResolvedAt == ""
		if !c.Phase.Terminal() || unresolved {
			it.At = c.ClaimedAt
			if old, ok := g.age(c.ClaimedAt); !old && ok {
				g.rep.Newer[GCClaim]++
				continue
			}
			switch c.Phase {
			case ClaimClaimed:
				it.Why = fmt.Sprintf("job %s: claimed, not dispatched yet (serve's recovery settles a claim whose maker died)", c.Job)
			case ClaimDispatched:
				it.Why = fmt.Sprintf("job %s: dispatched, its turn may still run (serve's recovery settles it)", c.Job)
			default:
				it.Code = reason.OutcomeUnknown
				it.Why = fmt.Sprintf("job %s: its outcome is unknown and unresolved, and it holds its conversation (nlx resolve claim %s)", c.Job, c.ID)
			}
			g.keep(it)
			continue
		}
		it.At = endOf(c.EndedAt, c.ResolvedAt, c.ClaimedAt)
		old, ok := g.age(it.At)
		switch {
		case !ok:
			it.Why = fmt.Sprintf("job %s: its end time %q is unreadable", c.Job, it.At)
		case !old:
			g.rep.Newer[GCClaim]++
			continue
		case c.ClaimedAt == latest[c.Job]:
			it.Why = fmt.Sprintf("the latest ended occurrence of job %s: nlx jobs shows it as the job's last outcome", c.Job)
		case c.Trigger == TriggerSchedule && once[[2]string{c.Job, c.ScheduledAt}]:
			it.Why = fmt.Sprintf("the occurrence of one-time job %s (at %s): its claim keeps it from being claimed again", c.Job, c.ScheduledAt)
		case slices.Contains(unreadable, c.Job):
			it.Code = reason.InvalidAppliedSpec
			it.Why = fmt.Sprintf("job %s: its applied spec (or its schedule) cannot be read, so gc cannot tell whether the claim keeps a one-time job done", c.Job)
		default:
			ended := string(c.Phase)
			if c.ResolvedOutcome != "" {
				ended += ", resolved " + c.ResolvedOutcome
			}
			it.Why = fmt.Sprintf("job %s: %s (%s, due %s)", c.Job, ended, c.Trigger, c.ScheduledAt)
			g.expire(it, c.ID)
			continue
		}
		g.keep(it)
	}
	return nil
}

// refreshRequest is the id of a refresh request, as expire takes it.
type refreshRequest string

// refreshes decides each catalog refresh attempt and each nlx refresh
// request: an attempt that ended before the cutoff expires, unless it is
// the latest ended attempt of a launch still recorded running (what that
// worker's catalog was last given); one deferred or dispatched, or unknown
// and unresolved, stays however old. A request done before the cutoff
// expires once none of its attempts is left.
func (g *gc) refreshes(ctx context.Context) error {
	rows, err := collect(ctx, g.tx, "catalog refreshes", `SELECT id, launch_id, workspace, request_id, phase, reason_code,
		created_at, ended_at, resolved_outcome, resolved_at FROM catalog_refreshes ORDER BY created_at, id`, nil,
		func(rows *sql.Rows, r *RefreshRow) error {
			return rows.Scan(&r.ID, &r.LaunchID, &r.Workspace, &r.RequestID, &r.Phase, &r.ReasonCode, &r.CreatedAt, &r.EndedAt,
				&r.ResolvedOutcome, &r.ResolvedAt)
		})
	if err != nil {
		return err
	}
	running := map[string]bool{}
	launches, err := collect(ctx, g.tx, "running launches", `SELECT launch_id FROM processes WHERE status != ?`,
		[]any{string(ProcessStopped)}, func(rows *sql.Rows, id *string) error { return rows.Scan(id) })
	if err != nil {
		return err
	}
	for _, id := range launches {
		running[id] = true
	}
	// The latest ended attempt of each launch, as the rows are ordered.
	latest := map[string]string{}
	for _, r := range rows {
		if r.Phase.Terminal() && !r.Blocked() {
			latest[r.LaunchID] = r.ID
		}
	}
	left := map[string]bool{} // requests with an attempt that stays
	for _, r := range rows {
		it := GCItem{Kind: GCRefresh, ID: r.ID}
		if !r.Phase.Terminal() || r.Blocked() {
			left[r.RequestID] = true
			it.At = r.CreatedAt
			if old, ok := g.age(r.CreatedAt); !old && ok {
				g.rep.Newer[GCRefresh]++
				continue
			}
			if r.Blocked() {
				it.Code = reason.OutcomeUnknown
				it.Why = fmt.Sprintf("refresh of launch %s (workspace %s): its outcome is unknown and unresolved, and it blocks that worker's refreshes (nlx resolve refresh %s)",
					r.LaunchID, r.Workspace, r.ID)
			} else {
				it.Why = fmt.Sprintf("refresh of launch %s (workspace %s): %s, not over (serve settles it)", r.LaunchID, r.Workspace, r.Phase)
			}
			g.keep(it)
			continue
		}
		it.At = endOf(r.EndedAt, r.ResolvedAt, r.CreatedAt)
		old, ok := g.age(it.At)
		switch {
		case !ok:
			it.Why = fmt.Sprintf("refresh of launch %s: its end time %q is unreadable", r.LaunchID, it.At)
		case !old:
			g.rep.Newer[GCRefresh]++
			left[r.RequestID] = true
			continue
		case running[r.LaunchID] && latest[r.LaunchID] == r.ID:
			it.Why = fmt.Sprintf("the latest refresh of launch %s (workspace %s), which is recorded running: what its catalog was last given",
				r.LaunchID, r.Workspace)
		default:
			ended := r.Ended()
			if r.ResolvedOutcome != "" {
				ended += ", resolved " + string(r.ResolvedOutcome)
			}
			it.Why = fmt.Sprintf("refresh of launch %s (workspace %s): %s", r.LaunchID, r.Workspace, ended)
			g.expire(it, r.ID)
			continue
		}
		left[r.RequestID] = true
		g.keep(it)
	}
	requests, err := collect(ctx, g.tx, "refresh requests", `SELECT id, workspace, actor, requested_at, done_at FROM refresh_requests
		ORDER BY requested_at, id`, nil,
		func(rows *sql.Rows, q *RefreshRequestRow) error {
			return rows.Scan(&q.ID, &q.Workspace, &q.Actor, &q.RequestedAt, &q.DoneAt)
		})
	if err != nil {
		return err
	}
	for _, q := range requests {
		it := GCItem{Kind: GCRefresh, ID: q.ID, At: q.DoneAt}
		if q.DoneAt == "" {
			it.At = q.RequestedAt
		}
		old, ok := g.age(it.At)
		switch {
		case ok && !old:
			g.rep.Newer[GCRefresh]++
			continue
		case !ok:
			it.Why = fmt.Sprintf("nlx refresh request of workspace %s: its time %q is unreadable", q.Workspace, it.At)
		case q.DoneAt == "":
			it.Why = fmt.Sprintf("nlx refresh request of workspace %s by %s: not done (the serve holding its workers takes it)", q.Workspace, q.Actor)
		case left[q.ID]:
			it.Why = fmt.Sprintf("nlx refresh request of workspace %s by %s: an attempt that answers it stays", q.Workspace, q.Actor)
		default:
			it.Why = fmt.Sprintf("nlx refresh request of workspace %s by %s: done", q.Workspace, q.Actor)
			g.expire(it, refreshRequest(q.ID))
			continue
		}
		g.keep(it)
	}
	return nil
}

// exports decides each preservation's export directory: an import older
// than the cutoff whose imported jobs are all released and whose jobs have
// no open claim expires; an export never imported stays.
func (g *gc) exports(ctx context.Context) error {
	type imp struct {
		preservation, manifest, dir, at string
		held, open, unknown             string
	}
	imps, err := collect(ctx, g.tx, "imports", `SELECT i.preservation, i.manifest, i.export_dir, i.imported_at,
		coalesce((SELECT group_concat(ij.job, ', ') FROM imported_jobs ij JOIN resources r ON r.address = ? || ij.job
			WHERE ij.preservation = i.preservation AND r.status = '`+string(reconcile.StatusHeld)+`'), ''),
		coalesce((SELECT group_concat(c.id || ' of job ' || c.job, ', ') FROM imported_jobs ij JOIN claims c ON c.job = ij.job
			WHERE ij.preservation = i.preservation AND c.phase IN `+openPhases+` AND c.resolved_at = ''), ''),
		coalesce((SELECT group_concat(c.id || ' of job ' || c.job, ', ') FROM imported_jobs ij JOIN claims c ON c.job = ij.job
			WHERE ij.preservation = i.preservation AND c.phase IN `+openPhases+` AND c.resolved_at = ''
			AND c.phase = '`+string(ClaimUnknown)+`'), '')
		FROM imports i ORDER BY i.preservation`, []any{string(schema.KindJob) + "."},
		func(rows *sql.Rows, i *imp) error {
			return rows.Scan(&i.preservation, &i.manifest, &i.dir, &i.at, &i.held, &i.open, &i.unknown)
		})
	if err != nil {
		return err
	}
	type pres struct{ address, name, spec string }
	applied, err := collect(ctx, g.tx, "preservations", `SELECT address, name, spec FROM resources WHERE kind = ? ORDER BY address`,
		[]any{string(schema.KindPreservation)},
		func(rows *sql.Rows, p *pres) error { return rows.Scan(&p.address, &p.name, &p.spec) })
	if err != nil {
		return err
	}
	// Directories that stay, by clean path: a removable export that is
	// also one of them stays too.
	stays := map[string]string{}
	imported := map[string]string{} // preservation -> its import's directory
	var removable []GCItem
	for _, i := range imps {
		imported[i.preservation] = filepath.Clean(i.dir)
		it := GCItem{Kind: GCExport, ID: i.preservation, At: i.at, Path: i.dir, Manifest: i.manifest}
		old, ok := g.age(i.at)
		switch {
		case !ok:
			it.Why = fmt.Sprintf("the import of preservation %s: its time %q is unreadable", i.preservation, i.at)
		case !old:
			g.rep.Newer[GCExport]++
			stays[filepath.Clean(i.dir)] = "the export of preservation " + i.preservation + ", imported after the cutoff"
			continue
		case i.dir == "":
			it.Why = fmt.Sprintf("the import of preservation %s records no export directory", i.preservation)
		case i.held != "":
			it.Code = reason.JobHeld
			it.Why = fmt.Sprintf("imported job(s) of preservation %s still held for review (%s): the export is the evidence a review reads", i.preservation, i.held)
		case i.unknown != "":
			it.Code = reason.OutcomeUnknown
			it.Why = fmt.Sprintf("claim %s, imported from preservation %s, has an outcome nobody resolved", i.unknown, i.preservation)
		case i.open != "":
			it.Why = fmt.Sprintf("claim %s, imported from preservation %s, is claimed or running", i.open, i.preservation)
		default:
			it.Why = fmt.Sprintf("the import of preservation %s: every imported job released, no claim of them open", i.preservation)
			removable = append(removable, it)
			continue
		}
		stays[filepath.Clean(i.dir)] = "the export of preservation " + i.preservation + ", which stays"
		g.keep(it)
	}
	var unreadable []string
	for _, p := range applied {
		var spec schema.Preservation
		if err := json.Unmarshal([]byte(p.spec), &spec); err != nil {
			unreadable = append(unreadable, p.address)
			continue
		}
		if spec.Export == "" {
			continue
		}
		dir := filepath.Clean(spec.Export)
		d, byName := imported[p.name]
		if !byName {
			d = imported[p.address]
		}
		if d == dir {
			continue
		}
		stays[dir] = "the export of " + p.address + ", not imported"
		g.keep(GCItem{Kind: GCExport, ID: p.name, Path: spec.Export,
			Why: fmt.Sprintf("%s: this export is not imported; an export stays until its import is applied and then for the retention", p.address)})
	}
	for _, it := range removable {
		if other, ok := stays[filepath.Clean(it.Path)]; ok {
			it.Why = fmt.Sprintf("the directory is also %s", other)
			g.keep(it)
			continue
		}
		if len(unreadable) > 0 {
			it.Code = reason.InvalidAppliedSpec
			it.Why = fmt.Sprintf("the applied spec of %s cannot be read, so gc cannot tell which export directories it names", strings.Join(unreadable, ", "))
			g.keep(it)
			continue
		}
		g.expire(it, nil)
	}
	return nil
}

// removeExpired deletes what the run decided, checking that each delete
// meets exactly the rows decided on.
func (g *gc) removeExpired(ctx context.Context) error {
	ids := func(vs []any) (string, error) {
		data, err := json.Marshal(vs)
		return string(data), err
	}
	applies, err := ids(g.applyIDs)
	if err != nil {
		return err
	}
	launches, err := ids(g.launchIDs)
	if err != nil {
		return err
	}
	claims, err := ids(g.claimIDs)
	if err != nil {
		return err
	}
	refreshes, err := ids(g.refreshIDs)
	if err != nil {
		return err
	}
	requests, err := ids(g.requestIDs)
	if err != nil {
		return err
	}
	const each = `(SELECT value FROM json_each(?))`
	steps := []struct {
		what, sql string
		arg       string
		want      int // rows the delete must meet; -1: any number
	}{
		{"resolutions", `DELETE FROM resolutions WHERE journal_id IN (SELECT id FROM journal WHERE apply_id IN ` + each + `)`, applies, -1},
		{"journal rows", `DELETE FROM journal WHERE apply_id IN ` + each, applies, -1},
		{"consumed approvals", `DELETE FROM approvals WHERE consumed_by IN ` + each, applies, -1},
		{"applies", `DELETE FROM applies WHERE id IN ` + each + ` AND finished_at IS NOT NULL AND status != '` + string(ApplyRunning) + `'`,
			applies, len(g.applyIDs)},
		{"stop receipts", `DELETE FROM processes WHERE launch_id IN ` + each + ` AND status = '` + string(ProcessStopped) + `'`,
			launches, len(g.launchIDs)},
		{"claims", `DELETE FROM claims WHERE id IN ` + each + ` AND phase NOT IN ` + inList(ClaimClaimed, ClaimDispatched) +
			` AND (phase != '` + string(ClaimUnknown) + `' OR resolved_at != '')`, claims, len(g.claimIDs)},
		{"catalog refreshes", `DELETE FROM catalog_refreshes WHERE id IN ` + each + ` AND phase NOT IN ` + inList(RefreshDeferred, RefreshDispatched) +
			` AND (phase != '` + string(RefreshUnknown) + `' OR resolved_at != '')`, refreshes, len(g.refreshIDs)},
		{"refresh requests", `DELETE FROM refresh_requests WHERE id IN ` + each + ` AND done_at != ''`, requests, len(g.requestIDs)},
	}
	for _, s := range steps {
		res, err := g.tx.ExecContext(ctx, s.sql, s.arg)
		if err != nil {
			return fmt.Errorf("remove %s: %w", s.what, err)
		}
		if s.want >= 0 {
			if n, _ := res.RowsAffected(); n != int64(s.want) {
				return fmt.Errorf("remove %s: %d row(s) removed, %d decided on: nothing was removed", s.what, n, s.want)
			}
		}
	}
	return nil
}
