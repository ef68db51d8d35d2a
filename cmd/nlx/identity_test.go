package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/nlx-dev/nlx/internal/testgen"
	"github.com/nlx-dev/nlx/internal/testtool"
)

// osUser creates a real OS user for the test (removed at its end).
func osUser(t *testing.T, prefix string) *user.User {
	t.Helper()
	name := fmt.Sprintf("%s%d", prefix, os.Getpid()%100000)
	if out, err := exec.Command("useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", name).CombinedOutput(); err != nil {
		t.Fatalf("useradd %s: %v\n%s", name, err, out)
	}
	t.Cleanup(func() { exec.Command("userdel", name).Run() })
	u, err := user.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// TestActorsByOSUser: on the host, the calling OS user proves an actor,
// read from the process's credentials: another user (created here) acting
// as alice is refused, so is root, and alice's own user or alice's key is
// accepted; the two-person rule holds against the proven author.
func TestActorsByOSUser(t *testing.T) {
	if os.Getuid() != 0 {
		if testtool.InCI() {
			t.Fatal("CI runs the tests as root, which creates the test's users")
		}
		t.Skip("creating OS users needs root")
	}
	testtool.Need(t, "useradd")
	alice, mallory := osUser(t, "nlxa"), osUser(t, "nlxm")
	top := t.TempDir()
	for d := top; d != "/"; d = filepath.Dir(d) {
		if fi, err := os.Stat(d); err == nil && fi.Mode().Perm()&0o005 != 0o005 {
			os.Chmod(d, fi.Mode().Perm()|0o005)
		}
	}
	os.Chmod(top, 0o777) // alice writes her plan there
	cfg := filepath.Join(top, "config")
	if err := testgen.CopyTree("../../examples/gitops/config", cfg); err != nil {
		t.Fatal(err)
	}
	keys, _ := filepath.Abs("../../internal/testkeys")
	pubs := map[string]string{}
	for _, a := range []string{"alice", "carol"} {
		b, err := os.ReadFile(filepath.Join(keys, a+".pub"))
		if err != nil {
			t.Fatal(err)
		}
		pubs[a] = strings.TrimSpace(string(b))
	}
	host, _ := os.ReadFile(filepath.Join(cfg, "host.cue"))
	host = []byte(strings.Replace(string(host), `alice: unix: "alice"`, fmt.Sprintf(`alice: unix: %q`, alice.Username), 1))
	os.WriteFile(filepath.Join(cfg, "host.cue"), host, 0o644)
	os.WriteFile(filepath.Join(cfg, "zz_identities.cue"), []byte(fmt.Sprintf("package gitops\n\nhost: actors: {\n\talice: keys: [%q]\n\tcarol: keys: [%q]\n}\n", pubs["alice"], pubs["carol"])), 0o644)
	stateDir := filepath.Join(top, "state")
	os.Mkdir(stateDir, 0o777)
	os.Chmod(stateDir, 0o777)
	env := []string{"NLX_STATE=" + filepath.Join(stateDir, "state.db"), "NLX_WORKSPACE_ROOT=" + filepath.Join(top, "ws"), "NLX_ACTOR=", "NLX_FAULT=", "HOME=" + top}

	// as runs nlx as u (nil: this process's user, root) and wants code.
	as := func(u *user.User, want int, args ...string) string {
		t.Helper()
		cmd := exec.Command(filepath.Join(binDir, "nlx"), args...)
		cmd.Dir = top
		cmd.Env = append(os.Environ(), env...)
		if u != nil {
			uid, _ := strconv.Atoi(u.Uid)
			gid, _ := strconv.Atoi(u.Gid)
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
		}
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if code != want {
			who := "root"
			if u != nil {
				who = u.Username
			}
			t.Fatalf("as %s: nlx %s: exit %d, want %d\n%s", who, strings.Join(args, " "), code, want, out)
		}
		// Every user of the host's state writes it.
		matches, _ := filepath.Glob(filepath.Join(stateDir, "*"))
		for _, m := range matches {
			os.Chmod(m, 0o666)
		}
		return string(out)
	}
	wants := func(out string, parts ...string) {
		t.Helper()
		for _, p := range parts {
			if !strings.Contains(out, p) {
				t.Fatalf("output lacks %q:\n%s", p, out)
			}
		}
	}

	as(nil, 0, "apply", "config", "--yes")
	c := strings.Replace(string(host), `policy:    "read_only"`, `policy:    "workspace_write"`, 1)
	if c == string(host) {
		c = strings.Replace(string(host), `policy: "read_only"`, `policy: "workspace_write"`, 1)
	}
	os.WriteFile(filepath.Join(cfg, "host.cue"), []byte(c), 0o644)
	as(nil, 0, "plan", "config", "--out", "risky.json", "--actor", "carol")
	os.Chmod(filepath.Join(top, "risky.json"), 0o644)

	// mallory, root and alice-by-name-only are nobody.
	wants(as(mallory, 3, "approve", "risky.json", "--actor", "alice", "--reason", "trust me"),
		"actor_unproven", "this is OS user "+mallory.Username+" (uid "+mallory.Uid+")")
	wants(as(nil, 3, "approve", "risky.json", "--actor", "alice", "--reason", "I am root"),
		"actor_unproven", "this is OS user root (uid 0)")
	wants(as(mallory, 3, "resolve", "workspace.platform", "--outcome", "applied", "--actor", "alice", "--reason", "x"), "actor_unproven")
	wants(as(mallory, 3, "resolve", "claim", "c-1", "--outcome", "failed", "--actor", "alice", "--reason", "x"), "actor_unproven")
	// alice's own OS user, or alice's key, is alice.
	wants(as(alice, 1, "resolve", "workspace.platform", "--outcome", "applied", "--actor", "alice", "--reason", "x"), "nothing_to_resolve")
	wants(as(alice, 0, "approve", "risky.json", "--actor", "alice", "--reason", "reviewed"), "approved workspace.platform permission_widening by alice")
	wants(as(nil, 0, "approve", "risky.json", "--actor", "alice", "--key", filepath.Join(keys, "alice"), "--reason", "reviewed"), "by alice")

	// The plan's author as proven by the OS user: alice made it, so she
	// cannot approve it; carol, by her key, can.
	as(nil, 0, "apply", "risky.json")
	own := strings.Replace(c, `bob:   "member"`, `bob:   "admin"`, 1)
	if own == c {
		t.Fatal("the example's bob is not a member")
	}
	os.WriteFile(filepath.Join(cfg, "host.cue"), []byte(own), 0o644)
	out := as(alice, 0, "plan", "config", "--out", "own.json", "-o", "json")
	var p struct {
		Actor      string `json:"actor"`
		ActorProof string `json:"actor_proof"`
	}
	data, err := os.ReadFile(filepath.Join(top, "own.json"))
	if err != nil || json.Unmarshal(data, &p) != nil {
		t.Fatalf("own.json: %v\n%s", err, out)
	}
	if p.Actor != "alice" || p.ActorProof != "unix:"+alice.Username {
		t.Fatalf("the plan records actor %q proven %q, want alice by unix:%s", p.Actor, p.ActorProof, alice.Username)
	}
	wants(as(alice, 3, "approve", "own.json", "--actor", "alice", "--reason", "mine"), "two_person_rule")
	wants(as(nil, 0, "approve", "own.json", "--actor", "carol", "--key", filepath.Join(keys, "carol"), "--reason", "fine"), "approved workspace.platform permission_widening by carol")
	wants(as(nil, 0, "apply", "own.json"), "approval used: workspace.platform permission_widening by carol")
}
