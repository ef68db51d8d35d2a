package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/nlx-dev/nlx/internal/openclawfix"
	"github.com/nlx-dev/nlx/preserve"
	"github.com/nlx-dev/nlx/reconcile"
	"github.com/nlx-dev/nlx/schema"
	"github.com/nlx-dev/nlx/state"
)

// openclaw DIR ERA writes an OpenClaw installation of that era into DIR
// (70 jobs, 24 sessions, 256 KiB of transcripts), and the secrets it
// holds, one per line, into DIR.secrets.
func cmdOpenclaw(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: openclaw DIR ERA")
	}
	var era int
	fmt.Sscan(args[1], &era)
	dir := ts.MkAbs(args[0])
	truth, err := openclawfix.Write(dir, openclawfix.Options{Era: era, Jobs: 70, Sessions: 24, TranscriptBytes: 256 << 10})
	ts.Check(err)
	ts.Check(os.WriteFile(dir+".secrets", []byte(strings.Join(truth.Secrets, "\n")+"\n"), 0o600))
}

// nosecrets SECRETS PATH... fails if a file at or below any PATH holds
// one of the secrets listed in SECRETS.
func cmdNosecrets(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: nosecrets SECRETS PATH...")
	}
	data, err := os.ReadFile(ts.MkAbs(args[0]))
	ts.Check(err)
	secrets := strings.Fields(string(data))
	if len(secrets) == 0 {
		ts.Fatalf("nosecrets: %s lists no secret", args[0])
	}
	for _, root := range args[1:] {
		err := filepath.WalkDir(ts.MkAbs(root), func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !d.Type().IsRegular() {
				return err
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			for _, s := range secrets {
				if strings.Contains(string(b), s) {
					ts.Fatalf("%s holds the secret %.8s...", p, s)
				}
			}
			return nil
		})
		ts.Check(err)
	}
}

// adopt EXPORT FILE [completed] writes into FILE the CUE definition of
// an imported job an operator can release (adoptable), and sets $ADOPTED
// to its name.
func cmdAdopt(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 || len(args) > 3 {
		ts.Fatalf("usage: adopt EXPORT FILE [completed]")
	}
	name, cue, err := adoptable(ts.MkAbs(args[0]), len(args) == 3)
	ts.Check(err)
	ts.Check(os.WriteFile(ts.MkAbs(args[1]), []byte(cue), 0o644))
	ts.Setenv("ADOPTED", name)
}

// adoptable is the first imported job of the export an operator can
// release (supported, not running, a cron job of the main agent), as the
// export projects it, in CUE under the names the preservation of the
// preserve script gives (workspace w, connection c). With completed, the
// first completed one-time job instead, enabled again, catch-up latest.
func adoptable(export string, completed bool) (name, cue string, err error) {
	data, err := os.ReadFile(filepath.Join(export, "projections", "jobs.json"))
	if err != nil {
		return "", "", err
	}
	var jobs []preserve.ProjectedJob
	if err := json.Unmarshal(data, &jobs); err != nil {
		return "", "", err
	}
	for _, j := range jobs {
		if len(j.Unsupported) > 0 || j.Running != "" || j.Agent != "main" || j.Conversation != "" {
			continue
		}
		prompt, _ := json.Marshal(j.Prompt)
		head := fmt.Sprintf("package p\n\njobs: %q: {\n\tworkspace:  \"w\"\n\tconnection: \"c\"\n\tprompt:  %s\n", j.Name, prompt)
		switch {
		case completed && j.Completed != "":
			return j.Name, head + fmt.Sprintf("\tschedule: at: %q\n\tenabled: true\n\tcatchUp: \"latest\"\n}\n", j.Schedule.At), nil
		case !completed && j.Completed == "" && j.Schedule.Cron != "" && j.Schedule.Timezone != "":
			return j.Name, head + fmt.Sprintf("\tschedule: {cron: %q, timezone: %q}\n\tenabled: %v\n}\n", j.Schedule.Cron, j.Schedule.Timezone, j.Enabled), nil
		}
	}
	return "", "", fmt.Errorf("adopt: no such job in %s", export)
}

// importHost is a host with the preserve script's config and an exported
// OpenClaw installation (era 3: the SQLite store), ready to import.
func importHost(t *testing.T) (*testHost, *openclawfix.Truth) {
	t.Helper()
	dir := t.TempDir()
	h := &testHost{t: t, dir: dir, state: filepath.Join(dir, "state", "state.db"), root: filepath.Join(dir, "workspaces")}
	src := filepath.Join(dir, "oc")
	truth, err := openclawfix.Write(src, openclawfix.Options{Era: 3, Jobs: 70, Sessions: 24, TranscriptBytes: 256 << 10})
	if err != nil {
		t.Fatal(err)
	}
	script, err := os.ReadFile("testdata/script/preserve.txtar")
	if err != nil {
		t.Fatal(err)
	}
	cfg := string(script[strings.Index(string(script), "-- cfg/host.cue --\n")+len("-- cfg/host.cue --\n"):])
	cfg = strings.NewReplacer("SRC", src, "EXPORT", filepath.Join(dir, "export"), "LOCKS", filepath.Join(dir, "locks")).Replace(cfg)
	if err := os.MkdirAll(filepath.Join(dir, "cfg"), 0o755); err != nil {
		t.Fatal(err)
	}
	// The host first, so that the import's apply is the import alone.
	base := cfg[:strings.Index(cfg, "preservations:")]
	if err := os.WriteFile(filepath.Join(dir, "cfg", "host.cue"), []byte(base), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := writeIdentities(filepath.Join(dir, "cfg"), testKeys, "alice", "bob", "carol"); err != nil {
		t.Fatal(err)
	}
	h.must(0, "apply", "cfg", "--yes")
	if err := os.WriteFile(filepath.Join(dir, "cfg", "host.cue"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	h.must(0, "preserve", "export", "oc", "cfg")
	return h, truth
}

// imported reads what the state holds of the import: its row, its held
// jobs and its claims.
func (h *testHost) imported() (imports []state.ImportRow, held int, claims map[state.ClaimPhase]int) {
	h.t.Helper()
	if _, err := os.Stat(h.state); errors.Is(err, fs.ErrNotExist) {
		return nil, 0, map[state.ClaimPhase]int{}
	}
	ctx := context.Background()
	db, err := state.Open(ctx, h.state, state.Options{ReadOnly: true})
	if err != nil {
		h.t.Fatal(err)
	}
	defer db.Close()
	if imports, err = db.Imports(ctx); err != nil {
		h.t.Fatal(err)
	}
	rows, err := db.Rows(ctx)
	if err != nil {
		h.t.Fatal(err)
	}
	claims = map[state.ClaimPhase]int{}
	for _, r := range rows {
		if r.Status == reconcile.StatusHeld {
			held++
		}
		if r.Kind == schema.KindJob {
			cs, err := db.Claims(ctx, r.Name, 0)
			if err != nil {
				h.t.Fatal(err)
			}
			for _, c := range cs {
				claims[c.Phase]++
			}
		}
	}
	return imports, held, claims
}

// TestImportCrash kills nlx with SIGKILL at every fault point of an
// import's apply (in batches of 4: the import is still one transaction)
// and checks that the state holds either nothing of the import or all of
// it, and that a second plan and apply then completes it, once.
func TestImportCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("kills many processes")
	}
	trace, truth := importHost(t)
	trace.must(0, "plan", "cfg", "--out", "plan.json")
	points := filepath.Join(trace.dir, "points")
	if _, errOut, code := trace.run([]string{"NLX_FAULT_TRACE=" + points}, "apply", "plan.json", "--batch-size", "4"); code != 0 {
		t.Fatalf("traced apply: exit %d: %s", code, errOut)
	}
	want := func(h *testHost) {
		t.Helper()
		imports, held, claims := h.imported()
		if len(imports) != 1 || imports[0].Jobs != 70 || held != 70 || claims[state.ClaimUnknown] != 1 ||
			claims[state.ClaimSucceeded] != len(truth.CompletedOneShots) || imports[0].Conversations != 24 {
			t.Fatalf("import: %+v, %d held, claims %v; want one import of 70 jobs and 24 conversations, 70 held, 1 unknown and %d succeeded claims",
				imports, held, claims, len(truth.CompletedOneShots))
		}
	}
	want(trace)
	data, err := os.ReadFile(points)
	if err != nil {
		t.Fatal(err)
	}
	list := strings.Fields(string(data))
	if len(list) < 5 {
		t.Fatalf("only %d fault points: %v", len(list), list)
	}
	for _, point := range list {
		t.Run(point, func(t *testing.T) {
			t.Parallel()
			h, _ := importHost(t)
			h.must(0, "plan", "cfg", "--out", "plan.json")
			if _, _, code := h.run([]string{"NLX_FAULT=" + point + "=kill"}, "apply", "plan.json", "--batch-size", "4"); code != 128+int(syscall.SIGKILL) {
				t.Fatalf("apply killed at %s: exit %d", point, code)
			}
			imports, held, claims := h.imported()
			switch {
			case len(imports) == 0 && held == 0 && len(claims) == 0:
			case len(imports) == 1 && held == 70:
			default:
				t.Fatalf("after a kill at %s: %+v, %d held, claims %v: neither nothing nor the whole import", point, imports, held, claims)
			}
			h.must(0, "plan", "cfg", "--out", "again.json")
			h.must(0, "apply", "again.json")
			want(h)
			h.must(0, "plan", "cfg", "--detailed-exitcode")
		})
	}
}

// TestReleaseRecorded: a release records the held definition, the
// released one and the approval, and keeps the job's imported claims.
func TestReleaseRecorded(t *testing.T) {
	h, _ := importHost(t)
	h.must(0, "apply", "cfg", "--yes")
	name, cue, err := adoptable(filepath.Join(h.dir, "export"), false)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(h.dir, "cfg", "adopted.cue"), []byte(cue), 0o644); err != nil {
		t.Fatal(err)
	}
	h.must(0, "plan", "cfg", "--out", "release.json")
	h.must(0, "approve", "release.json", "--actor", "alice", "--key", testKey("alice"), "--reason", "reviewed")
	h.must(0, "apply", "release.json")
	ctx := context.Background()
	db, err := state.Open(ctx, h.state, state.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rels, err := db.Releases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rels) != 1 || rels[0].Address != "job."+name || rels[0].ApprovalID == 0 || len(rels[0].Before) == 0 || len(rels[0].After) == 0 {
		t.Fatalf("releases %+v, want one of job.%s with its approval and both definitions", rels, name)
	}
	var before, after schema.Job
	if json.Unmarshal(rels[0].Before, &before) != nil || json.Unmarshal(rels[0].After, &after) != nil || before.Workspace != "w" || after.Prompt == "" {
		t.Errorf("release definitions: %s -> %s", rels[0].Before, rels[0].After)
	}
	r, err := db.Resource(ctx, "job."+name)
	if err != nil || r == nil || r.Status != reconcile.StatusActive {
		t.Errorf("released job: %+v %v", r, err)
	}
	imports, _ := db.Imports(ctx)
	if len(imports) != 1 || imports[0].Held != 69 {
		t.Errorf("imports %+v: want 69 still held", imports)
	}
}

// unknownclaim STATE sets $CLAIM to the id of the one unknown claim of
// the state.
func cmdUnknownclaim(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: unknownclaim STATE")
	}
	ctx := context.Background()
	db, err := state.Open(ctx, ts.MkAbs(args[0]), state.Options{ReadOnly: true})
	ts.Check(err)
	defer db.Close()
	claims, err := db.UnknownClaims(ctx)
	ts.Check(err)
	if len(claims) != 1 {
		ts.Fatalf("unknownclaim: %d unknown claims, want 1", len(claims))
	}
	ts.Setenv("CLAIM", claims[0].ID)
}
