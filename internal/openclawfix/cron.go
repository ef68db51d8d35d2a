package openclawfix

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/nlx-dev/nlx/internal/reason"

	// The cron zones' rules, should the machine have none.
	_ "time/tzdata"
)

// ScheduleKind is a cron job's schedule.kind.
type ScheduleKind string

// The schedule kinds written: three OpenClaw's era 1 to 3 know, and one of
// the later ones (a record nlx does not understand).
const (
	ScheduleAt     ScheduleKind = "at"
	ScheduleEvery  ScheduleKind = "every"
	ScheduleCron   ScheduleKind = "cron"
	ScheduleOnExit ScheduleKind = "on-exit"
)

// PayloadKind is a cron job's payload.kind.
type PayloadKind string

// The payload kinds.
const (
	PayloadAgentTurn   PayloadKind = "agentTurn"
	PayloadSystemEvent PayloadKind = "systemEvent"
)

// RunStatus is a cron run's status (run-log status, state.lastRunStatus).
type RunStatus string

// The run statuses.
const (
	RunOK      RunStatus = "ok"
	RunError   RunStatus = RunStatus(reason.Failure) // OpenClaw's word, spelled as nlx's own failure code
	RunSkipped RunStatus = "skipped"
)

// DeliveryMode is a cron job's delivery.mode.
type DeliveryMode string

// The delivery modes.
const (
	DeliveryNone     DeliveryMode = "none"
	DeliveryAnnounce DeliveryMode = "announce"
	DeliveryWebhook  DeliveryMode = "webhook"
)

// deliveryStatus is a run's deliveryStatus (state.lastDeliveryStatus).
type deliveryStatus string

const (
	delivered    deliveryStatus = "delivered"
	notDelivered deliveryStatus = "not-delivered"
	notRequested deliveryStatus = "not-requested"
)

// role is what a job is there to exercise.
type role int

const (
	roleRecurring     role = iota
	roleOnExit             // the unsupported schedule kind
	roleSystemEvent        // a main-session system event
	roleRunning            // the interrupted run (state.runningAtMs)
	roleDoneOnce           // an `at` job that ran ok and was kept
	rolePendingOnce        // an `at` job still to run
	roleFailedOnce         // an `at` job that failed for good, kept disabled
	roleLegacy             // era 1: jobId and schedule.cron
	roleSessionTarget      // sessionTarget "session:<id>"
)

type cronSchedule struct {
	Kind      ScheduleKind `json:"kind"`
	At        string       `json:"at,omitempty"`
	EveryMs   int64        `json:"everyMs,omitempty"`
	AnchorMs  int64        `json:"anchorMs,omitempty"`
	Expr      string       `json:"expr,omitempty"`
	Cron      string       `json:"cron,omitempty"` // the legacy spelling of expr
	TZ        string       `json:"tz,omitempty"`
	StaggerMs int64        `json:"staggerMs,omitempty"`
}

type cronPayload struct {
	Kind           PayloadKind `json:"kind"`
	Text           string      `json:"text,omitempty"`
	Message        string      `json:"message,omitempty"`
	Model          string      `json:"model,omitempty"`
	Thinking       string      `json:"thinking,omitempty"`
	TimeoutSeconds int         `json:"timeoutSeconds,omitempty"`
}

type failureDestination struct {
	Channel string       `json:"channel,omitempty"`
	To      string       `json:"to,omitempty"`
	Mode    DeliveryMode `json:"mode,omitempty"`
}

type cronDelivery struct {
	Mode               DeliveryMode        `json:"mode"`
	Channel            string              `json:"channel,omitempty"`
	To                 string              `json:"to,omitempty"`
	BestEffort         bool                `json:"bestEffort,omitempty"`
	FailureDestination *failureDestination `json:"failureDestination,omitempty"`
}

type failureAlert struct {
	After      int          `json:"after"`
	Channel    string       `json:"channel"`
	To         string       `json:"to"`
	CooldownMs int64        `json:"cooldownMs"`
	Mode       DeliveryMode `json:"mode,omitempty"`
}

type cronState struct {
	NextRunAtMs        int64          `json:"nextRunAtMs,omitempty"`
	RunningAtMs        int64          `json:"runningAtMs,omitempty"`
	LastRunAtMs        int64          `json:"lastRunAtMs,omitempty"`
	LastRunStatus      RunStatus      `json:"lastRunStatus,omitempty"`
	LastStatus         RunStatus      `json:"lastStatus,omitempty"`
	LastError          string         `json:"lastError,omitempty"`
	LastDurationMs     int64          `json:"lastDurationMs,omitempty"`
	ConsecutiveErrors  int            `json:"consecutiveErrors,omitempty"`
	LastDeliveryStatus deliveryStatus `json:"lastDeliveryStatus,omitempty"`
	LastDelivered      *bool          `json:"lastDelivered,omitempty"`
}

// cronJob is a job as jobs.json holds it. ID or JobID (the legacy
// spelling) is set; State and UpdatedAtMs only where the era keeps the
// state inline.
type cronJob struct {
	ID             string        `json:"id,omitempty"`
	JobID          string        `json:"jobId,omitempty"`
	AgentID        string        `json:"agentId,omitempty"`
	Name           string        `json:"name"`
	Description    string        `json:"description,omitempty"`
	Enabled        bool          `json:"enabled"`
	DeleteAfterRun *bool         `json:"deleteAfterRun,omitempty"`
	CreatedAtMs    int64         `json:"createdAtMs"`
	UpdatedAtMs    int64         `json:"updatedAtMs,omitempty"`
	Schedule       cronSchedule  `json:"schedule"`
	SessionTarget  string        `json:"sessionTarget"`
	WakeMode       string        `json:"wakeMode"`
	Payload        cronPayload   `json:"payload"`
	Delivery       *cronDelivery `json:"delivery,omitempty"`
	FailureAlert   any           `json:"failureAlert,omitempty"` // *failureAlert or false
	State          *cronState    `json:"state,omitempty"`
}

type runUsage struct {
	Input  int64 `json:"input_tokens"`
	Output int64 `json:"output_tokens"`
	Total  int64 `json:"total_tokens"`
}

// runEntry is one line of cron/runs/<jobId>.jsonl (one cron_run_logs row).
type runEntry struct {
	Ts             int64          `json:"ts"`
	JobID          string         `json:"jobId"`
	Action         string         `json:"action"`
	Status         RunStatus      `json:"status"`
	Error          string         `json:"error,omitempty"`
	Summary        string         `json:"summary,omitempty"`
	Delivered      bool           `json:"delivered"`
	DeliveryStatus deliveryStatus `json:"deliveryStatus"`
	DeliveryError  string         `json:"deliveryError,omitempty"`
	SessionID      string         `json:"sessionId,omitempty"`
	SessionKey     string         `json:"sessionKey,omitempty"`
	RunAtMs        int64          `json:"runAtMs"`
	DurationMs     int64          `json:"durationMs"`
	NextRunAtMs    int64          `json:"nextRunAtMs,omitempty"`
	Model          string         `json:"model,omitempty"`
	Provider       string         `json:"provider,omitempty"`
	Usage          *runUsage      `json:"usage,omitempty"`
}

// job is one generated job: its definition, state and runs.
type job struct {
	role  role
	id    string
	agent string // effective agent; the definition omits agentId on some of main's
	def   cronJob
	state cronState
	runs  []runEntry
	// disabledAtMs is when someone disabled a recurring job.
	disabledAtMs int64
}

func (j *job) truth() JobTruth {
	t := JobTruth{
		ID: j.id, Name: j.def.Name, AgentID: j.agent, Kind: string(j.def.Schedule.Kind),
		Expr: j.def.Schedule.Expr, TZ: j.def.Schedule.TZ, EveryMs: j.def.Schedule.EveryMs, At: j.def.Schedule.At,
		Message: j.def.Payload.Message, PayloadKind: string(j.def.Payload.Kind), SessionTarget: j.def.SessionTarget,
		Enabled: j.def.Enabled, RunningAtMs: j.state.RunningAtMs, LastRunStatus: string(j.state.LastRunStatus), Runs: len(j.runs),
	}
	if j.def.Payload.Kind == PayloadSystemEvent {
		t.Message = j.def.Payload.Text
	}
	return t
}

// definition is the job without runtime fields (era 2's jobs.json, era
// 3's job_json).
func (j *job) definition() cronJob {
	d := j.def
	d.ID = j.id
	d.UpdatedAtMs = 0
	d.State = nil
	return d
}

// inline is the job with its state inline (era 1), in the legacy shape
// for the legacy job.
func (j *job) inline(legacy bool) cronJob {
	d := j.definition()
	st := j.state
	d.State = &st
	d.UpdatedAtMs = j.updatedAtMs()
	if legacy && j.role == roleLegacy {
		d.JobID, d.ID = d.ID, ""
		d.Schedule.Cron, d.Schedule.Expr = d.Schedule.Expr, ""
	}
	return d
}

func (j *job) updatedAtMs() int64 {
	u := j.def.CreatedAtMs
	if n := len(j.runs); n > 0 && j.runs[n-1].Ts > u {
		u = j.runs[n-1].Ts
	}
	if j.state.RunningAtMs > u {
		u = j.state.RunningAtMs
	}
	return max(u, j.disabledAtMs)
}

// scheduleIdentity is jobs-state.json's and cron_jobs' identity string.
func (j *job) scheduleIdentity() (string, error) {
	b, err := compactJSON(obj{{"version", 1}, {"enabled", j.def.Enabled}, {"schedule", j.def.Schedule}})
	return string(b), err
}

// jobSpec is a catalogue entry: a realistic name and message.
type jobSpec struct{ name, message string }

var jobCatalogue = []jobSpec{
	{"Morning digest", "Summarize my unread email and today's calendar in five bullet points. Flag anything that needs a reply before noon."},
	{"Nightly backup check", "Check that last night's restic backup to the NAS finished and that the snapshot count grew. Report only problems."},
	{"Weekly review prep", "Collect what I shipped this week from git, the closed Linear issues and my notes, and draft a short weekly review."},
	{"Inbox zero nudge", "Count the emails older than three days that still need a reply and list the five oldest with one line each."},
	{"Standup notes", "Draft my standup: yesterday from git commits and calendar, today from the top of my task list, blockers from open PR reviews."},
	{"Price watch: Sony WH-1000XM6", "Check the price of the Sony WH-1000XM6 at the usual three shops and tell me if it dropped below 280 EUR."},
	{"Plant watering reminder", "Remind me to water the balcony plants unless it rained more than 5 mm in Berlin today."},
	{"Server disk usage", "Run df -h on the home server and warn if any filesystem is above 85%."},
	{"Certificate expiry scan", "List TLS certificates on my domains that expire within 21 days."},
	{"GitHub notifications triage", "Go through my GitHub notifications, mark the noise read and summarize the five that matter."},
	{"Daily journal prompt", "Ask me one good reflective question for tonight's journal, based on what happened today."},
	{"Flight price tracker BER-LIS", "Search round-trip fares Berlin to Lisbon for the second week of March and report the cheapest three."},
	{"Pay rent reminder", "Remind me to pay the rent and check the standing order went through."},
	{"Kubernetes pod health", "Check the home-lab cluster for pods not Running or restarting more than 3 times in the last hour."},
	{"Hacker News top stories", "Give me the top 10 Hacker News stories with one sentence each, skip crypto and AI hype."},
	{"Water filter replacement", "Remind me to replace the water filter cartridge."},
	{"Dependabot roundup", "Summarize open Dependabot PRs across my repositories grouped by severity."},
	{"Calendar conflicts", "Look at tomorrow's calendar and tell me about overlapping meetings or back-to-back blocks longer than 3 hours."},
	{"Weekly grocery list", "Build the grocery list from the meal plan note and what's left in the pantry note."},
	{"Evening wind-down", "Summarize what's still open today and suggest the one thing to do first tomorrow."},
	{"Uptime report", "Check the Uptime Kuma status page and summarize incidents in the last 24 hours."},
	{"Monthly subscription audit", "List the recurring charges from last month's bank export and flag ones I haven't used."},
	{"Newsletter digest", "Summarize this week's newsletters in the Newsletters label and archive them."},
	{"Gym reminder", "Remind me about the 18:30 gym session if my calendar is free."},
	{"Package tracking", "Check the tracking numbers in the Deliveries note and tell me what arrives today."},
	{"Log anomaly sweep", "Scan the gateway and nginx logs of the last hour for new error patterns."},
	{"Home Assistant battery check", "List Home Assistant devices with battery below 20%."},
	{"Stock portfolio snapshot", "Give me a one-paragraph snapshot of my watchlist: biggest movers and anything down more than 5%."},
	{"Read-later cleanup", "Pick three articles from my read-later list that are still relevant and archive the rest older than a month."},
	{"Team birthday reminders", "Check the team birthdays note and remind me of anyone's birthday in the next three days."},
	{"Weekly photo backup", "Verify that the phone photo sync copied this week's photos to the NAS."},
	{"PR review queue", "List pull requests waiting on my review, oldest first, with their age."},
	{"Language practice", "Send me five Portuguese phrases for today with their translations, then quiz me tomorrow."},
	{"Invoice due check", "Check the invoices folder for unpaid invoices due within a week."},
	{"Weather warning watch", "Check for severe weather warnings for Berlin and Lisbon."},
	{"Reading progress", "Ask how far I got in my current book and update the reading log note."},
	{"DNS record audit", "Compare the DNS records of my domains with the expected list in the infra note."},
	{"Docker image updates", "Check for newer tags of the images running on the home server and list the ones with security fixes."},
	{"Sleep summary", "Summarize last night's sleep from the Oura export and compare with the weekly average."},
	{"Quarterly goals check-in", "Review my quarterly goals note and tell me which goal is behind."},
	{"Car service reminder", "Remind me that the car service is due and offer to find a slot."},
	{"On-call handover", "Draft the on-call handover from this week's incidents and open alerts."},
	{"Bandwidth report", "Report the router's bandwidth usage for the day and the top three devices."},
	{"Password rotation reminder", "Remind me which service passwords in the rotation note are older than 180 days."},
	{"Meeting notes follow-up", "Go through today's meeting notes and list action items assigned to me."},
	{"Arxiv watch", "Find new arXiv papers on program synthesis from the last two days and summarize the three most relevant."},
	{"Cold storage sync", "Check that the weekly cold-storage sync to B2 finished and report its size."},
	{"Expense receipts", "Collect this week's receipts from email and add them to the expenses sheet."},
	{"School newsletter", "Summarize the school newsletter and add events to the family calendar after asking."},
	{"Security advisories", "Check security advisories for the packages in my main projects' lockfiles."},
	{"RSS catch-up", "Summarize unread items from my RSS feeds in the Tech folder."},
	{"Water intake check", "Ask whether I drank enough water today and log the answer."},
	{"Weekly finance summary", "Summarize this week's spending by category from the bank export."},
	{"Nightly repo fetch", "Fetch all repos under ~/src and report branches that diverged from origin."},
	{"Sunday planning", "Help me plan the week: list fixed appointments and suggest focus blocks."},
	{"Domain renewal check", "List my domains that renew within 30 days and their renewal price."},
	{"Printer toner check", "Check the office printer's toner level through its web page."},
	{"Open tabs triage", "Summarize the tabs in the Later window and suggest which to close."},
	{"Backup restore drill", "Restore one random file from last week's backup into /tmp and verify its checksum."},
	{"Voice memo transcripts", "Transcribe new voice memos from the phone sync folder and file them by topic."},
	{"Daily focus", "Ask me for today's single most important task and remind me at 14:00."},
	{"Monthly credit report", "Remind me to check the credit report and note the score in the finance note."},
	{"Container restart watch", "List containers on the home server that restarted in the last 6 hours."},
	{"Parcel locker pickup", "Remind me to pick up the parcel from the locker before it's returned."},
	{"Conference CFP deadlines", "List CFP deadlines in the next 30 days for the conferences in my list."},
	{"Garden frost alert", "Warn me if the overnight low in Berlin drops below 2 °C so I can cover the plants."},
	{"Sprint burndown", "Summarize the sprint burndown and the issues at risk."},
	{"Firmware updates", "Check the router, NAS and access points for firmware updates."},
	{"Friday wins", "Ask me for this week's three wins and add them to the brag document."},
	{"Library due dates", "Check the library account for books due in the next five days."},
	{"Electricity price alert", "Check tomorrow's dynamic electricity prices and tell me the cheapest 3-hour window."},
	{"Birthday gift ideas", "Suggest gift ideas for upcoming birthdays in the family calendar, within the budget in my notes."},
}

var cronExprs = []struct {
	expr   string
	maxGap int64
}{
	{"0 7 * * *", day}, {"30 8 * * 1-5", 3 * day}, {"0 9 * * 1", 7 * day}, {"*/15 * * * *", 15 * minute},
	{"0 */6 * * *", 6 * hour}, {"0 18 * * 5", 7 * day}, {"0 3 * * *", day}, {"45 22 * * *", day},
	{"0 12 1 * *", 31 * day}, {"0 8,20 * * *", 12 * hour}, {"5 * * * *", hour}, {"0 10 * * 0", 7 * day},
	{"30 6 * * 1-5", 3 * day}, {"0 0 * * *", day}, {"20 17 * * 1-5", 3 * day}, {"0 21 * * 0", 7 * day},
}

var cronZones = []string{"Europe/Berlin", "America/New_York", "UTC", "Asia/Tokyo", "Europe/London", "America/Los_Angeles"}

var everyIntervals = []int64{10 * minute, 30 * minute, hour, 2 * hour, 4 * hour, 6 * hour, 12 * hour, day}

var runErrors = []string{
	"LLM request failed: 529 overloaded_error",
	"cron: job execution exceeded timeoutSeconds",
	"Telegram send failed: 403 Forbidden: bot was blocked by the user",
	"context window exceeded: 212043 tokens > 200000",
	"exec denied: /usr/bin/ssh is not on the allowlist",
}

var runSummaries = []string{
	"Nothing needs your attention.",
	"3 items need a reply; the rest is newsletters.",
	"All checks passed; no action needed.",
	"Two warnings: disk at 87% on /srv, certificate for git.home.example.net expires in 12 days.",
	"Sent the summary to Telegram.",
	"Found 1 new item since the last run.",
	"No change since yesterday.",
	"Drafted the note and saved it to memory.",
}

func (g *gen) makeJobs() error {
	r := newRng(g.o.Seed, "cron")
	n := g.o.Jobs
	roles := []role{roleOnExit, roleSystemEvent, roleSystemEvent, roleRunning, roleDoneOnce, roleDoneOnce, roleDoneOnce,
		rolePendingOnce, rolePendingOnce, rolePendingOnce, roleFailedOnce, roleLegacy, roleSessionTarget, roleSessionTarget}
	for len(roles) < n {
		roles = append(roles, roleRecurring)
	}
	for i := len(roles) - 1; i > 0; i-- {
		k := r.intn(i + 1)
		roles[i], roles[k] = roles[k], roles[i]
	}
	names := map[string]bool{}
	cat := r.intn(len(jobCatalogue))
	var rec, zone, sysEvents, sessTargets int
	alertFalse := false
	for i, ro := range roles {
		spec := jobCatalogue[(cat+i)%len(jobCatalogue)]
		name := spec.name
		if ro != roleOnExit && ro != roleSystemEvent {
			name = uniqueName(names, name)
		}
		j := &job{role: ro, id: r.uuid(), agent: "main"}
		j.def = cronJob{Name: name, Enabled: true, SessionTarget: "isolated", WakeMode: "now",
			Payload: cronPayload{Kind: PayloadAgentTurn, Message: spec.message}}
		if ro != roleSystemEvent && r.pct(25) {
			j.agent = "ops"
		}
		if j.agent == "ops" || r.pct(80) {
			j.def.AgentID = j.agent
		}
		describe := r.pct(30)
		cronTZ := func() {
			e := cronExprs[r.intn(len(cronExprs))]
			j.def.Schedule = cronSchedule{Kind: ScheduleCron, Expr: e.expr, TZ: cronZones[zone%len(cronZones)]}
			zone++
		}
		switch ro {
		case roleOnExit:
			j.def.Name = uniqueName(names, "Shutdown summary")
			j.def.Schedule = cronSchedule{Kind: ScheduleOnExit}
			j.def.Payload.Message = "Summarize what changed while the gateway was running and note anything unfinished."
		case roleSystemEvent:
			j.def.SessionTarget, j.def.WakeMode = "main", "next-heartbeat"
			if sysEvents == 0 {
				j.def.Name = uniqueName(names, "Inbox heartbeat check")
				j.def.Schedule = cronSchedule{Kind: ScheduleEvery, EveryMs: 4 * hour}
				j.def.Payload = cronPayload{Kind: PayloadSystemEvent, Text: "Heartbeat check: anything urgent in the inbox or the calendar for the next two hours?"}
			} else {
				j.def.Name = uniqueName(names, "Stand-up reminder")
				j.def.Schedule = cronSchedule{Kind: ScheduleCron, Expr: "0 9 * * 1-5", TZ: "Europe/Berlin"}
				j.def.Payload = cronPayload{Kind: PayloadSystemEvent, Text: "Reminder: stand-up at 9:30. Prepare the standup notes."}
			}
			sysEvents++
		case roleRunning:
			j.def.Schedule = cronSchedule{Kind: ScheduleEvery, EveryMs: hour}
		case roleDoneOnce, rolePendingOnce, roleFailedOnce:
			j.def.Schedule = cronSchedule{Kind: ScheduleAt}
			del := ro != roleDoneOnce
			j.def.DeleteAfterRun = &del
		case roleLegacy:
			j.def.Schedule = cronSchedule{Kind: ScheduleCron, Expr: "30 7 * * 1-5", TZ: "Europe/Berlin"}
		case roleSessionTarget:
			j.def.SessionTarget = []string{"session:weekly-review", "session:project-alpha"}[sessTargets%2]
			sessTargets++
			cronTZ()
		default:
			switch {
			case rec < 4:
				e := cronExprs[r.intn(len(cronExprs))]
				j.def.Schedule = cronSchedule{Kind: ScheduleCron, Expr: e.expr}
			case rec%3 == 0:
				j.def.Schedule = cronSchedule{Kind: ScheduleEvery, EveryMs: everyIntervals[r.intn(len(everyIntervals))]}
				if r.pct(40) {
					j.def.Schedule.AnchorMs = -1 // set by simulate
				}
			default:
				cronTZ()
				if strings.HasPrefix(j.def.Schedule.Expr, "0 ") && r.pct(20) {
					j.def.Schedule.StaggerMs = 5 * minute
				}
			}
			if rec%9 == 5 {
				j.def.Enabled = false
			}
			rec++
		}
		if describe {
			j.def.Description = "Created from Telegram: \"" + strings.ToLower(j.def.Name) + "\""
		}
		if j.def.Payload.Kind == PayloadAgentTurn {
			if r.pct(25) {
				j.def.Payload.Model = pick(r, []string{"anthropic/claude-sonnet-4-6", "openai/gpt-5.2", "anthropic/claude-opus-4-6"})
			}
			if r.pct(20) {
				j.def.Payload.Thinking = pick(r, []string{"low", "medium", "high"})
			}
			if r.pct(25) {
				j.def.Payload.TimeoutSeconds = pick(r, []int{120, 300, 600, 900})
			}
			channel, to := "telegram", "5120938471"
			if j.agent == "ops" {
				channel, to = "discord", "channel:1188201456302829608"
			}
			switch p := r.intn(100); {
			case p < 60:
				j.def.Delivery = &cronDelivery{Mode: DeliveryAnnounce, Channel: channel, To: to, BestEffort: r.pct(20)}
				if r.pct(8) {
					j.def.Delivery.FailureDestination = &failureDestination{Channel: "telegram", To: "5120938471", Mode: DeliveryAnnounce}
				}
			case p < 85:
				j.def.Delivery = &cronDelivery{Mode: DeliveryNone}
			default:
				j.def.Delivery = &cronDelivery{Mode: DeliveryWebhook, To: "https://n8n.home.example.net/webhook/openclaw-" + strings.ToLower(strings.Fields(name)[0])}
			}
			switch {
			case !alertFalse && ro == roleRecurring && r.pct(10):
				j.def.FailureAlert = false
				alertFalse = true
			case r.pct(12):
				j.def.FailureAlert = &failureAlert{After: 2, Channel: "telegram", To: "5120938471", CooldownMs: hour, Mode: DeliveryAnnounce}
			}
		}
		if err := g.simulate(j, r); err != nil {
			return fmt.Errorf("job %s: %w", name, err)
		}
		g.jobs = append(g.jobs, j)
	}
	return nil
}

// uniqueName is name, numbered if names has it, and adds it to names.
func uniqueName(names map[string]bool, name string) string {
	n := name
	for k := 2; names[n]; k++ {
		n = name + " (" + strconv.Itoa(k) + ")"
	}
	names[n] = true
	return n
}

// location is a schedule's zone (the gateway host's, UTC, when it has none).
func location(tz string) (*time.Location, error) {
	if tz == "" {
		return time.UTC, nil
	}
	return time.LoadLocation(tz)
}

// fires are the fire times of a recurring schedule in (from, to].
func fires(s cronSchedule, anchor, from, to int64) ([]int64, error) {
	var out []int64
	switch s.Kind {
	case ScheduleEvery:
		t := anchor
		if t <= from {
			t += ((from-t)/s.EveryMs + 1) * s.EveryMs
		}
		for ; t <= to; t += s.EveryMs {
			out = append(out, t)
		}
	case ScheduleCron:
		sched, loc, err := parseCron(s)
		if err != nil {
			return nil, err
		}
		for t := time.UnixMilli(from).In(loc); ; {
			t = sched.Next(t)
			if t.UnixMilli() > to {
				break
			}
			out = append(out, t.UnixMilli())
		}
	}
	return out, nil
}

// nextFire is the first fire time after t.
func nextFire(s cronSchedule, anchor, t int64) (int64, error) {
	if s.Kind == ScheduleEvery {
		f, _ := fires(s, anchor, t, t+s.EveryMs)
		return f[0], nil
	}
	sched, loc, err := parseCron(s)
	if err != nil {
		return 0, err
	}
	return sched.Next(time.UnixMilli(t).In(loc)).UnixMilli(), nil
}

func parseCron(s cronSchedule) (cron.Schedule, *time.Location, error) {
	loc, err := location(s.TZ)
	if err != nil {
		return nil, nil, err
	}
	sched, err := cron.ParseStandard(s.Expr)
	if err != nil {
		return nil, nil, err
	}
	return sched, loc, nil
}

func maxGap(s cronSchedule) int64 {
	if s.Kind == ScheduleEvery {
		return s.EveryMs
	}
	for _, e := range cronExprs {
		if e.expr == s.Expr {
			return e.maxGap
		}
	}
	return 3 * day
}

func roundMinute(ms int64) int64 { return ms - ms%minute }

// simulate gives a job its history: when it was created, its runs and its
// state, consistent with its schedule and Now.
func (g *gen) simulate(j *job, r *rng) error {
	now := g.nowMs
	switch j.role {
	case roleOnExit:
		j.def.CreatedAtMs = now - 3*day - r.between(0, day)
		return nil
	case rolePendingOnce:
		at := roundMinute(now + r.between(2*hour, 20*day))
		j.def.Schedule.At = iso(at)
		j.def.CreatedAtMs = now - r.between(hour, 5*day)
		j.state.NextRunAtMs = at
		return nil
	case roleDoneOnce:
		at := roundMinute(now - r.between(2*day, 40*day))
		j.def.Schedule.At = iso(at)
		j.def.CreatedAtMs = at - r.between(hour, 3*day)
		j.def.Enabled = false
		g.run(j, r, at, 0, RunOK)
		return nil
	case roleFailedOnce:
		at := roundMinute(now - r.between(day, 10*day))
		j.def.Schedule.At = iso(at)
		j.def.CreatedAtMs = at - r.between(hour, 2*day)
		j.def.Enabled = false
		// Transient errors retry with backoff until they give up.
		tries := []int64{at, at + 30*second, at + 90*second}[:1+r.intn(3)]
		for i, t := range tries {
			next := int64(0)
			if i+1 < len(tries) {
				next = tries[i+1]
			}
			g.run(j, r, t, next, RunError)
		}
		return nil
	case roleRunning:
		k := 3 + r.intn(25)
		every := j.def.Schedule.EveryMs
		running := now - 7*minute - 311
		j.def.CreatedAtMs = running - int64(k+1)*every
		for m := 1; m <= k; m++ {
			t := j.def.CreatedAtMs + int64(m)*every
			g.run(j, r, t, t+every, g.status(r))
		}
		j.state.RunningAtMs = running
		j.state.NextRunAtMs = running + every
		return nil
	}
	// Recurring: up to 30 runs before end (Now, or when someone disabled it).
	end := now
	if !j.def.Enabled {
		end = now - r.between(day, 20*day)
		j.disabledAtMs = end
	}
	last := end - 5*second // a fire after this one is not logged yet
	s := &j.def.Schedule
	gap := maxGap(*s)
	k := r.intn(31)
	if lim := int(180 * day / gap); k > lim {
		k = lim
	}
	var f []int64
	anchor := int64(0)
	if s.Kind == ScheduleEvery && s.AnchorMs == 0 {
		// Without an anchor, "every" counts from the job's creation.
		j.def.CreatedAtMs = last - int64(k)*s.EveryMs - r.between(1, s.EveryMs)
		anchor = j.def.CreatedAtMs
		var err error
		if f, err = fires(*s, anchor, anchor, last); err != nil {
			return err
		}
	} else {
		from := end - int64(k+1)*gap - r.between(0, gap)
		if s.Kind == ScheduleEvery {
			s.AnchorMs = from - from%hour
			anchor = s.AnchorMs
		}
		all, err := fires(*s, anchor, from, last)
		if err != nil {
			return err
		}
		k = min(k, len(all))
		idx := len(all) - k
		lo, hi := from, last
		if idx > 0 {
			lo = all[idx-1]
		}
		if idx < len(all) {
			hi = all[idx]
		}
		j.def.CreatedAtMs = r.between(lo+1, hi)
		f = all[idx:]
	}
	for i, t := range f {
		next := int64(0)
		if i+1 < len(f) {
			next = f[i+1]
		} else {
			var err error
			if next, err = nextFire(*s, anchor, t); err != nil {
				return err
			}
		}
		g.run(j, r, t, next, g.status(r))
	}
	if j.def.Enabled {
		next, err := nextFire(*s, anchor, now)
		if err != nil {
			return err
		}
		j.state.NextRunAtMs = next
	}
	return nil
}

// status is a finished run's status: mostly ok.
func (g *gen) status(r *rng) RunStatus {
	switch p := r.intn(100); {
	case p < 85:
		return RunOK
	case p < 95:
		return RunError
	}
	return RunSkipped
}

// run logs one finished run of j, fired at t, and updates j's state.
func (g *gen) run(j *job, r *rng, t, next int64, status RunStatus) {
	e := runEntry{JobID: j.id, Action: "finished", Status: status, RunAtMs: t + r.between(5, 1500), NextRunAtMs: next}
	if j.def.Payload.Kind == PayloadSystemEvent {
		e.DurationMs = r.between(4, 40)
		e.Summary = "System event queued for the main session."
		e.DeliveryStatus = notRequested
	} else {
		e.DurationMs = r.between(2*second, 180*second)
		e.SessionID = r.uuid()
		e.SessionKey = "agent:" + j.agent + ":cron:" + j.id + ":run:" + e.SessionID
		e.Provider, e.Model = "anthropic", "claude-opus-4-6"
		if j.agent == "ops" {
			e.Provider, e.Model = "openai", "gpt-5.2"
		}
		if m := j.def.Payload.Model; m != "" {
			e.Provider, e.Model, _ = strings.Cut(m, "/")
		}
		in := r.between(3000, 40000)
		out := r.between(80, 2500)
		e.Usage = &runUsage{Input: in, Output: out, Total: in + out}
		mode := DeliveryNone
		if j.def.Delivery != nil {
			mode = j.def.Delivery.Mode
		}
		switch {
		case status != RunOK && mode != DeliveryNone:
			e.DeliveryStatus = notDelivered
		case mode == DeliveryNone:
			e.DeliveryStatus = notRequested
		case r.pct(5):
			e.DeliveryStatus = notDelivered
			e.DeliveryError = "Telegram API 429: Too Many Requests: retry after 31"
		default:
			e.Delivered, e.DeliveryStatus = true, delivered
		}
		switch status {
		case RunOK:
			e.Summary = j.def.Name + ": " + pick(r, runSummaries)
		case RunError:
			e.Error = pick(r, runErrors)
		case RunSkipped:
			e.Error = "skipped: a previous run is still in flight"
			e.Usage = nil
			e.DurationMs = r.between(1, 30)
		}
	}
	if lim := g.nowMs - second - e.RunAtMs; e.DurationMs > lim {
		e.DurationMs = max(lim, 1)
	}
	e.Ts = e.RunAtMs + e.DurationMs
	j.runs = append(j.runs, e)
	st := &j.state
	st.LastRunAtMs, st.LastRunStatus, st.LastStatus, st.LastDurationMs = e.RunAtMs, status, status, e.DurationMs
	st.LastError = e.Error
	st.LastDeliveryStatus = e.DeliveryStatus
	d := e.Delivered
	st.LastDelivered = &d
	if status == RunError {
		st.ConsecutiveErrors++
	} else {
		st.ConsecutiveErrors = 0
	}
}

// ----- writing the store -----

func (g *gen) writeCron() error {
	if err := g.makeJobs(); err != nil {
		return err
	}
	switch g.era {
	case 1:
		if err := g.writeJobsFile("cron/jobs.json", g.era1Store(g.jobs)); err != nil {
			return err
		}
		if err := g.writeJobsFile("cron/jobs.json.bak", g.era1Store(g.previous())); err != nil {
			return err
		}
		g.records[KindJobs] += int64(len(g.jobs))
	case 2:
		for _, f := range []struct {
			rel string
			v   any
		}{
			{"cron/jobs.json", g.era2Store(g.jobs)},
			{"cron/jobs.json.bak", g.era2Store(g.previous())},
			{"cron/jobs-state.json", g.era2State(g.jobs)},
			{"cron/jobs-quarantine.json", g.quarantine()},
		} {
			if err := g.writeJobsFile(f.rel, f.v); err != nil {
				return err
			}
		}
		g.records[KindJobs] += int64(len(g.jobs))
		g.records[KindQuarantined]++
	default:
		// doctor --fix moved the store into SQLite and left the files it
		// read, as of the migration, beside it.
		old := g.migratedJobs()
		if err := g.writeJobsFile("cron/jobs.json.migrated", g.era2Store(old)); err != nil {
			return err
		}
		if err := g.writeJobsFile("cron/jobs-state.json.migrated", g.era2State(old)); err != nil {
			return err
		}
		return g.writeStateDB()
	}
	for _, j := range g.jobs {
		if len(j.runs) == 0 {
			continue
		}
		var b []byte
		for _, e := range j.runs {
			line, err := compactJSON(e)
			if err != nil {
				return err
			}
			b = append(append(b, line...), '\n')
		}
		rel := "cron/runs/" + j.id + ".jsonl"
		if err := g.file(rel, b, j.runs[len(j.runs)-1].Ts); err != nil {
			return err
		}
		g.records[KindRuns] += int64(len(j.runs))
	}
	return nil
}

func (g *gen) writeJobsFile(rel string, v any) error {
	return g.jsonFile(rel, v, g.storeMtime())
}

// storeMtime is when the store was last written: its latest change.
func (g *gen) storeMtime() int64 {
	var t int64
	for _, j := range g.jobs {
		t = max(t, j.updatedAtMs())
	}
	return t
}

// previous is the store as jobs.json.bak keeps it: before its newest job.
func (g *gen) previous() []*job {
	newest := 0
	for i, j := range g.jobs {
		if j.def.CreatedAtMs > g.jobs[newest].def.CreatedAtMs {
			newest = i
		}
	}
	return append(g.jobs[:newest:newest], g.jobs[newest+1:]...)
}

// migratedJobs is the store as the era-2 files held it when doctor
// migrated it (ten days before Now): the jobs created by then, and one
// deleted since.
func (g *gen) migratedJobs() []*job {
	at := g.migratedAt()
	var old []*job
	for _, j := range g.jobs {
		if j.def.CreatedAtMs < at {
			old = append(old, j)
		}
	}
	r := newRng(g.o.Seed, "cron-migrated")
	gone := &job{role: roleRecurring, id: r.uuid(), agent: "main"}
	gone.def = cronJob{AgentID: "main", Name: "Old weekly export", Enabled: true, CreatedAtMs: at - 90*day,
		Schedule:      cronSchedule{Kind: ScheduleCron, Expr: "0 6 * * 1", TZ: "Europe/Berlin"},
		SessionTarget: "isolated", WakeMode: "now",
		Payload:  cronPayload{Kind: PayloadAgentTurn, Message: "Export last week's notes to the NAS as Markdown."},
		Delivery: &cronDelivery{Mode: DeliveryNone}}
	gone.state = cronState{NextRunAtMs: at + 2*day}
	return append(old, gone)
}

func (g *gen) migratedAt() int64 { return g.nowMs - 10*day - 3*hour - 12345 }

type storeFile struct {
	Version int       `json:"version"`
	Jobs    []cronJob `json:"jobs"`
}

func (g *gen) era1Store(jobs []*job) storeFile {
	s := storeFile{Version: 1, Jobs: []cronJob{}}
	for _, j := range jobs {
		s.Jobs = append(s.Jobs, j.inline(true))
	}
	return s
}

func (g *gen) era2Store(jobs []*job) storeFile {
	s := storeFile{Version: 1, Jobs: []cronJob{}}
	for _, j := range jobs {
		s.Jobs = append(s.Jobs, j.definition())
	}
	return s
}

func (g *gen) era2State(jobs []*job) any {
	var m obj
	for _, j := range jobs {
		id, err := j.scheduleIdentity()
		if err != nil {
			panic(err) // a struct of strings and numbers
		}
		m = append(m, kv{j.id, obj{{"updatedAtMs", j.updatedAtMs()}, {"state", j.state}, {"scheduleIdentity", id}}})
	}
	return obj{{"version", 1}, {"jobs", m}}
}

// quarantine is jobs-quarantine.json: one row the loader could not read
// (a cron schedule without its expression).
func (g *gen) quarantine() any {
	r := newRng(g.o.Seed, "cron-quarantine")
	raw := obj{{"id", r.uuid()}, {"agentId", "main"}, {"name", "Quarterly tax reminder"}, {"enabled", true},
		{"createdAtMs", g.nowMs - 61*day}, {"schedule", obj{{"kind", ScheduleCron}, {"tz", "Europe/Berlin"}}},
		{"sessionTarget", "isolated"}, {"wakeMode", "now"},
		{"payload", obj{{"kind", PayloadAgentTurn}, {"message", "Remind me to file the quarterly VAT return."}}}}
	row := obj{{"quarantinedAtMs", g.nowMs - 4*day - 2*hour}, {"sourceIndex", r.intn(len(g.jobs) + 1)},
		{"reason", "invalid schedule: cron expression (expr) is required"}, {"raw", raw}}
	return obj{{"version", 1}, {"jobs", []obj{row}}}
}

// storeKey is the era-3 cron_jobs.store_key: path.resolve of the store.
func (g *gen) storeKey() string { return filepath.Join(g.abs, "cron", "jobs.json") }
