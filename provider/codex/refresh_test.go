package codex

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nlx-dev/nlx/internal/fakemodel"
	"github.com/nlx-dev/nlx/internal/testgen"
	"github.com/nlx-dev/nlx/provider"
)

// TestConfigWriter drives a real app-server's catalog refresh between two
// turns of one session, through the session's own connection: the user
// layer read, one write with its version, a stale version refused, the
// reload, the MCP server listed afresh; an answer lost (its wait given an
// ended context) leaves the write made and the session usable. Every
// message both ways is checked against the pinned schema.
func TestConfigWriter(t *testing.T) {
	fake := startFake(t)
	tool, err := testgen.BuildToolfix(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	server := func(name, grant string) provider.MCPServer {
		return provider.MCPServer{Name: "nlx", Command: tool, Args: []string{"--name", name}, Env: map[string]string{"NLX_TOOLS_GRANT": grant}}
	}
	files, _, err := (&Adapter{}).HomeFiles(nil, server("first", "g1"), "")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, configFile), files[configFile], 0o600); err != nil {
		t.Fatal(err)
	}
	turn := provider.Turn{Prompt: "hi", Policy: provider.WorkspaceWrite, Cwd: t.TempDir()}
	p := startCodex(t, fake, home, turn.Cwd, turn)
	s := (&Adapter{}).Open(p.pipes)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	fake.Push(fakemodel.Reply{Steps: []fakemodel.Step{{Text: "first turn"}}})
	if res, err := s.Turn(ctx, turn, &recorder{}); err != nil || res.Status != provider.StatusCompleted {
		t.Fatalf("first turn: %+v %v", res, err)
	}
	requests := len(fake.Requests())
	cw, ok := s.(provider.ConfigWriter)
	if !ok {
		t.Fatal("the codex session is no ConfigWriter")
	}
	v, err := cw.ReadConfig(ctx)
	if err != nil || !strings.HasPrefix(v.Version, "sha256:") || v.File != filepath.Join(home, configFile) {
		t.Fatalf("ReadConfig: %+v %v, want the user layer %s", v, err, filepath.Join(home, configFile))
	}
	answer, err := cw.WriteMCPServer(server("second", "g2"), v.Version)
	if err != nil {
		t.Fatal(err)
	}
	written, err := answer(ctx)
	if err != nil || written == v.Version || !strings.HasPrefix(written, "sha256:") {
		t.Fatalf("write: %q %v", written, err)
	}
	// The version read before the write is stale now: refused, nothing
	// written.
	answer, err = cw.WriteMCPServer(server("third", "g3"), v.Version)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := answer(ctx); !errors.Is(err, provider.ErrConfigConflict) {
		t.Fatalf("a stale write: %v, want a version conflict", err)
	}
	if data, _ := os.ReadFile(filepath.Join(home, configFile)); strings.Contains(string(data), "third") || !strings.Contains(string(data), "second") {
		t.Fatalf("config.toml after the stale write:\n%s", data)
	}
	answer, err = cw.ReloadMCPServers()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := answer(ctx); err != nil {
		t.Fatalf("reload: %v", err)
	}
	tools, err := cw.MCPServerTools(ctx, "nlx")
	if err != nil || !slices.Equal(tools, []string{"echo"}) {
		t.Fatalf("MCPServerTools: %v %v, want [echo]", tools, err)
	}
	// A lost answer: its wait is given a context already over. The write
	// was sent, and made; the session goes on, the late answer dropped.
	now, err := cw.ReadConfig(ctx)
	if err != nil {
		t.Fatal(err)
	}
	answer, err = cw.WriteMCPServer(server("fourth", "g4"), now.Version)
	if err != nil {
		t.Fatal(err)
	}
	over, stop := context.WithCancel(ctx)
	stop()
	if _, err := answer(over); !errors.Is(err, provider.ErrNoAnswer) {
		t.Fatalf("a lost answer: %v, want ErrNoAnswer", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		data, _ := os.ReadFile(filepath.Join(home, configFile))
		if strings.Contains(string(data), "fourth") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the write whose answer was lost never landed:\n%s", data)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := len(fake.Requests()); got != requests {
		t.Errorf("the refresh made %d model request(s)", got-requests)
	}
	fake.Push(fakemodel.Reply{Steps: []fakemodel.Step{{Text: "second turn"}}})
	if res, err := s.Turn(ctx, turn, &recorder{}); err != nil || res.Status != provider.StatusCompleted || res.Text != "second turn" {
		t.Fatalf("the turn after the refresh: %+v %v", res, err)
	}
	s.Close()
	p.wait(t)
	if m := p.tr.sentMethods(); slices.Contains(m, "thread/resume") || slices.Contains(m, "thread/fork") || strings.Count(strings.Join(m, " "), "thread/start") != 1 {
		t.Errorf("sent %v: a refresh starts, forks or resumes no thread", m)
	}
}
