package serve

// The schedule computation of nlx serve: pure functions from a job's
// schedule and a few instants to the occurrences due, with no clock and no
// state of their own.

import (
	"math"
	"math/bits"
	"regexp"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/nlx-dev/nlx/internal/reason"
	"github.com/nlx-dev/nlx/schema"
)

// Schedule yields the occurrence instants of a job's schedule.
type Schedule interface {
	// Next is the first occurrence strictly after t, in UTC; ok is false when there is none
	// (a one-time job past its instant).
	Next(t time.Time) (next time.Time, ok bool)
}

// everySyntax is the schema's syntax of an interval.
var everySyntax = regexp.MustCompile(`^([0-9]+(ms|s|m|h))+$`)

// ParseSchedule reads an applied job schedule: exactly one of a cron line
// with its time zone, an interval of at least a minute, or an RFC 3339
// instant. Every refusal is a reason.InvalidAppliedSpec error.
func ParseSchedule(s schema.Schedule) (Schedule, error) {
	set := 0
	for _, f := range []string{s.Cron, s.Every, s.At} {
		if f != "" {
			set++
		}
	}
	switch {
	case set != 1:
		return nil, invalid("schedule has %d of cron, every and at; it needs exactly one", set)
	case s.Cron != "":
		return parseCron(s.Cron, s.Timezone)
	case s.Timezone != "":
		return nil, invalid("schedule timezone %q goes with cron only", s.Timezone)
	case s.Every != "":
		d, err := time.ParseDuration(s.Every)
		if !everySyntax.MatchString(s.Every) || err != nil || d < time.Minute {
			return nil, invalid("schedule every %q: must be a duration of at least 1m, such as 90m or 2h", s.Every)
		}
		return every(d), nil
	}
	at, err := time.Parse(time.RFC3339, s.At)
	if err != nil {
		return nil, invalid("schedule at %q: must be RFC 3339, such as 2026-12-01T09:00:00Z: %w", s.At, err)
	}
	return once(at.UTC()), nil
}

// invalid is the refusal of an applied schedule.
func invalid(format string, args ...any) error {
	return reason.New(reason.InvalidAppliedSpec, format, args...)
}

// parseCron reads a crontab line in an IANA zone, refusing a line that
// matches no date (such as 30 February) so that Next finds one.
func parseCron(line, zone string) (Schedule, error) {
	if zone == "" || zone == "Local" {
		return nil, invalid("schedule timezone %q: name an IANA zone such as Europe/Berlin or UTC", zone)
	}
	loc, err := time.LoadLocation(zone)
	if err != nil {
		return nil, invalid("schedule timezone %q: %w", zone, err)
	}
	spec, err := schema.ParseCron(line)
	if err != nil {
		return nil, invalid("schedule cron %q: %w", line, err)
	}
	c := &cronSchedule{spec: spec, loc: loc}
	if _, ok := c.nextCivil(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)); !ok {
		return nil, invalid("schedule cron %q matches no date", line)
	}
	return c, nil
}

// cronSchedule is a crontab line in a time zone. Its fields match civil
// (wall-clock) times of the zone, and each matching civil time c stands for
// one instant: the first at which the zone's clock reads c or later. So a
// civil time that exists once is that instant; one that exists twice, in
// the hour a clock falls back, is its first (earlier) pass, and the second
// pass runs nothing; one that does not exist, skipped when a clock springs
// forward, is the instant of the transition. Several skipped civil times,
// and the first civil time after the gap, are then the same instant and run
// once: in Europe/Berlin on 2026-03-29, 02:00 to 03:00 are all 01:00:00Z.
type cronSchedule struct {
	spec *cron.SpecSchedule
	loc  *time.Location
}

const (
	starBit = 1 << 63 // robfig's mark of a field written as * (or ?)
	// reach bounds how far a zone's clock may be from UTC (offsets span
	// -12h to +14h, a jump of the clock at most a day), with margin.
	reach = 48 * time.Hour
	// searchYears bounds the search for a matching date: wide enough for
	// 29 February across 2100, which is no leap year.
	searchYears = 10
)

// Next is the first occurrence strictly after t. Since the instant of a
// civil time never decreases as the civil time grows, it is that of the
// first matching civil time after every civil time the clock has shown by t.
func (c *cronSchedule) Next(t time.Time) (time.Time, bool) {
	civil, ok := c.nextCivil(c.latestCivil(t).Truncate(time.Minute).Add(time.Minute))
	if !ok {
		return time.Time{}, false
	}
	return c.instant(civil), true
}

// Civil times are time.Times in UTC whose fields are the zone's wall clock:
// arithmetic on them has no gaps and no folds.

// period is the zone's period holding x and its offset.
func (c *cronSchedule) period(x time.Time) (start, end time.Time, off time.Duration) {
	l := x.In(c.loc)
	_, o := l.Zone()
	start, end = l.ZoneBounds()
	return start, end, time.Duration(o) * time.Second
}

// latestCivil is the latest civil time the zone's clock has shown at or
// before t: t's own, or, in the second pass of a fall-back fold, the last
// before the clock fell back.
func (c *cronSchedule) latestCivil(t time.Time) time.Time {
	start, _, off := c.period(t)
	latest := t.Add(off).UTC()
	for range 8 {
		if start.IsZero() || start.Before(t.Add(-reach)) {
			break
		}
		x := start.Add(-time.Nanosecond)
		start, _, off = c.period(x)
		if w := x.Add(off).UTC(); w.After(latest) {
			latest = w
		}
	}
	return latest
}

// instant is the first instant at which the clock reads civil or later:
// the zone's first period whose clock passes civil holds it, or begins
// after it (a gap) and then its start is the instant.
func (c *cronSchedule) instant(civil time.Time) time.Time {
	x := civil.Add(-reach)
	for range 64 {
		start, end, off := c.period(x)
		if end.IsZero() || end.Add(off).After(civil) {
			at := civil.Add(-off)
			if at.Before(start) {
				at = start
			}
			return at.UTC()
		}
		x = end
	}
	return civil // unreachable with a real zone: 64 transitions in 4 days
}

// nextCivil is the first civil time at or after from (a whole minute) that
// the fields match, skipping whole months, days and hours as robfig's own
// Next does.
func (c *cronSchedule) nextCivil(from time.Time) (time.Time, bool) {
	s, t := c.spec, from
	for limit := t.Year() + searchYears; t.Year() <= limit; {
		y, mo, d := t.Date()
		switch {
		case s.Month&(1<<uint(mo)) == 0:
			t = time.Date(y, mo+1, 1, 0, 0, 0, 0, time.UTC)
		case !dayMatches(s, t):
			t = time.Date(y, mo, d+1, 0, 0, 0, 0, time.UTC)
		default:
			h, ok := nextBit(s.Hour, t.Hour())
			if !ok {
				t = time.Date(y, mo, d+1, 0, 0, 0, 0, time.UTC)
				continue
			}
			m := t.Minute()
			if h != t.Hour() {
				m = 0
			}
			if m, ok = nextBit(s.Minute, m); !ok {
				t = time.Date(y, mo, d, h+1, 0, 0, 0, time.UTC)
				continue
			}
			return time.Date(y, mo, d, h, m, 0, 0, time.UTC), true
		}
	}
	return time.Time{}, false
}

// nextBit is the least value at or above from set in a field's mask.
func nextBit(mask uint64, from int) (int, bool) {
	rest := (mask &^ starBit) >> uint(from)
	if rest == 0 {
		return 0, false
	}
	return from + bits.TrailingZeros64(rest), true
}

// dayMatches is robfig's rule, crontab(5)'s: when both day of month and day
// of week are restricted (neither written as *), a day matching either
// matches.
func dayMatches(s *cron.SpecSchedule, t time.Time) bool {
	dom := 1<<uint(t.Day())&s.Dom != 0
	dow := 1<<uint(t.Weekday())&s.Dow != 0
	if s.Dom&starBit != 0 || s.Dow&starBit != 0 {
		return dom && dow
	}
	return dom || dow
}

// every is an interval. Its occurrences are the instants that are whole
// multiples of it since the Unix epoch, in UTC: they follow from the
// interval alone, so neither a restart of nlx serve nor a change of the
// job's other fields shifts them. Only instants representable as Unix
// nanoseconds (the years 1678 to 2262) are occurrences.
type every time.Duration

var (
	firstNano = time.Unix(0, math.MinInt64)
	lastNano  = time.Unix(0, math.MaxInt64)
)

// Next is the first multiple of the interval strictly after t.
func (e every) Next(t time.Time) (time.Time, bool) {
	if !t.Before(lastNano) {
		return time.Time{}, false
	}
	if t.Before(firstNano) {
		t = firstNano
	}
	d, ns := int64(e), t.UnixNano()
	k := ns / d
	if ns%d < 0 {
		k-- // floor, not truncation, before the epoch
	}
	if k+1 > math.MaxInt64/d {
		return time.Time{}, false
	}
	return time.Unix(0, (k+1)*d).UTC(), true
}

// between counts the occurrences in (after, before) with arithmetic, and
// gives the last of them.
func (e every) between(after, before time.Time) (n int, last time.Time) {
	first, ok := e.Next(after)
	if !ok || !first.Before(before) {
		return 0, time.Time{}
	}
	end := int64(math.MaxInt64)
	if before.Before(lastNano) {
		end = before.UnixNano()
	}
	fn := first.UnixNano()
	k := (uint64(end-fn)-1)/uint64(e) + 1 // end-fn wraps as unsigned: it is < 2^64
	return int(k), time.Unix(0, fn+int64(k-1)*int64(e)).UTC()
}

// once is a one-time instant.
type once time.Time

// Next is the instant while t is before it.
func (o once) Next(t time.Time) (time.Time, bool) {
	if at := time.Time(o); at.After(t) {
		return at, true
	}
	return time.Time{}, false
}

// CatchUp is a job's policy for occurrences missed while nlx serve was down.
type CatchUp string

// The catch-up policies of schema.Job's catchUp.
const (
	// CatchUpSkip runs no missed occurrence.
	CatchUpSkip CatchUp = "skip"
	// CatchUpLatest runs the most recent missed occurrence once, unless
	// an occurrence is on time.
	CatchUpLatest CatchUp = "latest"
)

// Decision is what is due for one job at one moment.
type Decision struct {
	Run    []time.Time // occurrences to run now, oldest first (UTC)
	Missed int         // occurrences passed over (late beyond the tolerance and not run); count may be capped, see Capped
	Capped bool        // Missed stopped counting at a bound: at least Missed were passed over
	Cursor time.Time   // the new cursor: every occurrence at or before it is handled
}

// maxCount bounds the work of one Due: the occurrences of a cron schedule
// it counts as missed, and those it runs on time (the rest of these wait
// for the next call, the cursor stopping at the last one run).
const maxCount = 1000

// Due decides, for a schedule whose occurrences up to cursor are handled, what to run at now:
// occurrences in (cursor, now] no later than late behind now are on time and all run;
// the older ones were missed: CatchUpSkip runs none of them, CatchUpLatest runs the most
// recent missed one once, but only when no occurrence is on time (on-time ones win, never
// both). A policy other than CatchUpLatest is CatchUpSkip. Cursor becomes now, or the last
// occurrence run when more than maxCount are on time; a now not after cursor (a clock set
// back) decides nothing and keeps the cursor. Work is bounded whatever the downtime:
// an interval's missed occurrences are counted with arithmetic, a cron schedule's up to
// maxCount (then Capped), and its latest missed one is found by search, not by stepping.
func Due(s Schedule, cursor, now time.Time, late time.Duration, policy CatchUp) Decision {
	cursor, now = cursor.UTC(), now.UTC()
	if !now.After(cursor) {
		return Decision{Cursor: cursor}
	}
	d := Decision{Cursor: now}
	onTime := now.Add(-max(late, 0)) // occurrences at or after it are on time
	missed, latest, capped := passed(s, cursor, onTime)

	from := cursor
	if x := onTime.Add(-time.Nanosecond); x.After(from) {
		from = x
	}
	for {
		o, ok := s.Next(from)
		if !ok || o.After(now) {
			break
		}
		if len(d.Run) == maxCount {
			d.Cursor = from
			break
		}
		d.Run, from = append(d.Run, o), o
	}
	if len(d.Run) == 0 && missed > 0 && policy == CatchUpLatest {
		d.Run = []time.Time{latest}
		if !capped {
			missed--
		}
	}
	d.Missed, d.Capped = missed, capped
	return d
}

// passed counts the occurrences in (after, before) and finds the last of
// them; capped says counting stopped at maxCount.
func passed(s Schedule, after, before time.Time) (n int, last time.Time, capped bool) {
	if e, ok := s.(every); ok {
		n, last = e.between(after, before)
		return n, last, false
	}
	for x := after; ; n++ {
		o, ok := s.Next(x)
		if !ok || !o.Before(before) {
			return n, x, false
		}
		if n == maxCount {
			return n, lastBefore(s, o, before), true
		}
		x = o
	}
}

// lastBefore is the last occurrence before before, given one, known: it
// gallops back from before to an occurrence near it, then bisects, so its
// work grows with the logarithm of the span and not with the occurrences.
func lastBefore(s Schedule, known, before time.Time) time.Time {
	best, hi := known, before.Add(-time.Nanosecond) // no occurrence in (hi, before)
	for w := time.Minute; w < hi.Sub(best) && w < math.MaxInt64/2; w *= 2 {
		x := hi.Add(-w)
		if o, ok := s.Next(x); ok && o.Before(before) {
			best = o
			break
		}
		hi = x
	}
	for range 256 { // each round halves (best, hi]: about 64 rounds, more only past 292 years
		if o, ok := s.Next(best); !ok || !o.Before(before) {
			return best
		}
		mid := best.Add(hi.Sub(best) / 2)
		if o, ok := s.Next(mid); ok && o.Before(before) {
			best = o
		} else {
			hi = mid
		}
	}
	return best
}
