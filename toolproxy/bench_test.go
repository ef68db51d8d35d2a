package toolproxy

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"os"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The cost of one tool call through the proxy, against the same MCP
// server (the official Go SDK, in process over a pipe pair, as a stdio
// server's program would be) called directly by the same raw client.
// The proxied client is on the proxy's socket, as nlx's bridge connects
// it; the bridge's own hop (stdio to the socket) is go run ./bench -only
// tools's.

// rawClient is a minimal MCP client: newline-delimited JSON-RPC, one
// request at a time.
type rawClient struct {
	w   io.Writer
	r   *bufio.Reader
	id  int64
	buf []byte
}

func newRawClient(r io.Reader, w io.Writer) *rawClient {
	return &rawClient{w: w, r: bufio.NewReaderSize(r, 64<<10)}
}

// request sends method with params and returns its response's line.
func (c *rawClient) request(method, params string) ([]byte, error) {
	c.id++
	c.buf = append(c.buf[:0], `{"jsonrpc":"2.0","id":`...)
	c.buf = strconv.AppendInt(c.buf, c.id, 10)
	c.buf = append(c.buf, `,"method":"`...)
	c.buf = append(c.buf, method...)
	c.buf = append(c.buf, `","params":`...)
	c.buf = append(c.buf, params...)
	c.buf = append(c.buf, "}\n"...)
	if _, err := c.w.Write(c.buf); err != nil {
		return nil, err
	}
	want := append([]byte(`"id":`), strconv.AppendInt(nil, c.id, 10)...)
	for {
		line, err := c.r.ReadSlice('\n')
		if err != nil {
			return nil, err
		}
		// A response has our id and no method (a notification or a
		// request from the server is skipped).
		if bytes.Contains(line, want) && !bytes.Contains(line, []byte(`"method"`)) {
			return line, nil
		}
	}
}

func (c *rawClient) notify(method string) error {
	_, err := io.WriteString(c.w, `{"jsonrpc":"2.0","method":"`+method+`"}`+"\n")
	return err
}

// initialize opens the MCP session.
func (c *rawClient) initialize() error {
	if _, err := c.request(methodInitialize, `{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"bench","version":"0"}}`); err != nil {
		return err
	}
	return c.notify(methodInitialized)
}

// benchCalls makes b.N echo calls of tool through c, each checked.
func benchCalls(b *testing.B, c *rawClient, tool, want string) {
	b.Helper()
	if err := c.initialize(); err != nil {
		b.Fatal(err)
	}
	params := `{"name":"` + tool + `","arguments":{"text":"x"}}`
	// The first call starts the proxy's server: not measured.
	if line, err := c.request(methodToolsCall, params); err != nil || !bytes.Contains(line, []byte(want)) {
		b.Fatalf("first call: %s (%v)", line, err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		line, err := c.request(methodToolsCall, params)
		if err != nil {
			b.Fatal(err)
		}
		if !bytes.Contains(line, []byte(want)) {
			b.Fatalf("call %d: %s", i, line)
		}
	}
}

func BenchmarkCallDirect(b *testing.B) {
	ts := newTestServer("files", "echo")
	upR, upW := io.Pipe()     // client -> server
	downR, downW := io.Pipe() // server -> client
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = ts.srv.Run(ctx, &mcp.IOTransport{Reader: upR, Writer: downW})
		downW.Close()
	}()
	defer func() {
		upW.Close()
		cancel()
		<-done
	}()
	benchCalls(b, newRawClient(downR, upW), "echo", `"files: x"`)
}

func BenchmarkCallProxied(b *testing.B) {
	ts := newTestServer("files", "echo")
	cat := &catalog{}
	cat.set(ts.server("1"))
	var calls atomic.Int64
	p, err := Start(Options{Base: b.TempDir(), UID: os.Getuid(), GID: os.Getgid(), Catalog: cat,
		Record: func(Call) { calls.Add(1) }, Version: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Stop()
	c, err := net.Dial("unix", p.Socket())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	benchCalls(b, newRawClient(c, c), "files"+Separator+"echo", `"files: x"`)
	b.StopTimer()
	if calls.Load() == 0 {
		b.Fatal("no call was recorded")
	}
}
