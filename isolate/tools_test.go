package isolate

import (
	"bufio"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nlx-dev/nlx/egress"
	"github.com/nlx-dev/nlx/internal/reason"
	"github.com/nlx-dev/nlx/toolproxy"
)

// TestToolsAndProviderHome: a launch with a tool proxy reaches it from
// inside the sandbox through nlx's bridge at the bound paths, under egress
// none (no network at all); its provider home is its own, read-write, at
// NLX_PROVIDER_HOME, while nothing else of the host is.
func TestToolsAndProviderHome(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t)
	exe = copyExecutable(t, exe, f.base+"/bin/helper")
	for _, b := range backends {
		t.Run(string(b), func(t *testing.T) {
			needBackend(t, b)
			// The proxy's side: a socket in a directory only root
			// writes, owned by the provider's user, answering each line.
			dir := filepath.Join(f.base, "run-"+string(b))
			must(t, os.MkdirAll(dir, 0o711))
			sock := filepath.Join(dir, "tools.sock")
			ln, err := net.Listen("unix", sock)
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			must(t, os.Chown(sock, testUID, testUID))
			must(t, os.Chmod(sock, 0o600))
			go func() {
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					go func() {
						defer c.Close()
						// As the proxy takes them: the bridge hands over
						// its stdio, across the sandbox's namespaces.
						r, w, closer, err := toolproxy.Handover(c)
						if err != nil {
							t.Errorf("handover: %v", err)
							return
						}
						defer closer.Close()
						if _, ok := r.(*os.File); !ok {
							t.Errorf("the bridge copied its stdio instead of handing it over")
						}
						sc := bufio.NewScanner(r)
						for sc.Scan() {
							w.Write([]byte("pong:" + sc.Text() + "\n"))
						}
					}()
				}
			}()
			home := filepath.Join(f.base, "homes", string(b))
			must(t, os.MkdirAll(filepath.Dir(home), 0o711))
			must(t, os.Mkdir(home, 0o700))
			must(t, os.WriteFile(filepath.Join(home, "config.toml"), []byte("from-nlx\n"), 0o600))
			must(t, os.Chown(home, testUID, testUID))
			must(t, os.Chown(filepath.Join(home, "config.toml"), testUID, testUID))
			script := `echo ping | ` + egress.HelperPath + ` ` + toolproxy.BridgeMode + ` ` + ToolsSocketPath + `; ` +
				`echo "home:$NLX_PROVIDER_HOME:$(cat $NLX_PROVIDER_HOME/config.toml)"; echo written > $NLX_PROVIDER_HOME/new; ` +
				`ls /run/nlx`
			req := f.request(b, ReadOnly, "sh", "-c", script)
			req.Tools = &Proxy{Socket: sock, Helper: exe}
			req.ProviderHome = home
			if helper, socket := req.ToolPaths(); helper != egress.HelperPath || socket != ToolsSocketPath {
				t.Errorf("tool paths %s %s", helper, socket)
			}
			r := run(t, req)
			for _, want := range []string{"pong:ping\n", "home:" + ProviderHomePath + ":from-nlx\n"} {
				if !strings.Contains(r.out, want) {
					t.Errorf("want %q in the sandbox's output:\n%s\nstderr: %s", want, r.out, r.errOut)
				}
			}
			if data, err := os.ReadFile(filepath.Join(home, "new")); err != nil || string(data) != "written\n" {
				t.Errorf("the provider home is not the launch's, read-write: %q %v", data, err)
			}
			if strings.Contains(r.out, "egress.sock") {
				t.Errorf("an egress socket without egress inference:\n%s", r.out)
			}
		})
	}
	t.Run("refusals", func(t *testing.T) {
		req := f.request(Bwrap, WorkspaceWrite, "true")
		req.Tools = &Proxy{Socket: filepath.Join(f.base, "no.sock"), Helper: exe}
		if _, err := Compile(req); !reason.Is(err, reason.ToolsProxyUnavailable) {
			t.Errorf("a missing tool socket: %v, want tools_proxy_unavailable", err)
		}
		req = f.request(Bwrap, WorkspaceWrite, "true")
		req.ProviderHome = filepath.Join(f.ws, "home")
		must(t, os.MkdirAll(req.ProviderHome, 0o700))
		if _, err := Compile(req); !reason.Is(err, reason.InvalidRequest) {
			t.Errorf("a provider home inside the workspace: %v, want invalid_request", err)
		}
		req = f.request(Bwrap, WorkspaceWrite, "true")
		req.ProviderHome = filepath.Join(f.credRoot, "alice")
		if _, err := Compile(req); !reason.Is(err, reason.InvalidRequest) {
			t.Errorf("a provider home in the credential root: %v, want invalid_request", err)
		}
	})
}
