package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	osuser "os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/nlx-dev/nlx/internal/testgen"
	"github.com/nlx-dev/nlx/internal/testtool"
	"github.com/nlx-dev/nlx/state"
)

// goEnv pins where the go command keeps its caches, for the image builds
// scripts trigger.
var goEnv = map[string]string{}

// binDir holds the nlx binary the scripts run: built once with go build,
// with the nlxfault tag so scripts can stop it at named points.
var binDir string

// providersBin is where make providers installs the provider programs'
// commands.
var providersBin, _ = filepath.Abs("../../.providers/node_modules/.bin")

// builtAt is the commit the test binary was built from ("" outside a git
// checkout).
var builtAt string

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "nlx-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if head, err := exec.Command("git", "-C", "../..", "rev-parse", "HEAD").Output(); err == nil {
		builtAt = strings.TrimSpace(string(head))
	}
	build := exec.Command("go", "build", "-buildvcs=auto", "-tags", "nlxfault", "-o", filepath.Join(dir, "nlx"), ".")
	// Static, as make build makes it: the bridge of an inference launch
	// runs this nlx in an image root too, which has no host libc.
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build nlx:", err)
		return 1
	}
	// The MCP tool server the scripts grant workspaces (a real one, on the
	// official Go SDK), started by nlx's tool proxies outside the
	// providers' sandboxes.
	fix := exec.Command("go", "build", "-o", filepath.Join(dir, "toolfix"), "../../internal/toolfix")
	fix.Env = append(os.Environ(), "CGO_ENABLED=0")
	fix.Stdout, fix.Stderr = os.Stderr, os.Stderr
	if err := fix.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build toolfix:", err)
		return 1
	}
	// The bridge of an inference launch runs this nlx inside the sandbox,
	// where the provider's user must reach it.
	if err := os.Chmod(dir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	binDir = dir
	out, err := exec.Command("go", "env", "GOCACHE", "GOMODCACHE", "GOPATH").Output()
	if err != nil {
		fmt.Fprintln(os.Stderr, "go env:", err)
		return 1
	}
	for i, v := range strings.Fields(string(out)) {
		goEnv[[]string{"GOCACHE", "GOMODCACHE", "GOPATH"}[i]] = v
	}
	return testtool.RunSwept(m)
}

func TestScripts(t *testing.T) {
	examples, err := filepath.Abs("../../examples")
	if err != nil {
		t.Fatal(err)
	}
	testscript.Run(t, testscript.Params{
		Dir:                 "testdata/script",
		RequireExplicitExec: true,
		// [provider:NAME]: the real provider program is installed (make
		// providers); under CI=true a missing one fails the script.
		Condition: func(cond string) (bool, error) {
			name, ok := strings.CutPrefix(cond, "provider:")
			if !ok {
				return false, fmt.Errorf("unknown condition %q", cond)
			}
			if _, err := os.Stat(filepath.Join(providersBin, name)); err == nil {
				return true, nil
			}
			if testtool.InCI() {
				return false, fmt.Errorf("provider %s is not installed under CI=true: .ci/run runs make providers", name)
			}
			return false, nil
		},
		Setup: func(env *testscript.Env) error {
			env.Setenv("PATH", binDir+string(os.PathListSeparator)+providersBin+string(os.PathListSeparator)+env.Getenv("PATH"))
			env.Setenv("EXAMPLES", examples)
			env.Setenv("KEYS", filepath.Join(filepath.Dir(examples), "internal", "testkeys"))
			env.Setenv("NLX_ACTOR", "ci")
			// Scripts copy the example out of the module, as an operator
			// starting a config repository would, and plan it there: no Go
			// module or workspace around it (its image carries nlx by an
			// nlx layer). One layer cache serves every script, so the
			// example image is cross-compiled once per run.
			env.Setenv("GOWORK", "off")
			env.Setenv("NLX_IMAGE_CACHE", filepath.Join(binDir, "image-cache"))
			for k, v := range goEnv {
				env.Setenv(k, v) // scripts change HOME; the go command must not lose its caches
			}
			env.Setenv("NO_COLOR", "1")
			// Every script gets its own state unless it says otherwise.
			env.Setenv("NLX_STATE", filepath.Join(env.WorkDir, "state", "state.db"))
			// Providers run as a user without a passwd entry (nlx would
			// create nlx-provider otherwise), which bubblewrap, running as
			// it, must reach the workspaces from: every directory above
			// the work directory searchable.
			env.Setenv("NLX_PROVIDER_USER", "61234:61234")
			// Launch ids name host-wide cgroups: unique per run, so that a
			// failed run's leftovers never meet the next.
			env.Setenv("RUNID", fmt.Sprintf("%x", time.Now().UnixNano()))
			env.Values[fakeModelKey{}] = &fakeModelBox{}
			for d := env.WorkDir; d != "/"; d = filepath.Dir(d) {
				if fi, err := os.Stat(d); err == nil && fi.Mode().Perm()&0o001 == 0 {
					if err := os.Chmod(d, fi.Mode().Perm()|0o111); err != nil {
						return err
					}
				}
			}
			return nil
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"status":         cmdStatus,
			"cpdir":          cmdCpdir,
			"replace":        cmdReplace,
			"identities":     cmdIdentities,
			"waitlock":       cmdWaitlock,
			"waitlaunch":     cmdWaitlaunch,
			"gencue":         cmdGencue,
			"fakemodel":      cmdFakemodel,
			"waitpermission": cmdWaitpermission,
			"httpserve":      cmdHTTPServe,
			"lastturn":       cmdLastTurn,
			"instant":        cmdInstant,
			"waitclaim":      cmdWaitclaim,
			"waitrefresh":    cmdWaitrefresh,
			"statefile":      cmdStatefile,
			"hold":           cmdHold,
			"openclaw":       cmdOpenclaw,
			"nosecrets":      cmdNosecrets,
			"adopt":          cmdAdopt,
			"unknownclaim":   cmdUnknownclaim,
		},
	})
}

// status N PROG ARGS... runs PROG and requires exit code N; stdout and
// stderr are kept for the next stdout/stderr checks.
func cmdStatus(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: status CODE PROG [ARGS...]")
	}
	want, err := strconv.Atoi(args[0])
	if err != nil {
		ts.Fatalf("status: %v", err)
	}
	got := 0
	if err := ts.Exec(args[1], args[2:]...); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			ts.Fatalf("status: %v", err)
		}
		got = ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			got = 128 + int(ws.Signal()) // as a shell reports it
		}
	}
	if got != want {
		ts.Fatalf("%s exited %d, want %d", args[1], got, want)
	}
}

// cpdir SRC DST copies a directory tree.
func cmdCpdir(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: cpdir SRC DST")
	}
	ts.Check(testgen.CopyTree(ts.MkAbs(args[0]), ts.MkAbs(args[1])))
}

// identities DIR [ACTOR[=unix:USER] ...] writes DIR/zz_identities.cue, in
// the package of DIR's config, giving each actor (default alice, bob,
// carol and dave) its test key from internal/testkeys, or, with
// =unix:USER, that OS user; 'ACTOR=unix:$self' (quoted, so that testscript
// leaves $self alone) is the user running the tests. The tests prove
// actors by real keys (--key $KEYS/NAME) and real users.
func cmdIdentities(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 1 {
		ts.Fatalf("usage: identities DIR [ACTOR[=unix:USER] ...]")
	}
	ts.Check(writeIdentities(ts.MkAbs(args[0]), ts.Getenv("KEYS"), args[1:]...))
}

// writeIdentities writes dir/zz_identities.cue, as the identities command
// does, with the test keys in keys (internal/testkeys).
func writeIdentities(dir, keys string, actors ...string) error {
	pkg := ""
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".cue") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return err
		}
		for _, line := range strings.Split(string(data), "\n") {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "package "); ok && pkg == "" {
				pkg = strings.TrimSpace(rest)
			}
		}
	}
	if len(actors) == 0 {
		actors = []string{"alice", "bob", "carol", "dave"}
	}
	var b strings.Builder
	if pkg != "" {
		fmt.Fprintf(&b, "package %s\n\n", pkg)
	}
	b.WriteString("host: actors: {\n")
	for _, a := range actors {
		name, how, _ := strings.Cut(a, "=")
		if user, ok := strings.CutPrefix(how, "unix:"); ok {
			if user == "$self" {
				u, err := osuser.Current()
				if err != nil {
					return err
				}
				user = u.Username
			}
			fmt.Fprintf(&b, "\t%s: unix: %q\n", name, user)
			continue
		}
		pub, err := os.ReadFile(filepath.Join(keys, name+".pub"))
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "\t%s: keys: [%q]\n", name, strings.TrimSpace(string(pub)))
	}
	b.WriteString("}\n")
	return os.WriteFile(filepath.Join(dir, "zz_identities.cue"), []byte(b.String()), 0o644)
}

// testKeys is internal/testkeys, the test actors' keys: --key
// testKey(NAME) proves NAME on a host given writeIdentities.
var testKeys, _ = filepath.Abs("../../internal/testkeys")

func testKey(name string) string { return filepath.Join(testKeys, name) }

// replace FILE OLD NEW replaces the first OLD in FILE, which must hold it.
// OLD and NEW may use \n and \t.
func cmdReplace(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 3 {
		ts.Fatalf("usage: replace FILE OLD NEW")
	}
	unescape := strings.NewReplacer(`\n`, "\n", `\t`, "\t").Replace
	file := ts.MkAbs(args[0])
	data, err := os.ReadFile(file)
	ts.Check(err)
	old, repl := unescape(args[1]), unescape(args[2])
	if !strings.Contains(string(data), old) {
		ts.Fatalf("%s does not contain %q", args[0], old)
	}
	ts.Check(os.WriteFile(file, []byte(strings.Replace(string(data), old, repl, 1)), 0o644))
}

// gencue BOMB FILE [PACKAGE] writes one of testgen.Bombs (package x unless
// given): they are megabytes, too big for a script's archive.
func cmdGencue(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 || len(args) > 3 {
		ts.Fatalf("usage: gencue BOMB FILE [PACKAGE]")
	}
	gen := testgen.Bombs[args[0]]
	if gen == nil {
		ts.Fatalf("gencue: no bomb %q (have %s)", args[0], strings.Join(testgen.BombNames(), ", "))
	}
	pkg := "x"
	if len(args) == 3 {
		pkg = args[2]
	}
	file := ts.MkAbs(args[1])
	ts.Check(os.MkdirAll(filepath.Dir(file), 0o755))
	ts.Check(os.WriteFile(file, gen(pkg), 0o644))
}

// waitlock STATE waits until some process holds the state lock.
func cmdWaitlock(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: waitlock STATE")
	}
	ctx := context.Background()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		db, err := state.Open(ctx, ts.MkAbs(args[0]), state.Options{MustExist: true})
		if err == nil {
			h, err := db.LockHolder(ctx)
			db.Close()
			if err == nil && h != nil {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	ts.Fatalf("nobody took the lock of %s", args[0])
}

// waitlaunch STATE ID waits until the launch ID is recorded running.
func cmdWaitlaunch(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: waitlaunch STATE ID")
	}
	ctx := context.Background()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		db, err := state.Open(ctx, ts.MkAbs(args[0]), state.Options{MustExist: true})
		if err == nil {
			p, err := db.Process(ctx, args[1])
			db.Close()
			if err == nil && p.Status == "running" {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	ts.Fatalf("launch %s never ran", args[1])
}

// TestVersionFromBuildInfo: a binary built in a checkout names its commit
// (it printed "dev" when GOFLAGS turned VCS stamping off).
func TestVersionFromBuildInfo(t *testing.T) {
	if builtAt == "" {
		t.Skip("not a git checkout: the binary has no revision to name")
	}
	if info, err := exec.Command("go", "version", "-m", filepath.Join(binDir, "nlx")).Output(); err != nil || !strings.Contains(string(info), "vcs.revision=") {
		t.Skipf("the go tool stamped no revision into the binary (%v): nothing to name", err)
	}
	out, err := exec.Command(filepath.Join(binDir, "nlx"), "version", "-o", "json").Output()
	if err != nil {
		t.Fatal(err)
	}
	var v struct{ Version string }
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatal(err)
	}
	if rev := builtAt[:12]; !strings.Contains(v.Version, rev) {
		t.Errorf("nlx version = %q, want it to name revision %s", v.Version, rev)
	}
}
