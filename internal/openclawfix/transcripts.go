package openclawfix

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"math/bits"
	"strconv"
	"strings"
)

// entryType is a transcript entry's type (pi SessionManager, version 3),
// plus one OpenClaw has not shipped (a record nlx does not understand).
type entryType string

const (
	entrySession        entryType = "session"
	entryMessage        entryType = "message"
	entryModelChange    entryType = "model_change"
	entryThinkingChange entryType = "thinking_level_change"
	entryCompaction     entryType = "compaction"
	entryBranchSummary  entryType = "branch_summary"
	entryCustom         entryType = "custom"
	entryFuture         entryType = "openclaw.future_entry"
)

// sessKind is the shape of a session's key.
type sessKind int

const (
	skMain          sessKind = iota // agent:<a>:main
	skDirect                        // agent:<a>:telegram:direct:<peer>
	skGroup                         // agent:<a>:telegram:group:<id>
	skTopic                         // agent:<a>:telegram:group:<id>:thread:<t>, transcript <sid>-topic-<t>.jsonl
	skWhatsApp                      // agent:<a>:whatsapp:direct:<e164>
	skDiscord                       // agent:<a>:discord:channel:<id>
	skDiscordThread                 // agent:<a>:discord:channel:<id>:thread:<t>
	skCron                          // agent:<a>:cron:<jobId>
	skHook                          // hook:<uuid>
)

// The key shapes, in the order they recur after each agent's main session.
var (
	mainPattern = []sessKind{skDirect, skGroup, skCron, skDirect, skTopic, skHook, skWhatsApp, skDirect, skCron, skDirect,
		skDiscord, skGroup, skDirect, skCron, skWhatsApp, skDirect, skDiscordThread, skDirect, skCron, skDirect}
	opsPattern = []sessKind{skDiscord, skCron, skDirect, skDiscordThread, skCron, skDiscord, skDirect}
)

var people = []string{"Sam Ortega", "Jordan Kim", "Alex Meyer", "Priya Nair", "Lena Fischer", "Tomás Silva", "Mia Wagner",
	"Chris Okafor", "Noah Becker", "Ana Costa", "Yuki Tanaka", "Ola Nordmann", "Ben Carter", "Sofia Rossi"}

var groups = []string{"Family", "Homelab", "Book club", "Climbing crew", "Flat 3B", "Side project", "Parents WG", "Dev team"}

// session is one session: its index entry and the plan of its transcript.
type session struct {
	agent, key, id string
	kind           sessKind
	file           string // the transcript's name in the sessions dir
	thread         string
	channel, to    string
	chatType       string
	display        string
	target         int64 // transcript bytes wanted
	startMs        int64
	firstUser      string // the first user message, if set
	compact        bool   // compact at least once
	branch         bool   // branch at least once
	future         bool   // write one entry of an unknown type
	snapshot       bool   // carry skillsSnapshot
	report         bool   // carry systemPromptReport
	cronRun        *runEntry

	// as written
	bytes, entries  int64
	compactions     int
	lastMs          int64
	inTok, outTok   int64
	provider, model string
}

func (g *gen) writeSessions() error {
	r := newRng(g.o.Seed, "sessions")
	nMain := g.o.Sessions * 3 / 4
	for _, a := range []struct {
		agent string
		n     int
		pat   []sessKind
	}{{"main", nMain, mainPattern}, {"ops", g.o.Sessions - nMain, opsPattern}} {
		var cronJobs []*job
		for _, j := range g.jobs {
			if j.agent == a.agent && j.def.SessionTarget == "isolated" && j.def.Payload.Kind == PayloadAgentTurn && len(j.runs) > 0 {
				cronJobs = append(cronJobs, j)
			}
		}
		for i := range a.n {
			kind := skMain
			if i > 0 {
				kind = a.pat[(i-1)%len(a.pat)]
			}
			if kind == skCron && len(cronJobs) == 0 {
				kind = skDirect
			}
			s := &session{agent: a.agent, kind: kind, id: r.uuid()}
			peer := strconv.FormatInt(5_120_000_000+int64(i)*10_000+int64(r.intn(10_000)), 10)
			group := "-100" + strconv.FormatInt(2_233_000_000+int64(i)*1000+int64(r.intn(1000)), 10)
			discord := strconv.FormatInt(1_188_201_000_000_000_000+int64(i)*1_000_000+int64(r.intn(1_000_000)), 10)
			person := people[r.intn(len(people))]
			pre := "agent:" + a.agent + ":"
			switch kind {
			case skMain:
				s.key, s.chatType, s.channel, s.to, s.display = pre+"main", "direct", "webchat", "5120938471", "Main"
			case skDirect:
				s.key, s.chatType, s.channel, s.to, s.display = pre+"telegram:direct:"+peer, "direct", "telegram", peer, person
			case skGroup:
				s.key, s.chatType, s.channel, s.to, s.display = pre+"telegram:group:"+group, "group", "telegram", group, pick(r, groups)
			case skTopic:
				s.thread = strconv.Itoa(2 + r.intn(400))
				s.key, s.chatType, s.channel, s.to, s.display = pre+"telegram:group:"+group+":thread:"+s.thread, "group", "telegram", group, pick(r, groups)+" / topic "+s.thread
			case skWhatsApp:
				e164 := "+49151" + peer[len(peer)-8:]
				s.key, s.chatType, s.channel, s.to, s.display = pre+"whatsapp:direct:"+e164, "direct", "whatsapp", e164, person
			case skDiscord:
				s.key, s.chatType, s.channel, s.to, s.display = pre+"discord:channel:"+discord, "channel", "discord", "channel:"+discord, "#"+pick(r, []string{"alerts", "infra", "general", "deploys"})
			case skDiscordThread:
				s.thread = strconv.FormatInt(1_300_000_000_000_000_000+int64(r.intn(1<<40)), 10)
				s.key, s.chatType, s.channel, s.to, s.display = pre+"discord:channel:"+discord+":thread:"+s.thread, "channel", "discord", "channel:"+discord, "#infra thread"
			case skCron:
				j := cronJobs[0]
				cronJobs = cronJobs[1:]
				last := j.runs[len(j.runs)-1]
				s.id, s.cronRun, s.firstUser = last.SessionID, &last, j.def.Payload.Message
				s.key, s.chatType, s.display = pre+"cron:"+j.id, "direct", "Cron: "+j.def.Name
				if j.def.Delivery != nil && j.def.Delivery.Mode == DeliveryAnnounce {
					s.channel, s.to = j.def.Delivery.Channel, j.def.Delivery.To
				}
			case skHook:
				s.key, s.chatType, s.channel, s.display = "hook:"+r.uuid(), "direct", "webhook", "Gmail"
				s.firstUser = "Gmail: new message from " + person + " <" + strings.ToLower(strings.Fields(person)[0]) + "@example.com>. Subject: " + pick(r, []string{"Invoice 2026-11", "Dinner on Saturday?", "Your order has shipped", "Re: project timeline"})
			}
			s.file = s.id + ".jsonl"
			if kind == skTopic {
				s.file = s.id + "-topic-" + s.thread + ".jsonl"
			}
			s.snapshot = kind != skCron && kind != skHook && r.pct(35)
			s.report = kind != skCron && kind != skHook && r.pct(30)
			g.sessions = append(g.sessions, s)
		}
	}
	g.planSizes(r)

	c := newCorpus(g.o.Seed)
	var want, got int64
	for _, s := range g.sessions {
		// Each transcript makes up for what the ones before missed.
		want += s.target
		target := max(want-got, 1)
		if err := g.writeTranscript(s, c, r, target, s.file); err != nil {
			return err
		}
		got += s.bytes
		g.records[KindTranscriptEntries] += s.entries
	}
	if err := g.writeArchives(c, r); err != nil {
		return err
	}
	for _, agent := range []string{"main", "ops"} {
		var ss []*session
		for _, s := range g.sessions {
			if s.agent == agent {
				ss = append(ss, s)
			}
		}
		b, err := g.sessionsJSON(ss)
		if err != nil {
			return err
		}
		var mtime int64
		for _, s := range ss {
			mtime = max(mtime, s.lastMs)
		}
		if err := g.file("agents/"+agent+"/sessions/sessions.json", b, mtime); err != nil {
			return err
		}
		g.records[KindSessions] += int64(len(ss))
	}
	return nil
}

// bucketWeight is 1000·1.5^b: a session's size bucket b has probability
// 2^-(b+1), so that sizes have a long tail.
var bucketWeight = []int64{1000, 1500, 2250, 3375, 5063, 7594, 11391, 17086, 25629, 38443, 57665, 86498, 129746}

// planSizes shares TranscriptBytes out over the sessions, and picks the
// sessions that carry the rarer features.
func (g *gen) planSizes(r *rng) {
	w := make([]int64, len(g.sessions))
	var total int64
	for i, s := range g.sessions {
		b := min(bits.TrailingZeros64(r.u64()|1<<62), len(bucketWeight)-1)
		switch s.kind {
		case skCron, skHook:
			b = min(b, 1)
		case skMain:
			b = min(b+4, len(bucketWeight)-1)
		}
		w[i] = bucketWeight[b] * (500 + int64(r.intn(1000)))
		total += w[i]
		s.compact = r.pct(10)
		s.branch = r.pct(8)
	}
	floor := int64(minTranscriptBytes) * 3 / 4
	budget := g.o.TranscriptBytes - floor*int64(len(g.sessions))
	biggest := map[string]int{}
	for i, s := range g.sessions {
		hi, lo := bits.Mul64(uint64(budget), uint64(w[i]))
		q, _ := bits.Div64(hi, lo, uint64(total))
		s.target = floor + int64(q)
		if s.target < 24<<10 {
			// Too short to have compacted or branched.
			s.compact, s.branch = false, false
		}
		if j, ok := biggest[s.agent]; !ok || s.target > g.sessions[j].target {
			biggest[s.agent] = i
		}
	}
	// The largest transcript of each agent has an entry of an unknown type
	// (a couple in all), and, with the largest of main, compacts and branches.
	for _, i := range biggest {
		g.sessions[i].future, g.sessions[i].compact = true, true
	}
	g.sessions[biggest["main"]].branch = true
	g.sessions[biggest["ops"]].branch = true
}

// ----- the text -----

var wordPool = strings.Fields(`the a of to and in that it is for on with as this was at by be from or have an not are
you they we can will but all one would there their what so up out if about who get which go me when make like time no just
him know take people into year your good some could them see other than then now look only come its over think also back after
use two how our work first well way even new want because any these give day most us gateway agent session cron job schedule
digest backup server deploy config token model prompt memory skill workspace channel telegram message reply summary report
calendar meeting inbox email note task list check status error retry timeout queue worker cluster pod node disk volume snapshot
restore archive branch commit review merge release version build test log metric alert dashboard latency request response
cache index search query result file folder path script command output input update plan draft budget invoice receipt order
shipment weather forecast rain wind morning evening tonight tomorrow weekend monday friday week month quarter goal habit
reminder focus project deadline priority follow-up handover incident outage fix patch upgrade migration database table row
column record field value default option flag setting profile account device phone laptop router network dns certificate
domain price discount subscription renewal payment transfer balance expense category family dinner trip flight hotel train
ticket book article paper podcast video photo album playlist recipe grocery pantry garden plant water light heating energy
battery sensor camera door window kitchen office home city berlin lisbon tokyo street station airport coffee lunch break
quick short long clear simple careful exact rough likely maybe probably definitely already still again soon later early late
fine great small large fast slow quiet busy ready done open closed safe stable fresh stale local remote shared
private public daily hourly weekly monthly nightly`)

// corpus is text to slice entries' strings from: only characters JSON
// does not escape, and \n escapes written as such, so that a slice cut
// at a space is a valid JSON string body.
type corpus struct {
	prose, tool, sig []byte
}

func newCorpus(seed uint64) *corpus {
	r := newRng(seed, "corpus")
	c := &corpus{}
	var b []byte
	for len(b) < 1<<20 {
		n := 6 + r.intn(14)
		for i := range n {
			w := wordPool[r.intn(len(wordPool))]
			if i == 0 {
				b = append(b, w[0]-'a'+'A')
				b = append(b, w[1:]...)
			} else {
				b = append(b, w...)
			}
			if i == n-1 {
				b = append(b, pick(r, []string{".", ".", ".", "?", "!"})...)
			} else if r.pct(7) {
				b = append(b, ',')
			}
			b = append(b, ' ')
		}
		if r.pct(12) {
			b = append(b, `\n\n `...)
		}
	}
	c.prose = b
	b = nil
	files := []string{"notes.md", "todo.md", "index.ts", "config.yaml", "backup.sh", "report.csv", "README.md", "main.go", "values.yaml"}
	for len(b) < 1<<19 {
		switch r.intn(4) {
		case 0:
			b = fmt.Appendf(b, "-rw-r--r--  1 claw staff %6d Nov %2d %02d:%02d %s", r.intn(90000), 1+r.intn(19), r.intn(24), r.intn(60), pick(r, files))
		case 1:
			b = fmt.Appendf(b, "2026-11-%02dT%02d:%02d:%02dZ %s %s %s=%d", 1+r.intn(19), r.intn(24), r.intn(60), r.intn(60),
				pick(r, []string{"INFO", "INFO", "WARN", "ERROR"}), pick(r, wordPool), pick(r, wordPool), r.intn(5000))
		case 2:
			b = fmt.Appendf(b, "src/%s/%s.ts:%d:  const %s = await %s(%s, { %s: %d })", pick(r, wordPool), pick(r, wordPool), 1+r.intn(900),
				pick(r, wordPool), pick(r, wordPool), pick(r, wordPool), pick(r, wordPool), r.intn(100))
		default:
			b = fmt.Appendf(b, "%s %s %s %d%% %s", pick(r, wordPool), pick(r, wordPool), pick(r, wordPool), r.intn(100), pick(r, wordPool))
		}
		b = append(b, `\n`...)
	}
	c.tool = b
	b = make([]byte, 1<<16)
	for i := range b {
		b[i] = b64url[r.intn(62)]
	}
	c.sig = b
	return c
}

// slice is about n bytes of src, from a word's start to a word's end.
func slice(r *rng, src []byte, n int) []byte {
	n = min(max(n, 8), len(src)/2)
	s := r.intn(len(src) - n - 64)
	for src[s] != ' ' {
		s++
	}
	s++
	return cut(src, s, n)
}

// sentences is about n bytes of prose from a sentence's start.
func sentences(r *rng, src []byte, n int) []byte {
	n = min(max(n, 8), len(src)/2)
	s := r.intn(len(src) - n - 1024)
	for s < 2 || src[s-1] != ' ' || (src[s-2] != '.' && src[s-2] != '?' && src[s-2] != '!') {
		s++
	}
	return cut(src, s, n)
}

func cut(src []byte, s, n int) []byte {
	e := s + n
	for e < len(src) && src[e] != ' ' {
		e++
	}
	return src[s:e]
}

// ----- transcripts -----

type modelInfo struct {
	provider, id, api string
	// prices in micro-dollars per 1000 tokens
	in, out, cacheRead, cacheWrite int64
}

var (
	opus  = modelInfo{"anthropic", "claude-opus-4-6", "anthropic-messages", 5000, 25000, 500, 6250}
	gpt   = modelInfo{"openai", "gpt-5.2", "openai-responses", 1750, 14000, 175, 0}
	flash = modelInfo{"anthropic", "claude-sonnet-4-6", "anthropic-messages", 3000, 15000, 300, 3750}
)

var execCommands = []string{"git status --short", "git log --oneline -n 20", "ls -la ~/projects", "df -h", "docker ps --format table",
	"kubectl get pods -A", "uptime", "systemctl status restic-backup.timer", "tail -n 100 /var/log/nginx/error.log",
	"python3 scripts/report.py --week", "gh pr list --author @me", "grep -rn TODO src | head -50", "cat ~/notes/todo.md"}

var readPaths = []string{"~/.openclaw/workspace/memory/2026-11-18.md", "~/notes/meal-plan.md", "~/src/homelab/k8s/values.yaml",
	"~/Documents/invoices/2026-10.csv", "~/.openclaw/workspace/AGENTS.md", "~/src/blog/content/posts/cron-at-home.md"}

var fetchURLs = []string{"https://news.ycombinator.com/", "https://docs.openclaw.ai/automation/cron-jobs",
	"https://github.com/openclaw/openclaw/releases", "https://www.dwd.de/DE/wetter/warnungen/warnkarten/warnkarten_node.html"}

// tx writes one transcript.
type tx struct {
	r    *rng
	c    *corpus
	w    *bufio.Writer
	b    []byte
	s    *session
	m    modelInfo
	size int64
	n    int64 // entries after the header
	now  int64
	ts   int64

	salt, ctr uint32
	leaf      [8]byte
	hasLeaf   bool
	turnEnds  [][8]byte // since the last compaction
	lastUser  [8]byte
	since     int64 // bytes since the last compaction
	compactAt int64
	target    int64
	branched  bool
	future    bool
	err       error
}

// id is the next entry id: 8 hex digits, a bijection of a counter, so
// unique within the transcript.
func (t *tx) id() [8]byte {
	x := t.ctr + t.salt
	t.ctr++
	x ^= x >> 16
	x *= 0x7feb352d
	x ^= x >> 15
	x *= 0x846ca68b
	x ^= x >> 16
	var id [8]byte
	for i := 7; i >= 0; i-- {
		id[i] = hexLow[x&15]
		x >>= 4
	}
	return id
}

// begin starts an entry line after step ms, parented on the leaf (or on
// parent, when given).
func (t *tx) begin(typ entryType, step int64, parent *[8]byte) [8]byte {
	t.ts = min(t.ts+step, t.now-second)
	id := t.id()
	b := append(t.b[:0], `{"type":"`...)
	b = append(b, typ...)
	b = append(b, `","id":"`...)
	b = append(b, id[:]...)
	b = append(b, `","parentId":`...)
	switch {
	case parent != nil:
		b = append(append(append(b, '"'), parent[:]...), '"')
	case t.hasLeaf:
		b = append(append(append(b, '"'), t.leaf[:]...), '"')
	default:
		b = append(b, "null"...)
	}
	b = append(b, `,"timestamp":"`...)
	b = appendISO(b, t.ts)
	t.b = append(b, '"')
	return id
}

// end finishes the line begun and writes it.
func (t *tx) end(id [8]byte) {
	t.b = append(t.b, "}\n"...)
	if t.err == nil {
		_, t.err = t.w.Write(t.b)
	}
	t.size += int64(len(t.b))
	t.since += int64(len(t.b))
	t.n++
	t.leaf, t.hasLeaf = id, true
}

func (t *tx) str(key string, v []byte) {
	t.b = append(t.b, `,"`...)
	t.b = append(t.b, key...)
	t.b = append(t.b, `":"`...)
	t.b = append(t.b, v...)
	t.b = append(t.b, '"')
}

func (t *tx) num(key string, v int64) {
	t.b = append(t.b, `,"`...)
	t.b = append(t.b, key...)
	t.b = append(t.b, `":`...)
	t.b = strconv.AppendInt(t.b, v, 10)
}

// amount is at most n bytes, and at most half of what remains of the
// target (but never below lo).
func (t *tx) amount(lo, n int) int {
	if rem := int((t.target - t.size) / 2); n > rem {
		n = max(rem, lo)
	}
	return n
}

func (t *tx) header() {
	b := append(t.b[:0], `{"type":"session","version":3,"id":"`...)
	b = append(b, t.s.id...)
	b = append(b, `","timestamp":"`...)
	b = appendISO(b, t.ts)
	b = append(b, `","cwd":"`+fakeHome+`/workspace"}`+"\n"...)
	t.b = b
	if t.err == nil {
		_, t.err = t.w.Write(b)
	}
	t.size += int64(len(b))
}

func (t *tx) modelChange() {
	id := t.begin(entryModelChange, t.r.between(50, 900), nil)
	t.str("provider", []byte(t.m.provider))
	t.str("modelId", []byte(t.m.id))
	t.end(id)
	id = t.begin(entryCustom, t.r.between(1, 30), nil)
	t.b = append(t.b, `,"customType":"model-snapshot","data":{"timestamp":`...)
	t.b = strconv.AppendInt(t.b, t.ts, 10)
	t.b = append(t.b, `,"provider":"`+t.m.provider+`","modelApi":"`+t.m.api+`","modelId":"`+t.m.id+`"}`...)
	t.end(id)
}

func (t *tx) thinkingLevel() {
	id := t.begin(entryThinkingChange, t.r.between(50, 900), nil)
	t.str("thinkingLevel", []byte(pick(t.r, []string{"off", "low", "low", "medium", "high"})))
	t.end(id)
}

func (t *tx) user(text []byte, gap int64) {
	id := t.begin(entryMessage, gap, nil)
	t.lastUser = id
	if t.r.pct(50) {
		t.b = append(t.b, `,"message":{"role":"user","content":"`...)
		t.b = append(t.b, text...)
		t.b = append(t.b, '"')
	} else {
		t.b = append(t.b, `,"message":{"role":"user","content":[{"type":"text","text":"`...)
		t.b = append(t.b, text...)
		t.b = append(t.b, `"}]`...)
	}
	t.num("timestamp", t.ts)
	t.b = append(t.b, '}')
	t.end(id)
}

type toolCall struct {
	id, name string
}

// assistant writes an assistant message: thinking, text and tool calls
// as asked; it returns the calls, whose results follow.
func (t *tx) assistant(thinking bool, text int, calls int) []toolCall {
	id := t.begin(entryMessage, t.r.between(1500, 40_000), nil)
	start := len(t.b)
	t.b = append(t.b, `,"message":{"role":"assistant","content":[`...)
	sep := false
	comma := func() {
		if sep {
			t.b = append(t.b, ',')
		}
		sep = true
	}
	if thinking {
		comma()
		t.b = append(t.b, `{"type":"thinking","thinking":"`...)
		t.b = append(t.b, slice(t.r, t.c.prose, t.amount(60, 80+t.r.intn(1400)))...)
		t.b = append(t.b, '"')
		if t.m.provider == "anthropic" {
			n := 344 + t.r.intn(340)
			o := t.r.intn(len(t.c.sig) - n)
			t.str("thinkingSignature", t.c.sig[o:o+n])
		}
		t.b = append(t.b, '}')
	}
	if text > 0 {
		comma()
		t.b = append(t.b, `{"type":"text","text":"`...)
		t.b = append(t.b, sentences(t.r, t.c.prose, t.amount(40, text))...)
		t.b = append(t.b, `"}`...)
	}
	var out []toolCall
	for range calls {
		comma()
		var c toolCall
		if t.m.provider == "anthropic" {
			c.id = "toolu_01" + t.r.str(alnum, 22)
		} else {
			c.id = "call_" + t.r.str(alnum, 24)
		}
		t.b = append(t.b, `{"type":"toolCall","id":"`...)
		t.b = append(t.b, c.id...)
		t.b = append(t.b, `","name":"`...)
		switch p := t.r.intn(100); {
		case p < 40:
			c.name = "exec"
			t.b = append(t.b, `exec","arguments":{"command":"`+pick(t.r, execCommands)+`"}}`...)
		case p < 65:
			c.name = "read"
			t.b = append(t.b, `read","arguments":{"path":"`+pick(t.r, readPaths)+`"}}`...)
		case p < 80:
			c.name = "web_search"
			t.b = append(t.b, `web_search","arguments":{"query":"`...)
			t.b = append(t.b, slice(t.r, t.c.prose, 20+t.r.intn(30))...)
			t.b = append(t.b, `","count":5}}`...)
		case p < 90:
			c.name = "web_fetch"
			t.b = append(t.b, `web_fetch","arguments":{"url":"`+pick(t.r, fetchURLs)+`","extractMode":"markdown"}}`...)
		default:
			c.name = "memory_search"
			t.b = append(t.b, `memory_search","arguments":{"query":"`...)
			t.b = append(t.b, slice(t.r, t.c.prose, 15+t.r.intn(25))...)
			t.b = append(t.b, `","maxResults":6}}`...)
		}
		out = append(out, c)
	}
	stop := "stop"
	if calls > 0 {
		stop = "toolUse"
	}
	t.b = append(t.b, `],"api":"`+t.m.api+`","provider":"`+t.m.provider+`","model":"`+t.m.id+`","usage":{"input":`...)
	outTok := int64(len(t.b)-start)/4 + 20
	ctx := t.since/4 + 9000
	in := 20 + t.r.between(0, 1500)
	cacheRead := ctx
	cacheWrite := int64(0)
	if t.m.cacheWrite > 0 {
		cacheWrite = t.r.between(0, 2000)
	}
	t.s.inTok += in + cacheRead + cacheWrite
	t.s.outTok += outTok
	t.b = strconv.AppendInt(t.b, in, 10)
	t.num("output", outTok)
	t.num("cacheRead", cacheRead)
	t.num("cacheWrite", cacheWrite)
	t.num("totalTokens", in+outTok+cacheRead+cacheWrite)
	ci, co, cr, cw := in*t.m.in/1000, outTok*t.m.out/1000, cacheRead*t.m.cacheRead/1000, cacheWrite*t.m.cacheWrite/1000
	t.b = append(t.b, `,"cost":{"input":`...)
	t.b = appendDollars(t.b, ci)
	t.b = append(t.b, `,"output":`...)
	t.b = appendDollars(t.b, co)
	t.b = append(t.b, `,"cacheRead":`...)
	t.b = appendDollars(t.b, cr)
	t.b = append(t.b, `,"cacheWrite":`...)
	t.b = appendDollars(t.b, cw)
	t.b = append(t.b, `,"total":`...)
	t.b = appendDollars(t.b, ci+co+cr+cw)
	t.b = append(t.b, `}},"stopReason":"`...)
	t.b = append(t.b, stop...)
	t.b = append(t.b, '"')
	t.num("timestamp", t.ts)
	t.b = append(t.b, '}')
	t.end(id)
	return out
}

func (t *tx) toolResult(c toolCall) {
	id := t.begin(entryMessage, t.r.between(30, 9000), nil)
	t.b = append(t.b, `,"message":{"role":"toolResult","toolCallId":"`...)
	t.b = append(t.b, c.id...)
	t.b = append(t.b, `","toolName":"`...)
	t.b = append(t.b, c.name...)
	t.b = append(t.b, `","content":[{"type":"text","text":"`...)
	isErr := t.r.pct(4)
	n := 150 + t.r.intn(3000)
	if t.r.pct(4) {
		n = 20_000 + t.r.intn(40_000)
	}
	switch {
	case isErr:
		t.b = append(t.b, `Command exited with code 1\n\n`...)
		t.b = append(t.b, slice(t.r, t.c.tool, t.amount(40, 200))...)
	case c.name == "exec" || c.name == "read":
		t.b = append(t.b, slice(t.r, t.c.tool, t.amount(100, n))...)
	default:
		t.b = append(t.b, slice(t.r, t.c.prose, t.amount(100, n))...)
	}
	t.b = append(t.b, `"}]`...)
	if c.name == "exec" {
		code := int64(0)
		if isErr {
			code = 1
		}
		t.b = append(t.b, `,"details":{"exitCode":`...)
		t.b = strconv.AppendInt(t.b, code, 10)
		t.num("durationMs", t.r.between(4, 20_000))
		t.b = append(t.b, '}')
	}
	if isErr {
		t.b = append(t.b, `,"isError":true`...)
	} else {
		t.b = append(t.b, `,"isError":false`...)
	}
	t.num("timestamp", t.ts)
	t.b = append(t.b, '}')
	t.end(id)
}

// turn is one exchange: the user's message, up to three rounds of tool
// calls (each result right after its call), and the final answer.
func (t *tx) turn(first []byte) {
	text := first
	if text == nil {
		n := 20 + t.r.intn(380)
		if t.r.pct(8) {
			n = 1000 + t.r.intn(3000)
		}
		text = sentences(t.r, t.c.prose, t.amount(20, n))
	}
	gap := t.r.between(20_000, 12*minute)
	if t.n < 4 {
		gap = t.r.between(100, 2000)
	}
	t.user(text, gap)
	rounds := []int{0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3}[t.r.intn(20)]
	thinking := t.r.pct(50)
	switch rem := t.target - t.size; {
	case rem <= 0:
		// Past the target (a feature still to write): a short turn.
		rounds, thinking = 0, false
	case rem < 6000:
		rounds = min(rounds, 1)
	}
	for range rounds {
		lead := 0
		if t.r.pct(40) {
			lead = 40 + t.r.intn(260)
		}
		calls := 1
		if t.r.pct(30) && t.target-t.size > 6000 {
			calls = 2 + t.r.intn(2)
		}
		for _, c := range t.assistant(t.r.pct(60), lead, calls) {
			t.toolResult(c)
		}
	}
	t.assistant(thinking, 100+t.r.intn(2400), 0)
	t.turnEnds = append(t.turnEnds, t.leaf)
}

func (t *tx) compaction() {
	id := t.begin(entryCompaction, t.r.between(2000, 30_000), nil)
	t.b = append(t.b, `,"summary":"## Goal\n`...)
	t.b = append(t.b, sentences(t.r, t.c.prose, t.amount(200, 600+t.r.intn(2400)))...)
	t.b = append(t.b, '"')
	t.str("firstKeptEntryId", t.lastUser[:])
	t.num("tokensBefore", t.since/4+9000)
	t.end(id)
	t.s.compactions++
	t.since = 0
	// Branches start after the compaction, or at it.
	t.turnEnds = append(t.turnEnds[:0], id)
}

// branchBack moves the leaf back a turn, leaving a summary of the branch
// abandoned.
func (t *tx) branchBack() {
	point := t.turnEnds[len(t.turnEnds)-2]
	from := t.leaf
	id := t.begin(entryBranchSummary, t.r.between(5000, 60_000), &point)
	t.str("fromId", from[:])
	t.b = append(t.b, `,"summary":"The abandoned branch `...)
	t.b = append(t.b, slice(t.r, t.c.prose, t.amount(100, 200+t.r.intn(800)))...)
	t.b = append(t.b, '"')
	t.end(id)
	t.turnEnds = t.turnEnds[:len(t.turnEnds)-1]
	t.branched = true
}

func (t *tx) futureEntry() {
	id := t.begin(entryFuture, t.r.between(100, 5000), nil)
	t.b = append(t.b, `,"data":{"schema":2,"note":"`...)
	t.b = append(t.b, slice(t.r, t.c.prose, 40+t.r.intn(80))...)
	t.b = append(t.b, `"}`...)
	t.end(id)
	t.future = true
}

// appendDollars writes micro-dollars as a JavaScript number of dollars.
func appendDollars(b []byte, micro int64) []byte {
	b = strconv.AppendInt(b, micro/1_000_000, 10)
	frac := micro % 1_000_000
	if frac == 0 {
		return b
	}
	var d [6]byte
	for i := 5; i >= 0; i-- {
		d[i] = byte('0' + frac%10)
		frac /= 10
	}
	n := 6
	for d[n-1] == '0' {
		n--
	}
	return append(append(b, '.'), d[:n]...)
}

// writeTranscript writes s's transcript, named name in its agent's
// sessions dir, of about target bytes.
func (g *gen) writeTranscript(s *session, c *corpus, r *rng, target int64, name string) error {
	rel := "agents/" + s.agent + "/sessions/" + name
	f, err := g.create(rel)
	if err != nil {
		return err
	}
	if g.bw == nil {
		g.bw = bufio.NewWriterSize(f, 256<<10)
	}
	g.bw.Reset(f)
	t := &tx{r: r, c: c, w: g.bw, s: s, now: g.nowMs, target: target,
		salt: uint32(r.u64()), compactAt: r.between(150_000, 400_000)}
	t.m = opus
	switch {
	case s.cronRun != nil:
		// The model the run log names.
		for _, m := range []modelInfo{opus, gpt, flash} {
			if m.id == s.cronRun.Model {
				t.m = m
			}
		}
	case s.agent == "ops":
		t.m = gpt
	case r.pct(15):
		t.m = flash
	}
	// Start so that the transcript ends about when it should: a turn is
	// about 9.5 kB and 7 minutes.
	turns := target/9500 + 1
	switch {
	case s.cronRun != nil:
		t.ts = s.cronRun.RunAtMs
	case s.startMs != 0:
		t.ts = s.startMs
	default:
		age := r.between(0, 30*day)
		switch {
		case s.kind == skMain:
			age = r.between(minute, 2*hour)
		case r.pct(30):
			age = r.between(minute, day)
		}
		t.ts = g.nowMs - age - turns*7*minute
	}
	s.startMs = t.ts
	t.header()
	t.modelChange()
	if r.pct(70) {
		t.thinkingLevel()
	}
	var first []byte
	if s.firstUser != "" {
		q, err := compactJSON(s.firstUser)
		if err != nil {
			return err
		}
		first = q[1 : len(q)-1]
	}
	for turn := 0; turn == 0 || t.size < target; turn++ {
		switch {
		case len(t.turnEnds) >= 2 && (t.since >= t.compactAt || s.compact && s.compactions == 0 && t.size >= target/2):
			t.compaction()
		case len(t.turnEnds) >= 2 && (s.branch && !t.branched && t.size >= target*3/5 || r.intn(200) == 0):
			t.branchBack()
		case s.future && !t.future && t.size >= target/3:
			t.futureEntry()
		case turn > 2 && r.intn(60) == 0:
			if t.m == opus {
				t.m = flash
			} else {
				t.m = opus
			}
			if s.agent == "ops" {
				t.m = gpt
			}
			t.modelChange()
		case turn > 2 && r.intn(80) == 0:
			t.thinkingLevel()
		}
		t.turn(first)
		first = nil
	}
	if s.future && !t.future {
		t.futureEntry()
	}
	if s.compact && s.compactions == 0 {
		t.compaction()
	}
	if s.branch && !t.branched {
		for len(t.turnEnds) < 2 {
			t.turn(nil)
		}
		t.branchBack()
		t.turn(nil)
	}
	if t.err == nil {
		t.err = t.w.Flush()
	}
	if cerr := f.Close(); t.err == nil {
		t.err = cerr
	}
	if t.err != nil {
		return fmt.Errorf("%s: %w", rel, t.err)
	}
	s.bytes, s.entries, s.lastMs = t.size, t.n, t.ts
	s.provider, s.model = t.m.provider, t.m.id
	return g.done(rel, t.ts)
}

// writeArchives writes the transcripts of reset and deleted sessions,
// and main's sessions.json.bak.1 (the index as it was before the resets).
func (g *gen) writeArchives(c *corpus, r *rng) error {
	var mainS, opsS []*session
	for _, s := range g.sessions {
		if s.agent == "main" {
			mainS = append(mainS, s)
		} else {
			opsS = append(opsS, s)
		}
	}
	type archive struct {
		of     *session // the session whose key it was, nil if deleted
		agent  string
		suffix string
	}
	archives := []archive{{mainS[0], "main", "reset"}, {mainS[1], "main", "reset"}, {opsS[0], "ops", "reset"}, {nil, "main", "deleted"}, {nil, "main", "deleted"}}
	old := map[*session]*session{}
	for _, a := range archives {
		s := &session{agent: a.agent, id: r.uuid(), kind: skDirect, startMs: g.nowMs - 30*day - r.between(0, 9*day)}
		if a.of != nil {
			// The session the key had before it was reset.
			*s = *a.of
			s.id, s.cronRun, s.firstUser, s.compact, s.branch, s.future = r.uuid(), nil, "", false, false, false
			s.bytes, s.entries, s.inTok, s.outTok, s.compactions = 0, 0, 0, 0, 0
			s.startMs = a.of.startMs - 2*day - r.between(0, day)
		}
		name := s.id + ".jsonl"
		if err := g.writeTranscript(s, c, r, 2500+r.between(0, 5000), name); err != nil {
			return err
		}
		at := s.lastMs + r.between(hour, 3*day) // deleted
		if a.of != nil {
			at = a.of.startMs - r.between(second, minute) // reset, just before the new session
		}
		archived := "agents/" + a.agent + "/sessions/" + name + "." + a.suffix + "." + fileStamp(at)
		if err := g.rename("agents/"+a.agent+"/sessions/"+name, archived); err != nil {
			return err
		}
		if a.of != nil {
			old[a.of] = s
		}
	}
	var bak []*session
	for _, s := range mainS[:min(8, len(mainS))] {
		e := *s
		if o, ok := old[s]; ok {
			e = *o
		}
		e.snapshot, e.report = false, false
		e.lastMs -= 2 * day
		bak = append(bak, &e)
	}
	b, err := g.sessionsJSON(bak)
	if err != nil {
		return err
	}
	return g.file("agents/main/sessions/sessions.json.bak.1", b, g.nowMs-2*day)
}

// rename moves a written file.
func (g *gen) rename(from, to string) error {
	if err := renameFile(g.dir, from, to); err != nil {
		return err
	}
	g.sizes[to] = g.sizes[from]
	delete(g.sizes, from)
	return nil
}

// ----- sessions.json -----

type sessionOrigin struct {
	Label     string `json:"label,omitempty"`
	Provider  string `json:"provider"`
	Surface   string `json:"surface,omitempty"`
	ChatType  string `json:"chatType"`
	From      string `json:"from,omitempty"`
	To        string `json:"to,omitempty"`
	AccountID string `json:"accountId,omitempty"`
	ThreadID  string `json:"threadId,omitempty"`
}

type deliveryContext struct {
	Channel   string `json:"channel"`
	To        string `json:"to"`
	AccountID string `json:"accountId,omitempty"`
	ThreadID  string `json:"threadId,omitempty"`
}

type sessionEntry struct {
	SessionID       string           `json:"sessionId"`
	UpdatedAt       int64            `json:"updatedAt"`
	SessionFile     string           `json:"sessionFile,omitempty"`
	SystemSent      bool             `json:"systemSent,omitempty"`
	AbortedLastRun  bool             `json:"abortedLastRun"`
	ChatType        string           `json:"chatType,omitempty"`
	Channel         string           `json:"channel,omitempty"`
	DisplayName     string           `json:"displayName,omitempty"`
	Origin          *sessionOrigin   `json:"origin,omitempty"`
	DeliveryContext *deliveryContext `json:"deliveryContext,omitempty"`
	LastChannel     string           `json:"lastChannel,omitempty"`
	LastTo          string           `json:"lastTo,omitempty"`
	LastAccountID   string           `json:"lastAccountId,omitempty"`
	LastThreadID    string           `json:"lastThreadId,omitempty"`
	ModelProvider   string           `json:"modelProvider,omitempty"`
	Model           string           `json:"model,omitempty"`
	InputTokens     int64            `json:"inputTokens,omitempty"`
	OutputTokens    int64            `json:"outputTokens,omitempty"`
	TotalTokens     int64            `json:"totalTokens,omitempty"`
	ContextTokens   int64            `json:"contextTokens,omitempty"`
	CompactionCount int              `json:"compactionCount"`
	// and skillsSnapshot and systemPromptReport, spliced in by sessionsJSON
}

func (g *gen) entry(s *session) sessionEntry {
	e := sessionEntry{SessionID: s.id, UpdatedAt: s.lastMs, SystemSent: true, ChatType: s.chatType, Channel: s.channel,
		DisplayName: s.display, ModelProvider: s.provider, Model: s.model, InputTokens: s.inTok, OutputTokens: s.outTok,
		TotalTokens: s.inTok + s.outTok, ContextTokens: 200000, CompactionCount: s.compactions}
	if s.kind == skTopic {
		e.SessionFile = s.file
	}
	if s.to != "" {
		provider := s.channel
		from := provider + ":" + strings.TrimPrefix(s.to, "channel:")
		e.Origin = &sessionOrigin{Label: s.display, Provider: provider, Surface: provider, ChatType: s.chatType, From: from, To: from, ThreadID: s.thread}
		e.DeliveryContext = &deliveryContext{Channel: s.channel, To: s.to, AccountID: "default", ThreadID: s.thread}
		e.LastChannel, e.LastTo, e.LastAccountID, e.LastThreadID = s.channel, s.to, "default", s.thread
		if s.kind == skMain {
			e.Origin.Provider, e.Origin.Surface, e.Origin.From, e.Origin.To = "webchat", "webchat", "webchat:operator", "webchat:operator"
			e.DeliveryContext.Channel, e.LastChannel = "telegram", "telegram"
		}
	}
	if s.kind == skHook {
		e.Origin = &sessionOrigin{Label: "Gmail", Provider: "webhook", ChatType: "direct"}
	}
	return e
}

// sessionsJSON is a sessions.json of ss, in their order, as
// JSON.stringify(store, null, 2) writes it.
func (g *gen) sessionsJSON(ss []*session) ([]byte, error) {
	snapshot, report, err := g.promptBlobs()
	if err != nil {
		return nil, err
	}
	// The blobs, indented as values of an entry's fields.
	var snap, rep bytes.Buffer
	if err := json.Indent(&snap, snapshot, "    ", "  "); err != nil {
		return nil, err
	}
	if err := json.Indent(&rep, report, "    ", "  "); err != nil {
		return nil, err
	}
	var b bytes.Buffer
	b.WriteString("{")
	for i, s := range ss {
		if i > 0 {
			b.WriteString(",")
		}
		k, err := compactJSON(s.key)
		if err != nil {
			return nil, err
		}
		var e bytes.Buffer
		enc := json.NewEncoder(&e)
		enc.SetEscapeHTML(false)
		enc.SetIndent("  ", "  ")
		if err := enc.Encode(g.entry(s)); err != nil {
			return nil, err
		}
		b.WriteString("\n  ")
		b.Write(k)
		b.WriteString(": ")
		b.Write(bytes.TrimSuffix(e.Bytes(), []byte("\n  }\n")))
		if s.snapshot {
			b.WriteString(",\n    \"skillsSnapshot\": ")
			b.Write(snap.Bytes())
		}
		if s.report {
			b.WriteString(",\n    \"systemPromptReport\": ")
			b.Write(rep.Bytes())
		}
		b.WriteString("\n  }")
	}
	b.WriteString("\n}\n")
	return b.Bytes(), nil
}

var bundledSkills = []string{"1password", "apple-notes", "bear-notes", "blogwatcher", "camsnap", "clawhub", "coding-agent", "discord",
	"gemini", "github", "gog", "goplaces", "healthcheck", "himalaya", "mcporter", "model-usage", "nano-pdf", "notion", "obsidian",
	"openai-image-gen", "openai-whisper", "oracle", "peekaboo", "session-logs", "skill-creator", "slack", "songsee", "spotify-player",
	"summarize", "tmux", "trello", "video-frames", "voice-call", "weather"}

// promptBlobs are the large skillsSnapshot and systemPromptReport values
// (the same on every session that carries them).
func (g *gen) promptBlobs() (json.RawMessage, json.RawMessage, error) {
	r := newRng(g.o.Seed, "prompt")
	c := newCorpusSmall(r)
	var prompt strings.Builder
	prompt.WriteString("<available_skills>\n")
	var resolved, skills, entries []obj
	for _, name := range bundledSkills {
		desc := string(slice(r, c, 90+r.intn(120)))
		fmt.Fprintf(&prompt, "  <skill>\n    <name>%s</name>\n    <description>%s</description>\n    <location>/usr/lib/node_modules/openclaw/skills/%s/SKILL.md</location>\n  </skill>\n", name, desc, name)
		skills = append(skills, obj{{"name", name}})
		resolved = append(resolved, obj{{"name", name}, {"description", desc}, {"filePath", "/usr/lib/node_modules/openclaw/skills/" + name + "/SKILL.md"},
			{"baseDir", "/usr/lib/node_modules/openclaw/skills/" + name}, {"source", "openclaw-bundled"}, {"disableModelInvocation", false}})
		entries = append(entries, obj{{"name", name}, {"blockChars", 180 + r.intn(200)}})
	}
	prompt.WriteString("</available_skills>")
	snap, err := compactJSON(obj{{"prompt", prompt.String()}, {"skills", skills}, {"resolvedSkills", resolved}, {"version", 3}})
	if err != nil {
		return nil, nil, err
	}
	var tools []obj
	for _, name := range []string{"read", "write", "edit", "exec", "process", "web_search", "web_fetch", "browser", "canvas", "nodes", "cron", "message", "gateway", "sessions_list", "sessions_send", "memory_search", "memory_get", "image"} {
		tools = append(tools, obj{{"name", name}, {"summaryChars", 40 + r.intn(200)}, {"schemaChars", 200 + r.intn(3000)}, {"propertiesCount", 1 + r.intn(12)}})
	}
	var files []obj
	for _, name := range []string{"AGENTS.md", "SOUL.md", "TOOLS.md", "IDENTITY.md", "USER.md", "HEARTBEAT.md", "BOOTSTRAP.md", "MEMORY.md"} {
		n := 300 + r.intn(6000)
		files = append(files, obj{{"name", name}, {"path", fakeHome + "/workspace/" + name}, {"rawChars", n}, {"injectedChars", n}, {"truncated", false}})
	}
	rep, err := compactJSON(obj{{"source", "run"}, {"generatedAt", g.nowMs - 3*day}, {"workspaceDir", fakeHome + "/workspace"},
		{"bootstrapMaxChars", 20000}, {"systemPrompt", obj{{"chars", 31000 + r.intn(9000)}, {"projectContextChars", 9000 + r.intn(4000)}, {"nonProjectContextChars", 21000 + r.intn(5000)}}},
		{"injectedWorkspaceFiles", files}, {"skills", obj{{"promptChars", prompt.Len()}, {"entries", entries}}},
		{"tools", obj{{"listChars", 2000 + r.intn(800)}, {"schemaChars", 24000 + r.intn(9000)}, {"entries", tools}}}})
	if err != nil {
		return nil, nil, err
	}
	return snap, rep, nil
}

// newCorpusSmall is a little prose for descriptions.
func newCorpusSmall(r *rng) []byte {
	var b []byte
	for len(b) < 16<<10 {
		b = append(b, wordPool[r.intn(len(wordPool))]...)
		b = append(b, ' ')
	}
	return b
}
