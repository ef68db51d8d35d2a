package egress

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestParseEndpoint(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want string
		ok   bool
	}{
		{"api.openai.com:443", "api.openai.com:443", true},
		{"API.Anthropic.com:443", "api.anthropic.com:443", true},
		{"127.0.0.1:8080", "127.0.0.1:8080", true},
		{"[::1]:443", "[::1]:443", true},
		{"*.openai.com:443", "", false},
		{"10.0.0.0/8:443", "", false},
		{"api.openai.com", "", false},
		{"api.openai.com:0", "", false},
		{"api.openai.com:99999", "", false},
	} {
		e, err := ParseEndpoint(tt.in)
		if (err == nil) != tt.ok || (tt.ok && e.String() != tt.want) {
			t.Errorf("ParseEndpoint(%q) = %v, %v; want %q ok=%v", tt.in, e, err, tt.want, tt.ok)
		}
	}
}

// proxyFor serves a proxy with entries on a loopback listener, resolving
// names with hosts; it returns the proxy's address and its records.
func proxyFor(t *testing.T, entries []string, hosts map[string]string) (string, func() []Record) {
	t.Helper()
	pol, err := NewPolicy(entries)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var recs []Record
	p := &Proxy{Policy: pol, Record: func(r Record) { mu.Lock(); recs = append(recs, r); mu.Unlock() },
		Lookup: func(_ context.Context, host string) ([]netip.Addr, error) {
			if a, ok := hosts[host]; ok {
				return []netip.Addr{netip.MustParseAddr(a)}, nil
			}
			return nil, fmt.Errorf("no such host %s", host)
		}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go p.Serve(ln)
	t.Cleanup(func() { ln.Close() })
	return ln.Addr().String(), func() []Record { mu.Lock(); defer mu.Unlock(); return append([]Record(nil), recs...) }
}

// connect sends CONNECT target through the proxy at addr and returns the
// status line and the refusal header.
func connect(t *testing.T, addr, target string) (int, string, net.Conn) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header.Get(RefusedHeader), c
}

func TestProxyDecides(t *testing.T) {
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(c, c); c.Close() }()
		}
	}()
	allowed := echo.Addr().String()
	_, port, _ := net.SplitHostPort(allowed)
	other, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	addr, records := proxyFor(t, []string{allowed, "internal.example:" + port, "public.example:" + port},
		map[string]string{"internal.example": "10.1.2.3", "public.example": "127.0.0.1"})

	// Listed literally: a loopback address is reached, and bytes counted.
	code, _, c := connect(t, addr, allowed)
	if code != http.StatusOK {
		t.Fatalf("CONNECT %s: %d", allowed, code)
	}
	io.WriteString(c, "ping")
	c.(*net.TCPConn).CloseWrite()
	got, _ := io.ReadAll(c)
	c.Close()
	if string(got) != "ping" {
		t.Fatalf("through the tunnel: %q", got)
	}
	for _, tt := range []struct {
		target, why string
	}{
		{other.Addr().String(), "is not an inference endpoint"},
		{"internal.example:" + port, "resolves only to internal addresses (10.1.2.3)"},
		// A name that resolves to loopback is internal too: only the
		// literal entry reaches it.
		{"public.example:" + port, "resolves only to internal addresses (127.0.0.1)"},
		{"nowhere.example:443", "is not an inference endpoint"},
	} {
		code, why, c := connect(t, addr, tt.target)
		c.Close()
		if code != http.StatusForbidden || !strings.Contains(why, tt.why) {
			t.Errorf("CONNECT %s: %d %q, want 403 saying %q", tt.target, code, why, tt.why)
		}
	}
	// Plain http is forwarded by the same rules.
	resp, err := (&http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(mustURL("http://" + addr))}}).Get("http://" + other.Addr().String() + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("GET of an unlisted host through the proxy: %d", resp.StatusCode)
	}
	// A connection is recorded when it ends, by the goroutine that copied
	// it: wait for the tunnel's record (it was flaky under -race on a busy
	// machine when read at once).
	var recs []Record
	var allowedRec *Record
	refused := 0
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		recs, allowedRec, refused = records(), nil, 0
		for i, r := range recs {
			if r.Decision == Allowed {
				allowedRec = &recs[i]
			} else if r.Reason != "" {
				refused++
			}
		}
		if (allowedRec != nil && refused == 5) || time.Now().After(deadline) {
			break
		}
	}
	if allowedRec == nil || allowedRec.BytesUp != 4 || allowedRec.BytesDown != 4 || allowedRec.Addr != allowed {
		t.Errorf("allowed record %+v, want 4 bytes each way to %s", allowedRec, allowed)
	}
	if refused != 5 {
		t.Errorf("%d refusals recorded, want 5: %+v", refused, recs)
	}
}

func mustURL(s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		panic(err)
	}
	return u
}

// TestProxyClientEndsStream: a provider that hangs up while the model's
// stream is still open is recorded as having closed it, not as an upstream
// failure (as a turn's end races the stream's last bytes).
func TestProxyClientEndsStream(t *testing.T) {
	release := make(chan struct{})
	model := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: {\"type\":\"response.completed\"}\n\n")
		w.(http.Flusher).Flush()
		<-release
	}))
	defer model.Close()
	defer close(release) // before the server's Close, which waits for the handler
	resp, records := postThrough(t, model.URL)
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || !strings.Contains(line, "response.completed") {
		t.Fatalf("the first event: %q %v", line, err)
	}
	resp.Body.Close()
	recs := records()
	if len(recs) != 1 || recs[0].Decision != Allowed || recs[0].Reason != ClientClosed || recs[0].BytesDown == 0 {
		t.Errorf("records %+v, want one allowed, closed by the client, with bytes down", recs)
	}
}

// TestProxyUpstreamBreaksStream: an upstream that breaks off an event
// stream (its connection closed mid-body) breaks off the client's too: the
// client reads an error, never a clean end that would pass the shortened
// stream as whole, and the request is recorded with the upstream's error.
func TestProxyUpstreamBreaksStream(t *testing.T) {
	model := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: {\"type\":\"response.created\"}\n\n")
		w.(http.Flusher).Flush()
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close() // no terminating chunk: the stream is cut
		}
	}))
	defer model.Close()
	resp, records := postThrough(t, model.URL)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err == nil {
		t.Fatalf("the client read a whole stream of %q: want the proxy to break it off as the upstream did", body)
	}
	if !strings.Contains(string(body), "response.created") {
		t.Errorf("the client got %q before the break, want the first event", body)
	}
	recs := records()
	if len(recs) != 1 || recs[0].Decision != Allowed || !strings.HasPrefix(recs[0].Reason, "upstream: ") || recs[0].BytesDown == 0 {
		t.Errorf("records %+v, want one allowed, failed by the upstream, with bytes down", recs)
	}
}

// postThrough posts to the model at modelURL through a proxy that allows
// it, and returns the response and the proxy's records, waited for (up to
// 10s) until there is one: a record is written once its request ends.
func postThrough(t *testing.T, modelURL string) (*http.Response, func() []Record) {
	t.Helper()
	addr, records := proxyFor(t, []string{strings.TrimPrefix(modelURL, "http://")}, nil)
	tr := &http.Transport{Proxy: http.ProxyURL(mustURL("http://" + addr))}
	t.Cleanup(tr.CloseIdleConnections)
	resp, err := (&http.Client{Transport: tr}).Post(modelURL+"/v1/responses", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	return resp, func() []Record {
		var recs []Record
		for deadline := time.Now().Add(10 * time.Second); len(recs) == 0 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			recs = records()
		}
		return recs
	}
}
