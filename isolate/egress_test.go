package isolate

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/nlx-dev/nlx/egress"
	"github.com/nlx-dev/nlx/internal/reason"
)

// TestInferenceEgress: with egress inference the sandbox reaches an
// allowed endpoint through the proxy and nothing else: another loopback
// server of the host is refused by the proxy (403, recorded) and has no
// route directly; names do not resolve; UDP goes nowhere; the host's
// abstract sockets are another namespace's. Killing the proxy leaves no
// network at all.
func TestInferenceEgress(t *testing.T) {
	allowed, hitsAllowed := serveCount(t, "allowed-body")
	other, hitsOther := serveCount(t, "other-body")
	abstract, err := net.Listen("unix", "@nlx-test-abstract-"+fmt.Sprint(os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	defer abstract.Close()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// The check of the test itself: from the host, the abstract socket is
	// there.
	if c, err := net.Dial("unix", "@nlx-test-abstract-"+fmt.Sprint(os.Getpid())); err != nil {
		t.Fatalf("the host cannot reach its own abstract socket: %v", err)
	} else {
		c.Close()
	}
	f := newFixture(t)
	// The bridge's nlx (here the test binary) where the provider's user
	// reaches it, as an installed nlx is.
	exe = copyExecutable(t, exe, f.base+"/bin/helper")
	script := strings.Join([]string{
		`echo "A:$(curl -s --max-time 10 http://` + allowed + `/)"`,
		`echo "B:$(curl -s --max-time 10 -o /dev/null -w '%{http_code}' http://` + other + `/)"`,
		`echo "C:$(curl -s --max-time 5 --noproxy '*' http://` + allowed + `/ || echo no-route)"`,
		`getent hosts example.com >/dev/null && echo D:resolved || echo D:no-dns`,
		`(echo x >/dev/udp/1.1.1.1/53) 2>/dev/null && echo E:udp-sent || echo E:no-udp`,
		`perl -MIO::Socket::UNIX -e 'exit(IO::Socket::UNIX->new(Peer => "\0nlx-test-abstract-` + fmt.Sprint(os.Getpid()) + `") ? 0 : 1)' && echo F:abstract || echo F:no-abstract`,
		`echo "G:$HTTPS_PROXY"`,
	}, "; ")
	for _, b := range backends {
		t.Run(string(b), func(t *testing.T) {
			needBackend(t, b)
			before := hitsAllowed()
			var mu sync.Mutex
			var recs []egress.Record
			px, err := egress.Start(context.Background(), exe, egress.DefaultBase(), testUID, testUID, []string{allowed})
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan struct{})
			go func() {
				for r := range px.Records {
					mu.Lock()
					recs = append(recs, r)
					mu.Unlock()
				}
				close(done)
			}()
			req := f.request(b, WorkspaceWrite, "sh", "-c", script)
			req.Egress, req.Proxy = EgressInference, &Proxy{Socket: px.Socket, Helper: exe}
			r := run(t, req)
			px.Stop()
			<-done
			for _, want := range []string{"A:allowed-body", "B:403", "C:no-route", "D:no-dns", "E:no-udp", "F:no-abstract", "G:http://" + egress.BridgeAddr} {
				if !strings.Contains(r.out, want+"\n") {
					t.Errorf("want %q in the sandbox's output:\n%s\nstderr: %s", want, r.out, r.errOut)
				}
			}
			if hitsOther() != 0 {
				t.Errorf("the other server was reached %d times", hitsOther())
			}
			if n := hitsAllowed() - before; n != 1 {
				t.Errorf("the allowed server was reached %d times, want once (through the proxy only)", n)
			}
			mu.Lock()
			defer mu.Unlock()
			var allowedRec, refusedRec bool
			for _, rec := range recs {
				switch {
				case rec.Decision == egress.Allowed && rec.BytesDown > 0 && fmt.Sprintf("%s:%d", rec.Host, rec.Port) == allowed:
					allowedRec = true
				case rec.Decision == egress.Refused && fmt.Sprintf("%s:%d", rec.Host, rec.Port) == other && rec.Reason != "":
					refusedRec = true
				}
			}
			if !allowedRec || !refusedRec {
				t.Errorf("records %+v: want the allowed one with its bytes and the refused one with its reason", recs)
			}
		})
	}
	t.Run("no proxy, no launch", func(t *testing.T) {
		req := f.request(Bwrap, WorkspaceWrite, "true")
		req.Egress = EgressInference
		if _, err := Compile(req); !reason.Is(err, reason.EgressProxyUnavailable) {
			t.Errorf("Compile: %v, want egress_proxy_unavailable", err)
		}
	})
}

// serveCount serves body on a loopback port and counts the requests.
func serveCount(t *testing.T, body string) (addr string, hits func() int) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	n := 0
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		n++
		mu.Unlock()
		fmt.Fprint(w, body)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String(), func() int { mu.Lock(); defer mu.Unlock(); return n }
}

// copyExecutable copies the program at src to dst, mode 0755.
func copyExecutable(t *testing.T, src, dst string) string {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	must(t, os.MkdirAll(filepath.Dir(dst), 0o755))
	must(t, os.WriteFile(dst, data, 0o755))
	return dst
}
