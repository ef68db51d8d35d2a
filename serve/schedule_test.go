package serve

import (
	"fmt"
	"math/rand"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/nlx-dev/nlx/internal/reason"
	"github.com/nlx-dev/nlx/schema"
)

func utc(t testing.TB, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatalf("bad instant %q in the test: %v", s, err)
	}
	return v.UTC()
}

func zone(t testing.TB, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatalf("time zone %s: %v (the tz database must be installed)", name, err)
	}
	return loc
}

func mustParse(t testing.TB, s schema.Schedule) Schedule {
	t.Helper()
	zone(t, "Europe/Berlin") // fail, not skip, without the tz database
	sch, err := ParseSchedule(s)
	if err != nil {
		t.Fatalf("ParseSchedule(%+v): %v", s, err)
	}
	return sch
}

// TestScheduleCron pins each schedule's next occurrences, written out by
// hand, across the 2026 transitions of Europe/Berlin (spring forward
// 2026-03-29 at 01:00Z, 02:00 CET to 03:00 CEST; fall back 2026-10-25 at
// 01:00Z, 03:00 CEST to 02:00 CET) and America/New_York (spring forward
// 2026-03-08 at 07:00Z, 02:00 EST to 03:00 EDT; fall back 2026-11-01 at
// 06:00Z, 02:00 EDT to 01:00 EST).
func TestScheduleCron(t *testing.T) {
	tests := []struct {
		name, cron, zone, from string
		want                   []string
	}{
		// Berlin, spring forward: 02:30 does not exist; it runs at the transition.
		{"berlin spring 02:30", "30 2 * * *", "Europe/Berlin", "2026-03-27T12:00:00Z",
			[]string{"2026-03-28T01:30:00Z", "2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z"}},
		// 02:00 to 02:45 and 03:00 are one instant: one run.
		{"berlin spring */15", "*/15 * * * *", "Europe/Berlin", "2026-03-29T00:30:00Z",
			[]string{"2026-03-29T00:45:00Z", "2026-03-29T01:00:00Z", "2026-03-29T01:15:00Z", "2026-03-29T01:30:00Z"}},
		{"berlin spring hourly", "0 * * * *", "Europe/Berlin", "2026-03-28T23:30:00Z",
			[]string{"2026-03-29T00:00:00Z", "2026-03-29T01:00:00Z", "2026-03-29T02:00:00Z"}},
		// Berlin, fall back: 02:00 to 02:59 run on their first pass only.
		{"berlin fall 02:30", "30 2 * * *", "Europe/Berlin", "2026-10-24T12:00:00Z",
			[]string{"2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"}},
		{"berlin fall */15", "*/15 * * * *", "Europe/Berlin", "2026-10-24T23:30:00Z",
			[]string{"2026-10-24T23:45:00Z", "2026-10-25T00:00:00Z", "2026-10-25T00:15:00Z", "2026-10-25T00:30:00Z",
				"2026-10-25T00:45:00Z", "2026-10-25T02:00:00Z", "2026-10-25T02:15:00Z"}},
		{"berlin fall */15 from the second pass", "*/15 * * * *", "Europe/Berlin", "2026-10-25T01:20:00Z",
			[]string{"2026-10-25T02:00:00Z"}},
		{"berlin fall hourly", "0 * * * *", "Europe/Berlin", "2026-10-24T22:30:00Z",
			[]string{"2026-10-24T23:00:00Z", "2026-10-25T00:00:00Z", "2026-10-25T02:00:00Z", "2026-10-25T03:00:00Z"}},
		// Weekdays at 06:30, across the weekend of the spring transition.
		{"berlin weekdays", "30 6 * * 1-5", "Europe/Berlin", "2026-03-26T12:00:00Z",
			[]string{"2026-03-27T05:30:00Z", "2026-03-30T04:30:00Z", "2026-03-31T04:30:00Z"}},
		{"berlin monthly", "0 0 1 * *", "Europe/Berlin", "2026-03-15T00:00:00Z",
			[]string{"2026-03-31T22:00:00Z", "2026-04-30T22:00:00Z"}},
		{"berlin monthly in winter", "0 0 1 * *", "Europe/Berlin", "2026-10-15T00:00:00Z",
			[]string{"2026-10-31T23:00:00Z", "2026-11-30T23:00:00Z"}},
		{"berlin @daily", "@daily", "Europe/Berlin", "2026-03-28T12:00:00Z",
			[]string{"2026-03-28T23:00:00Z", "2026-03-29T22:00:00Z"}},

		// New York, spring forward: 02:00 to 02:59 do not exist.
		{"new york spring 02:30", "30 2 * * *", "America/New_York", "2026-03-06T12:00:00Z",
			[]string{"2026-03-07T07:30:00Z", "2026-03-08T07:00:00Z", "2026-03-09T06:30:00Z"}},
		{"new york spring */15", "*/15 * * * *", "America/New_York", "2026-03-08T06:30:00Z",
			[]string{"2026-03-08T06:45:00Z", "2026-03-08T07:00:00Z", "2026-03-08T07:15:00Z"}},
		{"new york spring hourly", "0 * * * *", "America/New_York", "2026-03-08T05:30:00Z",
			[]string{"2026-03-08T06:00:00Z", "2026-03-08T07:00:00Z", "2026-03-08T08:00:00Z"}},
		// New York, fall back: 01:00 to 01:59 are repeated; 02:30 exists once.
		{"new york fall 02:30", "30 2 * * *", "America/New_York", "2026-10-30T12:00:00Z",
			[]string{"2026-10-31T06:30:00Z", "2026-11-01T07:30:00Z", "2026-11-02T07:30:00Z"}},
		{"new york fall 01:30", "30 1 * * *", "America/New_York", "2026-10-30T12:00:00Z",
			[]string{"2026-10-31T05:30:00Z", "2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"}},
		{"new york fall */15", "*/15 * * * *", "America/New_York", "2026-11-01T04:30:00Z",
			[]string{"2026-11-01T04:45:00Z", "2026-11-01T05:00:00Z", "2026-11-01T05:15:00Z", "2026-11-01T05:30:00Z",
				"2026-11-01T05:45:00Z", "2026-11-01T07:00:00Z"}},
		{"new york fall hourly", "0 * * * *", "America/New_York", "2026-11-01T03:30:00Z",
			[]string{"2026-11-01T04:00:00Z", "2026-11-01T05:00:00Z", "2026-11-01T07:00:00Z", "2026-11-01T08:00:00Z"}},
		{"new york weekdays", "30 6 * * 1-5", "America/New_York", "2026-03-06T12:00:00Z",
			[]string{"2026-03-09T10:30:00Z", "2026-03-10T10:30:00Z"}},
		{"new york monthly", "0 0 1 * *", "America/New_York", "2026-10-15T00:00:00Z",
			[]string{"2026-11-01T04:00:00Z", "2026-12-01T05:00:00Z"}},
		{"new york @daily", "@daily", "America/New_York", "2026-10-31T12:00:00Z",
			[]string{"2026-11-01T04:00:00Z", "2026-11-02T05:00:00Z"}},
		// Day of month and day of week both restricted: either matches
		// (the 13th, a Tuesday, and every Friday); one restricted: it alone.
		{"dom or dow", "0 12 13 * 5", "America/New_York", "2026-10-08T00:00:00Z",
			[]string{"2026-10-09T16:00:00Z", "2026-10-13T16:00:00Z", "2026-10-16T16:00:00Z"}},
		{"dom only", "0 12 13 * *", "America/New_York", "2026-10-08T00:00:00Z",
			[]string{"2026-10-13T16:00:00Z", "2026-11-13T17:00:00Z"}},
		{"dow only", "0 12 * * 5", "America/New_York", "2026-10-08T00:00:00Z",
			[]string{"2026-10-09T16:00:00Z", "2026-10-16T16:00:00Z"}},

		// Midnight skipped (Sao Paulo, 2018-11-04, 00:00 to 01:00): the day's
		// run is the transition; a day skipped whole (Apia, 2011-12-30).
		{"sao paulo midnight gap", "@daily", "America/Sao_Paulo", "2018-11-03T12:00:00Z",
			[]string{"2018-11-04T03:00:00Z", "2018-11-05T02:00:00Z"}},
		{"apia skipped day", "0 12 * * *", "Pacific/Apia", "2011-12-29T12:00:00Z",
			[]string{"2011-12-29T22:00:00Z", "2011-12-30T10:00:00Z", "2011-12-30T22:00:00Z"}},
		// Strictly after: from an occurrence itself, and from within a minute.
		{"strictly after", "0 * * * *", "UTC", "2026-06-01T10:00:00Z",
			[]string{"2026-06-01T11:00:00Z"}},
		{"within a minute", "* * * * *", "UTC", "2026-06-01T10:00:59.999Z",
			[]string{"2026-06-01T10:01:00Z", "2026-06-01T10:02:00Z"}},
		// 29 February, across 2100, which is no leap year.
		{"leap day", "0 0 29 2 *", "UTC", "2097-01-01T00:00:00Z",
			[]string{"2104-02-29T00:00:00Z"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := mustParse(t, schema.Schedule{Cron: tt.cron, Timezone: tt.zone})
			at := utc(t, tt.from)
			for i, w := range tt.want {
				next, ok := s.Next(at)
				if !ok || !next.Equal(utc(t, w)) || next.Location() != time.UTC {
					t.Fatalf("occurrence %d after %s: got %s (ok %v), want %s", i, at.Format(time.RFC3339), next, ok, w)
				}
				at = next
			}
		})
	}
}

// TestScheduleDSTOracle compares Next, over two days around every
// transition of a few zones, with a brute force that needs no reasoning
// about zones: it walks the instants minute by minute and runs at the first
// instant whose wall clock reaches a matching civil time not reached before.
// robfig's own schedule in UTC matches the civil times.
func TestScheduleDSTOracle(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	lines := []string{"* * * * *", "*/15 * * * *", "0 * * * *", "30 2 * * *", "30 1 * * *", "59 * * * *", "0 0 * * *", "*/7 1-3 * * *", "0,30 0-4 * * *"}
	for range 12 {
		lines = append(lines, fmt.Sprintf("%s %s * * *", randField(rng, 0, 59), randField(rng, 0, 23)))
	}
	zones := map[string][2]int{"Europe/Berlin": {2025, 2027}, "America/New_York": {2025, 2027}, "Australia/Lord_Howe": {2025, 2027},
		"America/Santiago": {2025, 2027}, "America/Sao_Paulo": {2017, 2019}, "Pacific/Apia": {2011, 2012}}
	for name, years := range zones {
		loc := zone(t, name)
		var transitions []time.Time
		for x := time.Date(years[0], 1, 1, 0, 0, 0, 0, time.UTC); x.Year() < years[1]; {
			_, end := x.In(loc).ZoneBounds()
			if end.IsZero() {
				break
			}
			transitions, x = append(transitions, end), end
		}
		if len(transitions) == 0 {
			t.Fatalf("%s: no transitions in %v", name, years)
		}
		for _, line := range lines {
			spec, err := schema.ParseCron(line)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			s := mustParse(t, schema.Schedule{Cron: line, Timezone: name})
			for _, tr := range transitions {
				from, to := tr.Add(-24*time.Hour).Truncate(time.Minute), tr.Add(24*time.Hour)
				want := bruteForce(spec, loc, from, to)
				var got []time.Time
				for at := from; ; {
					next, ok := s.Next(at)
					if !ok || next.After(to) || !next.After(at) {
						break
					}
					got, at = append(got, next), next
				}
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Errorf("%q in %s around %s:\ngot  %v\nwant %v", line, name, tr.UTC(), got, want)
					continue
				}
				// And from instants between occurrences, in folds' second passes too.
				for at := from; len(want) > 0 && at.Before(want[len(want)-1]); at = at.Add(time.Duration(rng.Int63n(int64(20 * time.Minute)))) {
					i := sort.Search(len(want), func(i int) bool { return want[i].After(at) })
					if next, ok := s.Next(at); !ok || !next.Equal(want[i]) {
						t.Errorf("%q in %s: after %s got %s (ok %v), want %s", line, name, at.UTC(), next, ok, want[i])
						break
					}
				}
			}
		}
	}
}

func bruteForce(spec cron.Schedule, loc *time.Location, from, to time.Time) []time.Time {
	wall := func(u time.Time) time.Time {
		l := u.In(loc)
		return time.Date(l.Year(), l.Month(), l.Day(), l.Hour(), l.Minute(), 0, 0, time.UTC)
	}
	var out []time.Time
	reached := wall(from)
	match := spec.Next(reached) // the first matching civil time not reached
	for u := from.Add(time.Minute); !u.After(to); u = u.Add(time.Minute) {
		if w := wall(u); w.After(reached) {
			if !match.After(w) {
				out = append(out, u.UTC())
				match = spec.Next(w)
			}
			reached = w
		}
	}
	return out
}

// randField is a random crontab field within [lo, hi].
func randField(rng *rand.Rand, lo, hi int) string {
	n := func() int { return lo + rng.Intn(hi-lo+1) }
	switch rng.Intn(6) {
	case 0:
		return "*"
	case 1:
		return fmt.Sprintf("*/%d", 1+rng.Intn(hi-lo+1))
	case 2:
		return fmt.Sprint(n())
	case 3:
		a, b := n(), n()
		return fmt.Sprintf("%d-%d", min(a, b), max(a, b))
	case 4:
		a, b := n(), n()
		return fmt.Sprintf("%d-%d/%d", min(a, b), max(a, b), 1+rng.Intn(5))
	}
	return fmt.Sprintf("%d,%d,%d", n(), n(), n())
}

// TestScheduleRobfigOracle: where no transition is involved (UTC, and
// zones without daylight saving time), Next agrees with robfig's own
// SpecSchedule.Next over many steps of random (seeded) lines.
func TestScheduleRobfigOracle(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for i := range 300 {
		line := strings.Join([]string{randField(rng, 0, 59), randField(rng, 0, 23), randField(rng, 1, 31),
			randField(rng, 1, 12), randField(rng, 0, 6)}, " ")
		name := []string{"UTC", "Asia/Kolkata", "Asia/Tokyo", "America/Phoenix"}[i%4]
		loc := zone(t, name)
		s, err := ParseSchedule(schema.Schedule{Cron: line, Timezone: name})
		if err != nil {
			if !reason.Is(err, reason.InvalidAppliedSpec) || !strings.Contains(err.Error(), "matches no date") {
				t.Fatalf("%q: %v", line, err)
			}
			continue // a day that no month has, such as 31 in 2,4
		}
		spec, err := schema.ParseCron(line)
		if err != nil {
			t.Fatal(err)
		}
		at := time.Date(1990+rng.Intn(50), time.Month(1+rng.Intn(12)), 1+rng.Intn(28), rng.Intn(24), rng.Intn(60), rng.Intn(60), 0, time.UTC)
		for step := range 200 {
			want := spec.Next(at.In(loc))
			got, ok := s.Next(at)
			if want.IsZero() { // robfig gives up after five years; ours looks further
				if ok && got.Before(at.AddDate(5, 0, 0)) {
					t.Fatalf("%q in %s, step %d after %s: got %s, robfig none", line, name, step, at, got)
				}
				break
			}
			if !ok || !got.Equal(want) {
				t.Fatalf("%q in %s, step %d after %s: got %s (ok %v), want %s", line, name, step, at, got, ok, want.UTC())
			}
			at = got
			if step%17 == 0 { // and now and then from between occurrences
				at = at.Add(time.Duration(rng.Int63n(int64(48 * time.Hour))))
			}
		}
	}
}

func TestScheduleEveryAt(t *testing.T) {
	tests := []struct {
		name  string
		sched schema.Schedule
		from  string
		want  []string // none: no occurrence
	}{
		{"every 2h", schema.Schedule{Every: "2h"}, "2026-03-29T01:00:00Z",
			[]string{"2026-03-29T02:00:00Z", "2026-03-29T04:00:00Z"}},
		{"every 2h from an occurrence", schema.Schedule{Every: "2h"}, "2026-03-29T02:00:00Z",
			[]string{"2026-03-29T04:00:00Z"}},
		// 90m divides a day: 00:00, 01:30, 03:00 of every UTC day.
		{"every 90m", schema.Schedule{Every: "90m"}, "2026-03-29T01:00:00Z",
			[]string{"2026-03-29T01:30:00Z", "2026-03-29T03:00:00Z", "2026-03-29T04:30:00Z"}},
		{"every 90m across midnight", schema.Schedule{Every: "90m"}, "2026-03-29T23:00:00Z",
			[]string{"2026-03-30T00:00:00Z"}},
		{"every 1h30m is 90m", schema.Schedule{Every: "1h30m"}, "2026-03-29T01:00:00Z",
			[]string{"2026-03-29T01:30:00Z"}},
		{"every before the epoch", schema.Schedule{Every: "2h"}, "1969-12-31T21:00:00Z",
			[]string{"1969-12-31T22:00:00Z", "1970-01-01T00:00:00Z"}},
		{"at, before", schema.Schedule{At: "2026-12-01T09:00:00Z"}, "2026-11-30T00:00:00Z",
			[]string{"2026-12-01T09:00:00Z"}},
		{"at with an offset", schema.Schedule{At: "2026-12-01T10:00:00+01:00"}, "2026-11-30T00:00:00Z",
			[]string{"2026-12-01T09:00:00Z"}},
		{"at, at the instant", schema.Schedule{At: "2026-12-01T09:00:00Z"}, "2026-12-01T09:00:00Z", nil},
		{"at, after", schema.Schedule{At: "2026-12-01T09:00:00Z"}, "2027-01-01T00:00:00Z", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := mustParse(t, tt.sched)
			at := utc(t, tt.from)
			for i, w := range tt.want {
				next, ok := s.Next(at)
				if !ok || !next.Equal(utc(t, w)) || next.Location() != time.UTC {
					t.Fatalf("occurrence %d after %s: got %s (ok %v), want %s", i, at, next, ok, w)
				}
				at = next
			}
			if tt.want == nil {
				if next, ok := s.Next(at); ok {
					t.Fatalf("after %s: got %s, want none", at, next)
				}
			}
		})
	}
}

func TestParseScheduleInvalid(t *testing.T) {
	tests := []struct {
		name  string
		sched schema.Schedule
		want  string
	}{
		{"nothing", schema.Schedule{}, "exactly one"},
		{"two", schema.Schedule{Every: "1h", At: "2026-12-01T09:00:00Z"}, "exactly one"},
		{"bad cron", schema.Schedule{Cron: "61 * * * *", Timezone: "UTC"}, `cron "61 * * * *"`},
		{"four fields", schema.Schedule{Cron: "* * * *", Timezone: "UTC"}, "cron"},
		{"six fields", schema.Schedule{Cron: "0 * * * * *", Timezone: "UTC"}, "cron"},
		{"@every in cron", schema.Schedule{Cron: "@every 1h", Timezone: "UTC"}, "written as every"},
		{"unknown descriptor", schema.Schedule{Cron: "@sometimes", Timezone: "UTC"}, "cron"},
		{"zone in the line", schema.Schedule{Cron: "CRON_TZ=UTC", Timezone: "UTC"}, "in timezone"},
		{"never", schema.Schedule{Cron: "0 0 30 2 *", Timezone: "UTC"}, "matches no date"},
		{"no zone", schema.Schedule{Cron: "* * * * *"}, `timezone ""`},
		{"zone Local", schema.Schedule{Cron: "* * * * *", Timezone: "Local"}, `timezone "Local"`},
		{"bad zone", schema.Schedule{Cron: "* * * * *", Timezone: "Mars/Olympus_Mons"}, `timezone "Mars/Olympus_Mons"`},
		{"zone without cron", schema.Schedule{Every: "1h", Timezone: "UTC"}, "cron only"},
		{"every below 1m", schema.Schedule{Every: "30s"}, `every "30s"`},
		{"every 59s999ms", schema.Schedule{Every: "59s999ms"}, "at least 1m"},
		{"every in days", schema.Schedule{Every: "1d"}, `every "1d"`},
		{"every negative", schema.Schedule{Every: "-1h"}, `every "-1h"`},
		{"every fraction", schema.Schedule{Every: "1.5h"}, `every "1.5h"`},
		{"every overflow", schema.Schedule{Every: "99999999999h"}, "every"},
		{"bad at", schema.Schedule{At: "2026-12-01 09:00"}, "RFC 3339"},
		{"at without zone", schema.Schedule{At: "2026-12-01T09:00:00"}, "RFC 3339"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := ParseSchedule(tt.sched)
			if err == nil {
				t.Fatalf("got %v, want an error", s)
			}
			if !reason.Is(err, reason.InvalidAppliedSpec) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want %s containing %q", err, reason.InvalidAppliedSpec, tt.want)
			}
		})
	}
	if _, err := ParseSchedule(schema.Schedule{Every: "1m"}); err != nil {
		t.Fatalf("every 1m: %v", err)
	}
}

func TestScheduleDue(t *testing.T) {
	hourly := mustParse(t, schema.Schedule{Cron: "0 * * * *", Timezone: "UTC"})
	quarter := mustParse(t, schema.Schedule{Cron: "*/15 * * * *", Timezone: "Europe/Berlin"})
	at := mustParse(t, schema.Schedule{At: "2026-12-01T09:00:00Z"})
	tests := []struct {
		name        string
		s           Schedule
		cursor, now string
		late        time.Duration
		policy      CatchUp
		run         []string
		missed      int
		cursorAfter string // "": now
	}{
		{"on time", hourly, "2026-03-01T09:59:30Z", "2026-03-01T10:00:05Z", time.Minute, CatchUpSkip,
			[]string{"2026-03-01T10:00:00Z"}, 0, ""},
		{"nothing yet", hourly, "2026-03-01T10:00:05Z", "2026-03-01T10:00:06Z", time.Minute, CatchUpSkip, nil, 0, ""},
		{"at the tolerance", hourly, "2026-03-01T09:59:30Z", "2026-03-01T10:01:00Z", time.Minute, CatchUpSkip,
			[]string{"2026-03-01T10:00:00Z"}, 0, ""},
		{"beyond the tolerance", hourly, "2026-03-01T09:59:30Z", "2026-03-01T10:01:00.001Z", time.Minute, CatchUpSkip, nil, 1, ""},
		{"several on time, oldest first", quarter, "2026-03-29T00:40:00Z", "2026-03-29T01:20:00Z", time.Hour, CatchUpSkip,
			[]string{"2026-03-29T00:45:00Z", "2026-03-29T01:00:00Z", "2026-03-29T01:15:00Z"}, 0, ""},
		// Down from 10:00:30 to 15:30: 11:00 to 15:00 missed.
		{"skip after downtime", hourly, "2026-03-01T10:00:30Z", "2026-03-01T15:30:00Z", time.Minute, CatchUpSkip, nil, 5, ""},
		{"latest after downtime", hourly, "2026-03-01T10:00:30Z", "2026-03-01T15:30:00Z", time.Minute, CatchUpLatest,
			[]string{"2026-03-01T15:00:00Z"}, 4, ""},
		{"unknown policy skips", hourly, "2026-03-01T10:00:30Z", "2026-03-01T15:30:00Z", time.Minute, "", nil, 5, ""},
		// Back at 15:00:10: 15:00 is on time and wins over 11:00 to 14:00.
		{"on time beats missed", hourly, "2026-03-01T10:00:30Z", "2026-03-01T15:00:10Z", time.Minute, CatchUpLatest,
			[]string{"2026-03-01T15:00:00Z"}, 4, ""},
		{"on time after skip", hourly, "2026-03-01T10:00:30Z", "2026-03-01T15:00:10Z", time.Minute, CatchUpSkip,
			[]string{"2026-03-01T15:00:00Z"}, 4, ""},
		{"clock set back", hourly, "2026-03-01T10:00:30Z", "2026-03-01T09:00:00Z", time.Minute, CatchUpLatest,
			nil, 0, "2026-03-01T10:00:30Z"},
		{"at on time", at, "2026-12-01T08:59:59Z", "2026-12-01T09:00:01Z", time.Minute, CatchUpSkip,
			[]string{"2026-12-01T09:00:00Z"}, 0, ""},
		{"at missed, skip", at, "2026-11-30T00:00:00Z", "2026-12-02T00:00:00Z", time.Minute, CatchUpSkip, nil, 1, ""},
		{"at missed, latest", at, "2026-11-30T00:00:00Z", "2026-12-02T00:00:00Z", time.Minute, CatchUpLatest,
			[]string{"2026-12-01T09:00:00Z"}, 0, ""},
		{"at handled", at, "2026-12-02T00:00:00Z", "2027-12-02T00:00:00Z", time.Minute, CatchUpLatest, nil, 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := Due(tt.s, utc(t, tt.cursor), utc(t, tt.now), tt.late, tt.policy)
			var want []time.Time
			for _, r := range tt.run {
				want = append(want, utc(t, r))
			}
			wantCursor := utc(t, tt.now)
			if tt.cursorAfter != "" {
				wantCursor = utc(t, tt.cursorAfter)
			}
			if fmt.Sprint(d.Run) != fmt.Sprint(want) || d.Missed != tt.missed || d.Capped || !d.Cursor.Equal(wantCursor) {
				t.Fatalf("got %+v, want run %v, missed %d, cursor %s", d, want, tt.missed, wantCursor)
			}
		})
	}
}

// TestScheduleDueOnce: a one-time job runs once however often Due is asked.
func TestScheduleDueOnce(t *testing.T) {
	for _, policy := range []CatchUp{CatchUpSkip, CatchUpLatest} {
		s := mustParse(t, schema.Schedule{At: "2026-12-01T09:00:00Z"})
		cursor, runs := utc(t, "2026-11-30T00:00:00Z"), 0
		for now := utc(t, "2026-12-01T08:58:00Z"); now.Before(utc(t, "2026-12-01T10:00:00Z")); now = now.Add(7 * time.Second) {
			d := Due(s, cursor, now, time.Minute, policy)
			runs += len(d.Run)
			cursor = d.Cursor
		}
		if runs != 1 {
			t.Errorf("%s: got %d runs, want 1", policy, runs)
		}
	}
}

// TestScheduleDueLongDowntime: five years down with a per-minute cron
// returns (counting capped) and, for latest, runs the last minute missed.
func TestScheduleDueLongDowntime(t *testing.T) {
	s := mustParse(t, schema.Schedule{Cron: "* * * * *", Timezone: "Europe/Berlin"})
	cursor, now := utc(t, "2026-03-01T12:00:00Z"), utc(t, "2031-03-01T12:00:30Z")
	d := Due(s, cursor, now, 10*time.Second, CatchUpLatest)
	if !d.Capped || d.Missed != maxCount || fmt.Sprint(d.Run) != fmt.Sprint([]time.Time{utc(t, "2031-03-01T12:00:00Z")}) || !d.Cursor.Equal(now) {
		t.Fatalf("got %+v, want the capped count %d and run [2031-03-01T12:00:00Z]", d, maxCount)
	}
	d = Due(s, cursor, now, 10*time.Second, CatchUpSkip)
	if !d.Capped || d.Missed != maxCount || len(d.Run) != 0 {
		t.Fatalf("skip: got %+v", d)
	}
	// From the zero cursor, and a rare line whose last occurrence is far back.
	rare := mustParse(t, schema.Schedule{Cron: "* * 29 2 *", Timezone: "America/New_York"})
	d = Due(rare, time.Time{}, now, time.Minute, CatchUpLatest)
	if !d.Capped || fmt.Sprint(d.Run) != fmt.Sprint([]time.Time{utc(t, "2028-03-01T04:59:00Z")}) {
		t.Fatalf("rare: got %+v, want run [2028-03-01T04:59:00Z]", d)
	}
	// An interval is counted exactly: the minutes of 5 years and a day
	// (2028 is a leap year), but the one run.
	every := mustParse(t, schema.Schedule{Every: "1m"})
	d = Due(every, cursor, now, 10*time.Second, CatchUpLatest)
	if want := (5*365+1)*24*60 - 1; d.Capped || d.Missed != want || fmt.Sprint(d.Run) != fmt.Sprint([]time.Time{utc(t, "2031-03-01T12:00:00Z")}) {
		t.Fatalf("every: got missed %d capped %v run %v, want missed %d", d.Missed, d.Capped, d.Run, want)
	}
	d = Due(every, time.Time{}, now, 10*time.Second, CatchUpSkip)
	if d.Capped || d.Missed < 100_000_000 {
		t.Fatalf("every from the zero cursor: got missed %d", d.Missed)
	}
}

// TestScheduleDueBoundedRuns: with a tolerance wider than maxCount
// occurrences, one Due runs maxCount of them and the next the rest.
func TestScheduleDueBoundedRuns(t *testing.T) {
	s := mustParse(t, schema.Schedule{Cron: "* * * * *", Timezone: "UTC"})
	cursor, now := utc(t, "2026-03-01T00:00:00Z"), utc(t, "2026-03-02T00:00:00Z")
	d := Due(s, cursor, now, 48*time.Hour, CatchUpSkip)
	if len(d.Run) != maxCount || !d.Cursor.Equal(d.Run[maxCount-1]) || d.Missed != 0 {
		t.Fatalf("got %d runs, cursor %s, missed %d", len(d.Run), d.Cursor, d.Missed)
	}
	d2 := Due(s, d.Cursor, now, 48*time.Hour, CatchUpSkip)
	if len(d2.Run) != 24*60-maxCount || !d2.Run[0].Equal(d.Run[maxCount-1].Add(time.Minute)) || !d2.Cursor.Equal(now) {
		t.Fatalf("second call: got %d runs from %s, cursor %s", len(d2.Run), d2.Run[0], d2.Cursor)
	}
}

func BenchmarkScheduleNext(b *testing.B) {
	s := mustParse(b, schema.Schedule{Cron: "*/15 * * * *", Timezone: "Europe/Berlin"})
	start := utc(b, "2026-01-01T00:00:00Z")
	at := start
	for b.Loop() {
		next, ok := s.Next(at)
		if !ok {
			b.Fatal("no next occurrence")
		}
		at = next
		if at.Year() > 2026 {
			at = start
		}
	}
}
