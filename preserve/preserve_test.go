package preserve

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nlx-dev/nlx/internal/openclawfix"
	"github.com/nlx-dev/nlx/internal/reason"
	"github.com/nlx-dev/nlx/schema"
)

// small are the options of the tests' installations: every kind of
// record, in little volume.
func small(era int) openclawfix.Options {
	return openclawfix.Options{Era: era, Jobs: 70, Sessions: 40, TranscriptBytes: 512 << 10}
}

func install(t testing.TB, o openclawfix.Options) (string, *openclawfix.Truth) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "openclaw")
	truth, err := openclawfix.Write(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	return dir, truth
}

// tree is every file's bytes and mode, to prove a tree unchanged.
func tree(t testing.TB, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if d.IsDir() {
			out[rel] = fmt.Sprintf("dir %v", fi.Mode())
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		out[rel] = fmt.Sprintf("%v %x %v", fi.Mode(), sha256.Sum256(data), fi.ModTime().UnixNano())
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func sameTree(t testing.TB, before, after map[string]string) {
	t.Helper()
	for k, v := range before {
		if after[k] != v {
			t.Errorf("%s changed: %s -> %s", k, v, after[k])
		}
	}
	for k := range after {
		if _, ok := before[k]; !ok {
			t.Errorf("%s appeared", k)
		}
	}
}

// TestInventory: each era's counts are the generator's (an independent
// count of what it wrote), the source is not touched, and the counts and
// hashes are the same on a second run and on a copy elsewhere.
func TestInventory(t *testing.T) {
	for _, era := range []int{1, 2, 3} {
		t.Run(fmt.Sprintf("era%d", era), func(t *testing.T) {
			dir, truth := install(t, small(era))
			before := tree(t, dir)
			inv, err := Take(context.Background(), dir)
			if err != nil {
				t.Fatal(err)
			}
			sameTree(t, before, tree(t, dir))
			if int(inv.Era) != era {
				t.Errorf("era %d, want %d", inv.Era, era)
			}
			for _, k := range Kinds {
				if inv.Counts[k] != truth.Counts[string(k)] {
					t.Errorf("%s: %d records, the generator wrote %d", k, inv.Counts[k], truth.Counts[string(k)])
				}
			}
			again, err := Take(context.Background(), dir)
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range Kinds {
				if again.Hashes[k] != inv.Hashes[k] {
					t.Errorf("%s: hash %s, then %s", k, inv.Hashes[k], again.Hashes[k])
				}
			}
			if era != 3 { // era 3's store keys name the absolute path
				other, _ := install(t, small(era))
				elsewhere, err := Take(context.Background(), other)
				if err != nil {
					t.Fatal(err)
				}
				for _, k := range []Kind{KindJobs, KindRuns, KindSessions, KindTranscriptEntries, KindSkills} {
					if elsewhere.Hashes[k] != inv.Hashes[k] {
						t.Errorf("%s: hash %s here, %s in another directory", k, inv.Hashes[k], elsewhere.Hashes[k])
					}
				}
			}
			if len(inv.Secrets) == 0 {
				t.Error("no secret found")
			}
			out, err := indented(inv)
			if err != nil {
				t.Fatal(err)
			}
			noSecrets(t, "the inventory", out, truth.Secrets)
		})
	}
}

func noSecrets(t testing.TB, where string, data []byte, secrets []string) {
	t.Helper()
	for _, s := range secrets {
		if bytes.Contains(data, []byte(s)) {
			t.Errorf("%s holds the secret %.8s…", where, s)
		}
	}
}

func scanSecrets(t testing.TB, dir string, secrets []string) {
	t.Helper()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		noSecrets(t, p, data, secrets)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestEra4Refused(t *testing.T) {
	dir, _ := install(t, small(4))
	_, err := Take(context.Background(), dir)
	var re *reason.Error
	if !errors.As(err, &re) || re.Code != reason.SourceEraUnsupported || !strings.Contains(err.Error(), "openclaw-agent.sqlite") {
		t.Fatalf("inventory of era 4: %v, want source_era_unsupported naming what was found", err)
	}
}

// TestExportRoundTrip: an export of each era verifies, holds no secret,
// counts and hashes as the inventory of the source, and projects every
// job: the interrupted one as running, completed one-shots as completed,
// enabled flags as they were.
func TestExportRoundTrip(t *testing.T) {
	for _, era := range []int{1, 2, 3} {
		t.Run(fmt.Sprintf("era%d", era), func(t *testing.T) {
			dir, truth := install(t, small(era))
			before := tree(t, dir)
			out := filepath.Join(t.TempDir(), "export")
			m, err := Write(context.Background(), dir, out, ExportOptions{LockDir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			sameTree(t, before, tree(t, dir))
			inv, err := Take(context.Background(), dir)
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range Kinds {
				if m.Counts[k] != inv.Counts[k] || m.Hashes[k] != inv.Hashes[k] {
					t.Errorf("%s: export %d %s, source %d %s", k, m.Counts[k], m.Hashes[k], inv.Counts[k], inv.Hashes[k])
				}
			}
			e, err := Verify(context.Background(), out)
			if err != nil {
				t.Fatal(err)
			}
			scanSecrets(t, out, truth.Secrets)
			byID := map[string]ProjectedJob{}
			for _, j := range e.Projections.Jobs {
				byID[j.SourceID] = j
				if !schemaName(j.Name) {
					t.Errorf("job %s: name %q is no nlx name", j.SourceID, j.Name)
				}
			}
			if len(byID) != len(truth.Jobs) {
				t.Fatalf("%d jobs projected, %d written", len(byID), len(truth.Jobs))
			}
			for _, tj := range truth.Jobs {
				j := byID[tj.ID]
				if j.Enabled != tj.Enabled {
					t.Errorf("job %s: enabled %v, was %v", tj.ID, j.Enabled, tj.Enabled)
				}
				if tj.PayloadKind == "agentTurn" && tj.Kind != "on-exit" && j.Prompt != tj.Message {
					t.Errorf("job %s: prompt %q, was %q", tj.ID, j.Prompt, tj.Message)
				}
				if (tj.ID == truth.Running) != (j.Running != "") {
					t.Errorf("job %s: running %q (the interrupted one is %s)", tj.ID, j.Running, truth.Running)
				}
				switch tj.Kind {
				case "cron":
					if j.Schedule.Cron != tj.Expr || j.Schedule.Timezone != tj.TZ {
						t.Errorf("job %s: cron %q %q, was %q %q", tj.ID, j.Schedule.Cron, j.Schedule.Timezone, tj.Expr, tj.TZ)
					}
				case "every":
					if d, err := time.ParseDuration(j.Schedule.Every); err != nil || d.Milliseconds() != tj.EveryMs {
						t.Errorf("job %s: every %q, was %dms", tj.ID, j.Schedule.Every, tj.EveryMs)
					}
				case "at":
					want, _ := time.Parse(time.RFC3339Nano, tj.At)
					if got, err := time.Parse(time.RFC3339, j.Schedule.At); err != nil || !got.Equal(want.Truncate(time.Second)) {
						t.Errorf("job %s: at %q, was %q", tj.ID, j.Schedule.At, tj.At)
					}
				default:
					if len(j.Unsupported) == 0 {
						t.Errorf("job %s of schedule kind %s is not marked unsupported", tj.ID, tj.Kind)
					}
				}
			}
			for _, id := range truth.CompletedOneShots {
				if byID[id].Completed == "" {
					t.Errorf("completed one-shot %s not projected as completed", id)
				}
			}
			for _, id := range truth.PendingOneShots {
				if byID[id].Completed != "" {
					t.Errorf("pending one-shot %s projected as completed", id)
				}
			}
			if len(e.Projections.Conversations) != int(truth.Counts[string(KindSessions)]) {
				t.Errorf("%d conversations, %d sessions", len(e.Projections.Conversations), truth.Counts[string(KindSessions)])
			}
			for _, c := range e.Projections.Connections {
				if len(c.References) == 0 {
					t.Errorf("connection %s/%s has no reference", c.Agent, c.Profile)
				}
				for _, r := range c.References {
					if !strings.HasPrefix(r, "file:") && !strings.HasPrefix(r, "env:") {
						t.Errorf("connection %s/%s: reference %q", c.Agent, c.Profile, r)
					}
				}
			}
		})
	}
}

func schemaName(s string) bool {
	if len(s) == 0 || len(s) > 63 || s[0] < 'a' || s[0] > 'z' {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
			return false
		}
	}
	return true
}

// TestExportDetectsChange: a file changed after it was copied fails the
// export, and nothing is left in its place.
func TestExportDetectsChange(t *testing.T) {
	dir, _ := install(t, small(2))
	out := filepath.Join(t.TempDir(), "export")
	raw, seen := filepath.Join(t.TempDir(), "raw"), map[string]fileStat{}
	if err := os.Mkdir(raw, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := scanTree(context.Background(), dir, dir, Era2, t.TempDir(), nil, raw, seen); err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(dir, "cron", "jobs.json")
	data, _ := os.ReadFile(f)
	if err := os.WriteFile(f, append(data, ' '), 0o600); err != nil {
		t.Fatal(err)
	}
	err := unchanged(dir, seen)
	var re *reason.Error
	if !errors.As(err, &re) || re.Code != reason.SourceChanged || !strings.Contains(err.Error(), "cron/jobs.json changed") {
		t.Fatalf("unchanged: %v, want source_changed naming cron/jobs.json", err)
	}
	if _, err := os.Stat(out); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("export directory left: %v", err)
	}
}

// TestVerifyDetectsTampering: one byte of one record changed in an
// export fails its verification, naming the record.
func TestVerifyDetectsTampering(t *testing.T) {
	dir, _ := install(t, small(1))
	out := filepath.Join(t.TempDir(), "export")
	if _, err := Write(context.Background(), dir, out, ExportOptions{LockDir: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	runs, _ := filepath.Glob(filepath.Join(out, "raw", "cron", "runs", "*.jsonl"))
	var target string
	for _, r := range runs {
		if fi, _ := os.Stat(r); fi.Size() > 0 {
			target = r
			break
		}
	}
	data, _ := os.ReadFile(target)
	data[10] ^= 1
	if err := os.WriteFile(target, data, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Verify(context.Background(), out)
	var re *reason.Error
	if !errors.As(err, &re) || re.Code != reason.ExportCorrupt || !strings.Contains(err.Error(), "runs") {
		t.Fatalf("verify: %v, want export_corrupt naming the runs", err)
	}
}

// TestGate: a gateway lock held by a live process refuses the export,
// one of a gone process does not; --drain waits for the holder to go.
func TestGate(t *testing.T) {
	dir, _ := install(t, small(2))
	locks := t.TempDir()
	sleeper := startSleeper(t)
	lock := filepath.Join(locks, "gateway.abcdef12.lock")
	payload := fmt.Sprintf(`{"pid":%d,"createdAt":"2026-11-20T12:00:00Z","configPath":%q}`, sleeper.Process.Pid, filepath.Join(dir, "openclaw.json"))
	if err := os.WriteFile(lock, []byte(payload), 0o600); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "export")
	_, err := Write(context.Background(), dir, out, ExportOptions{LockDir: locks})
	var re *reason.Error
	if !errors.As(err, &re) || re.Code != reason.SourceBusy {
		t.Fatalf("export while the gateway runs: %v, want source_busy", err)
	}
	if _, err := os.Stat(out); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("export directory left: %v", err)
	}
	go func() {
		time.Sleep(500 * time.Millisecond)
		sleeper.Process.Kill()
		sleeper.Wait()
	}()
	var lines []string
	start := time.Now()
	if _, err := Write(context.Background(), dir, out, ExportOptions{LockDir: locks, Drain: true, Timeout: 30 * time.Second,
		Progress: func(s string) { lines = append(lines, s) }}); err != nil {
		t.Fatal(err)
	}
	if time.Since(start) < 400*time.Millisecond || !strings.Contains(strings.Join(lines, "\n"), "waiting for OpenClaw") {
		t.Errorf("--drain did not wait: %v %q", time.Since(start), lines)
	}
	// An unrelated installation's gateway is not this one's.
	other := startSleeper(t)
	payload = fmt.Sprintf(`{"pid":%d,"createdAt":"2026-11-20T12:00:00Z","configPath":"/home/else/.openclaw/openclaw.json"}`, other.Process.Pid)
	if err := os.WriteFile(lock, []byte(payload), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Gate(context.Background(), dir, locks, false, 0, nil); err != nil {
		t.Errorf("another installation's gateway refused this one: %v", err)
	}
}

// TestImportPlacesRecords: the import of an export places each agent's
// jobs and conversations per the preservation, a reset workspace gets no
// conversations, and a tz-less cron job is unsupported without the
// preservation's timezone.
func TestImportPlacesRecords(t *testing.T) {
	dir, _ := install(t, small(2))
	out := filepath.Join(t.TempDir(), "export")
	if _, err := Write(context.Background(), dir, out, ExportOptions{LockDir: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	e, err := ReadExport(out)
	if err != nil {
		t.Fatal(err)
	}
	p := &schema.Preservation{Source: schema.Source{Kind: "openclaw", Path: dir}, Workspace: "team", Connection: "team-codex",
		Agents:    map[string]schema.AgentTarget{"ops": {Workspace: "ops", Connection: "ops-codex"}},
		ChatReset: map[string]string{"team": "preserve", "ops": "reset"}}
	im := e.Import("oc", p)
	for _, c := range im.Conversations {
		if c.Workspace != "team" {
			t.Errorf("conversation %s went to %s: ops was reset", c.SessionKey, c.Workspace)
		}
	}
	if len(im.Conversations) == 0 {
		t.Error("no conversation kept for team")
	}
	tzless := 0
	for _, j := range im.Jobs {
		want := "team-codex"
		if j.Spec.Workspace == "ops" {
			want = "ops-codex"
		}
		if j.Spec.Connection != want {
			t.Errorf("job %s: connection %s in workspace %s", j.Name, j.Spec.Connection, j.Spec.Workspace)
		}
		for _, u := range j.Unsupported {
			if strings.Contains(u, "time zone") {
				tzless++
			}
		}
	}
	if tzless == 0 {
		t.Error("no tz-less cron job marked unsupported without a timezone")
	}
	p.Timezone = "Europe/Berlin"
	for _, j := range e.Import("oc", p).Jobs {
		for _, u := range j.Unsupported {
			if strings.Contains(u, "time zone") {
				t.Errorf("job %s still unsupported with a timezone", j.Name)
			}
		}
	}
}

func startSleeper(t testing.TB) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd
}

// TestInventoryReadOnlyMount: inventory and export read an installation
// on a read-only bind mount (each era, the SQLite store included), and
// count it as they count the writable original.
func TestInventoryReadOnlyMount(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI runs the tests as root: a read-only bind mount needs it")
		}
		t.Skip("a read-only bind mount needs root")
	}
	for _, era := range []int{2, 3} {
		t.Run(fmt.Sprintf("era%d", era), func(t *testing.T) {
			dir, truth := install(t, small(era))
			mnt := filepath.Join(t.TempDir(), "ro")
			if err := os.Mkdir(mnt, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := syscall.Mount(dir, mnt, "", syscall.MS_BIND, ""); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { syscall.Unmount(mnt, syscall.MNT_DETACH) })
			if err := syscall.Mount("", mnt, "", syscall.MS_BIND|syscall.MS_REMOUNT|syscall.MS_RDONLY, ""); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(mnt, "probe"), nil, 0o600); err == nil {
				t.Fatal("the mount is writable")
			}
			inv, err := Take(context.Background(), mnt)
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range Kinds {
				if inv.Counts[k] != truth.Counts[string(k)] {
					t.Errorf("%s: %d on the read-only mount, %d written", k, inv.Counts[k], truth.Counts[string(k)])
				}
			}
			if _, err := Write(context.Background(), mnt, filepath.Join(t.TempDir(), "export"), ExportOptions{LockDir: t.TempDir()}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

var update = flag.Bool("update", false, "rewrite the golden files")

// TestInventoryGolden: the inventory of the small installation in the
// repository has the counts and hashes pinned in testdata: the same on
// every machine and checkout (nothing of the path, clock or file times
// enters a hash).
func TestInventoryGolden(t *testing.T) {
	inv, err := Take(context.Background(), "../internal/openclawfix/testdata/small")
	if err != nil {
		t.Fatal(err)
	}
	got, err := indented(map[string]any{"era": inv.Era, "version": inv.Version, "counts": inv.Counts, "hashes": inv.Hashes})
	if err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "small.inventory.json")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("inventory of the small installation:\n%s\nwant (%s):\n%s", got, golden, want)
	}
	// Elsewhere, the same: secrets' markers name locations in the
	// installation, not where it lies.
	moved := filepath.Join(t.TempDir(), "elsewhere")
	if out, err := exec.Command("cp", "-a", "../internal/openclawfix/testdata/small", moved).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	again, err := Take(context.Background(), moved)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range Kinds {
		if again.Hashes[k] != inv.Hashes[k] {
			t.Errorf("%s: %s here, %s once moved", k, inv.Hashes[k], again.Hashes[k])
		}
	}
}
