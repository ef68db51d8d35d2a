package egress

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Decision is what the proxy did with a connection.
type Decision string

// The decisions.
const (
	Allowed Decision = "allowed"
	Refused Decision = "refused"
)

// Record is one connection (a CONNECT tunnel, or one forwarded plain-http
// request) as the proxy saw it.
type Record struct {
	Host      string    `json:"host"`
	Port      int       `json:"port"`
	Method    string    `json:"method"`
	Decision  Decision  `json:"decision"`
	Reason    string    `json:"reason,omitempty"` // why it was refused, or how it failed
	Addr      string    `json:"addr,omitempty"`   // the address connected to
	BytesUp   int64     `json:"bytes_up"`         // from the sandbox
	BytesDown int64     `json:"bytes_down"`       // to the sandbox
	Start     time.Time `json:"start"`
	End       time.Time `json:"end"`
}

// ClientClosed is the reason of an allowed request whose client (the
// provider, in the sandbox) closed the connection before the response's
// stream ended.
const ClientClosed = "the client closed the connection before the response ended"

// RefusedHeader carries the reason of a 403 (as Codex's network proxy
// names its x-proxy-error).
const RefusedHeader = "X-Nlx-Egress-Refused"

// Proxy is the host side of a launch's inference egress.
type Proxy struct {
	Policy *Policy
	// Lookup resolves a name (net.DefaultResolver.LookupNetIP when nil):
	// the proxy resolves names itself; nothing inside the sandbox can.
	Lookup func(ctx context.Context, host string) ([]netip.Addr, error)
	// Record receives every connection once it ends (or is refused).
	Record func(Record)

	transport *http.Transport
	once      sync.Once
}

// dialKey carries the decided address to the forwarding transport.
type dialKey struct{}

func (p *Proxy) init() {
	p.once.Do(func() {
		d := &net.Dialer{Timeout: 15 * time.Second, KeepAlive: 30 * time.Second}
		p.transport = &http.Transport{
			Proxy: nil,
			DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
				addr, ok := ctx.Value(dialKey{}).(string)
				if !ok {
					return nil, errors.New("egress: no decided address")
				}
				return d.DialContext(ctx, network, addr)
			},
			// Large reads and writes: a download through the proxy is
			// copied in few system calls.
			ReadBufferSize:        256 << 10,
			WriteBufferSize:       64 << 10,
			MaxIdleConnsPerHost:   8,
			IdleConnTimeout:       90 * time.Second,
			ResponseHeaderTimeout: 0, // a model may think for minutes before its first byte
			DisableCompression:    true,
		}
	})
}

// Serve answers proxy requests on ln until it is closed.
func (p *Proxy) Serve(ln net.Listener) error {
	p.init()
	srv := &http.Server{Handler: p, ReadHeaderTimeout: 30 * time.Second}
	err := srv.Serve(ln)
	if errors.Is(err, net.ErrClosed) || errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

func (p *Proxy) record(r Record) {
	if r.End.IsZero() {
		r.End = time.Now()
	}
	if p.Record != nil {
		p.Record(r)
	}
}

// decide returns the address to connect to for host:port, or why not.
func (p *Proxy) decide(ctx context.Context, host string, port int) (string, string) {
	e, ok := p.Policy.Match(host, port)
	if !ok {
		return "", fmt.Sprintf("%s is not an inference endpoint of this provider", net.JoinHostPort(host, strconv.Itoa(port)))
	}
	if e.Literal.IsValid() {
		// Named literally: whatever its range.
		return netip.AddrPortFrom(e.Literal, uint16(port)).String(), ""
	}
	lookup := p.Lookup
	if lookup == nil {
		lookup = func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	addrs, err := lookup(ctx, e.Host)
	if err != nil {
		return "", fmt.Sprintf("cannot resolve %s: %v", e.Host, err)
	}
	var internal []string
	for _, a := range addrs {
		if Internal(a) {
			internal = append(internal, a.String())
			continue
		}
		return netip.AddrPortFrom(a.Unmap(), uint16(port)).String(), ""
	}
	return "", fmt.Sprintf("%s resolves only to internal addresses (%s), which an entry must name literally", e.Host, strings.Join(internal, ", "))
}

func (p *Proxy) refuse(w http.ResponseWriter, rec Record, why string) {
	rec.Decision, rec.Reason = Refused, why
	w.Header().Set(RefusedHeader, why)
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusForbidden)
	io.WriteString(w, "nlx egress: refused: "+why+"\n")
	p.record(rec)
}

// ServeHTTP handles one proxy request.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.init()
	rec := Record{Method: r.Method, Start: time.Now()}
	if r.Method == http.MethodConnect {
		p.connect(w, r, rec)
		return
	}
	if !r.URL.IsAbs() || r.URL.Scheme != "http" {
		rec.Host = r.Host
		p.refuse(w, rec, "only CONNECT and absolute http:// requests are proxied")
		return
	}
	host, port, ok := hostPort(r.URL.Host, 80)
	rec.Host, rec.Port = host, port
	if !ok {
		p.refuse(w, rec, "no host:port in "+r.URL.Host)
		return
	}
	addr, why := p.decide(r.Context(), host, port)
	if why != "" {
		p.refuse(w, rec, why)
		return
	}
	rec.Decision, rec.Addr = Allowed, addr
	out := r.Clone(context.WithValue(r.Context(), dialKey{}, addr))
	out.RequestURI = ""
	for _, h := range hopHeaders {
		out.Header.Del(h)
	}
	out.Header.Add("Via", "1.1 nlx-egress")
	up := &counter{r: r.Body}
	if r.Body != nil && r.Body != http.NoBody {
		out.Body = up
	}
	resp, err := p.transport.RoundTrip(out)
	if err != nil {
		rec.BytesUp, rec.Reason = up.n.Load(), upstreamFailed+err.Error()
		http.Error(w, "nlx egress: "+rec.Reason, http.StatusBadGateway)
		p.record(rec)
		return
	}
	defer resp.Body.Close()
	for _, h := range hopHeaders {
		resp.Header.Del(h)
	}
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	down := &countWriter{w: w}
	if streaming(resp) {
		// Server-sent events, or a body of unknown length: each piece is
		// passed on as it comes (a model's stream must not wait).
		f, _ := w.(http.Flusher)
		buf := make([]byte, 32<<10)
		for {
			n, err := resp.Body.Read(buf)
			if n > 0 {
				if _, werr := down.Write(buf[:n]); werr != nil {
					break
				}
				if f != nil {
					f.Flush()
				}
			}
			if err != nil {
				switch {
				case err == io.EOF:
				case r.Context().Err() != nil:
					// The sandbox hung up first (a provider that has
					// what it needs, or is ended): not the upstream's
					// failure.
					rec.Reason = ClientClosed
				default:
					rec.Reason = upstreamFailed + err.Error()
				}
				break
			}
		}
	} else if _, err := io.CopyBuffer(down, resp.Body, make([]byte, 256<<10)); err != nil {
		rec.Reason = "copy: " + err.Error()
	}
	rec.BytesDown = down.n
	rec.BytesUp = up.n.Load()
	p.record(rec)
	if strings.HasPrefix(rec.Reason, upstreamFailed) {
		// The upstream broke off a stream whose end only the stream says:
		// ending the response here would pass the client a shortened
		// body as whole. Abort the client's connection instead, as the
		// upstream's was. (A body with a length is cut short visibly.)
		panic(http.ErrAbortHandler)
	}
}

// upstreamFailed begins the reason of a request the upstream failed.
const upstreamFailed = "upstream: "

// streaming reports whether resp is passed on piece by piece, flushed as
// it comes: an event stream, or a body without a length.
func streaming(resp *http.Response) bool {
	return resp.ContentLength < 0 || strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream")
}

// countWriter counts what is written through it.
type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n += int64(n)
	return n, err
}

// hopHeaders are the hop-by-hop headers a proxy never forwards.
var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade"}

func (p *Proxy) connect(w http.ResponseWriter, r *http.Request, rec Record) {
	host, port, ok := hostPort(r.Host, 0)
	rec.Host, rec.Port = host, port
	if !ok {
		p.refuse(w, rec, "CONNECT needs host:port, not "+r.Host)
		return
	}
	addr, why := p.decide(r.Context(), host, port)
	if why != "" {
		p.refuse(w, rec, why)
		return
	}
	rec.Decision, rec.Addr = Allowed, addr
	up, err := (&net.Dialer{Timeout: 15 * time.Second}).DialContext(r.Context(), "tcp", addr)
	if err != nil {
		rec.Reason = upstreamFailed + err.Error()
		http.Error(w, "nlx egress: "+rec.Reason, http.StatusBadGateway)
		p.record(rec)
		return
	}
	defer up.Close()
	hj, ok := w.(http.Hijacker)
	if !ok {
		rec.Reason = "cannot take over the connection"
		http.Error(w, "nlx egress: "+rec.Reason, http.StatusInternalServerError)
		p.record(rec)
		return
	}
	client, buf, err := hj.Hijack()
	if err != nil {
		rec.Reason = "hijack: " + err.Error()
		p.record(rec)
		return
	}
	defer client.Close()
	io.WriteString(client, "HTTP/1.1 200 Connection established\r\n\r\n")
	// Whatever the client sent after its CONNECT is already buffered.
	var fromClient io.Reader = client
	if n := buf.Reader.Buffered(); n > 0 {
		pending, _ := buf.Reader.Peek(n)
		fromClient = io.MultiReader(strings.NewReader(string(pending)), client)
	}
	rec.BytesUp, rec.BytesDown = splice(client, fromClient, up)
	p.record(rec)
}

// splice copies both ways until either side ends, and returns the bytes
// each way (client to upstream, upstream to client).
func splice(client net.Conn, fromClient io.Reader, up net.Conn) (upBytes, downBytes int64) {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		upBytes, _ = io.Copy(up, fromClient)
		closeWrite(up)
	}()
	downBytes, _ = io.Copy(client, up)
	closeWrite(client)
	wg.Wait()
	return upBytes, downBytes
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
		return
	}
	c.Close()
}

// hostPort splits an authority, with def as the port when none is given
// (0: a port is required).
func hostPort(authority string, def int) (string, int, bool) {
	host, port, err := net.SplitHostPort(authority)
	if err != nil {
		if def == 0 || authority == "" {
			return authority, 0, false
		}
		return strings.Trim(authority, "[]"), def, true
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 1 || p > 65535 || host == "" {
		return host, 0, false
	}
	return host, p, true
}

// counter counts what is read through it.
type counter struct {
	r io.ReadCloser
	n atomic.Int64
}

func (c *counter) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.n.Add(int64(n))
	return n, err
}

func (c *counter) Close() error { return c.r.Close() }
