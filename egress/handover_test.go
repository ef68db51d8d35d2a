package egress

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestHandover: a connection the bridge accepts is handed to the proxy,
// which serves the socket itself: the bridge's part is over (its copies
// closed) before the client's exchange begins, and the exchange, a
// CONNECT tunnel, runs whole. A client of the proxy's socket that hands
// nothing over (an HTTP request on the Unix connection) is served there,
// its first byte put back.
func TestHandover(t *testing.T) {
	upstream, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer upstream.Close()
	go func() {
		for {
			c, err := upstream.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				line, _ := bufio.NewReader(c).ReadString('\n')
				fmt.Fprintf(c, "echo %s", line)
			}()
		}
	}()
	pol, err := NewPolicy([]string{upstream.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	records := make(chan Record, 4)
	socket := filepath.Join(t.TempDir(), "egress.sock")
	ln, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	hl := newHandoverListener(ln)
	defer hl.Close()
	go (&Proxy{Policy: pol, Record: func(r Record) { records <- r }}).Serve(hl)

	// The bridge: one connection accepted, handed over.
	bridge, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer bridge.Close()
	bridged := make(chan struct{})
	go func() {
		c, err := bridge.Accept()
		if err != nil {
			return
		}
		bridgeConn(c, socket)
		close(bridged)
	}()
	client, err := net.Dial("tcp", bridge.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	select {
	case <-bridged:
	case <-time.After(10 * time.Second):
		t.Fatal("the bridge still holds the connection: it was not handed over")
	}
	fmt.Fprintf(client, "CONNECT %s HTTP/1.1\r\nHost: %[1]s\r\n\r\nhello\n", upstream.Addr())
	r := bufio.NewReader(client)
	status, _ := r.ReadString('\n')
	if !strings.Contains(status, " 200 ") {
		t.Fatalf("CONNECT through the handed-over socket: %q", status)
	}
	for line, _ := r.ReadString('\n'); line != "\r\n"; line, _ = r.ReadString('\n') {
		if line == "" {
			t.Fatal("the tunnel ended before its header did")
		}
	}
	if echo, _ := r.ReadString('\n'); echo != "echo hello\n" {
		t.Errorf("through the tunnel: %q, want the upstream's echo", echo)
	}
	client.Close()
	select {
	case rec := <-records:
		if rec.Decision != Allowed || rec.Method != http.MethodConnect || rec.BytesUp == 0 || rec.BytesDown == 0 {
			t.Errorf("record %+v, want an allowed CONNECT with bytes each way", rec)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no record")
	}

	// No handover: a request on the Unix connection itself.
	tr := &http.Transport{Proxy: http.ProxyURL(mustURL("http://egress.sock")),
		Dial: func(string, string) (net.Conn, error) { return net.Dial("unix", socket) }}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Get("http://refused.example/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(body), "not an inference endpoint") {
		t.Errorf("a request on the socket itself: %d %q, want the proxy's refusal", resp.StatusCode, body)
	}
}
