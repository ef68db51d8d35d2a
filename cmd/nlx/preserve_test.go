package main

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/nlx-dev/nlx/internal/openclawfix"
	"github.com/nlx-dev/nlx/preserve"
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

// adopt EXPORT FILE writes into FILE the CUE definition of the first
// imported job an operator can release (supported, not running, not a
// completed one-time job), as the export projects it, under the names the
// preservation of the script's config gives: workspace w, connection c.
func cmdAdopt(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: adopt EXPORT FILE")
	}
	data, err := os.ReadFile(filepath.Join(ts.MkAbs(args[0]), "projections", "jobs.json"))
	ts.Check(err)
	var jobs []preserve.ProjectedJob
	ts.Check(json.Unmarshal(data, &jobs))
	for _, j := range jobs {
		if len(j.Unsupported) > 0 || j.Running != "" || j.Completed != "" || j.Schedule.Cron == "" || j.Schedule.Timezone == "" || j.Conversation != "" || j.Agent != "main" {
			continue
		}
		prompt, _ := json.Marshal(j.Prompt)
		cue := fmt.Sprintf("package p\n\njobs: %q: {\n\tworkspace:  \"w\"\n\tconnection: \"c\"\n\tschedule: {cron: %q, timezone: %q}\n\tprompt:  %s\n\tenabled: %v\n}\n",
			j.Name, j.Schedule.Cron, j.Schedule.Timezone, prompt, j.Enabled)
		ts.Check(os.WriteFile(ts.MkAbs(args[1]), []byte(cue), 0o644))
		ts.Setenv("ADOPTED", j.Name)
		return
	}
	ts.Fatalf("adopt: no releasable job in %s", args[0])
}
