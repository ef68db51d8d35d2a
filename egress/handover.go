package egress

import (
	"errors"
	"net"
	"os"
	"sync"
	"time"

	"github.com/nlx-dev/nlx/internal/fdpass"
)

// The bridge hands each connection it accepts to the proxy: the accepted
// socket's descriptor goes over the proxy's Unix socket (SCM_RIGHTS, with
// one byte), and the proxy serves the provider's socket itself. The
// bridge's copy is off the path, and a CONNECT tunnel splices between two
// TCP sockets. A connection that carries no descriptor (the bridge could
// not hand it over, or a client of the socket itself) is served on the
// Unix connection, as before.

// handoverByte is the byte that carries the descriptor.
const handoverByte = 'H'

// firstReadWait bounds how long the proxy waits for a connection's first
// byte (a handover is sent at once; a request begins at once).
const firstReadWait = 30 * time.Second

// handOver sends c's socket to the proxy over up. On success c and up
// can be closed: the proxy holds the socket.
func handOver(c net.Conn, up net.Conn) error {
	tc, ok := c.(*net.TCPConn)
	uc, ok2 := up.(*net.UnixConn)
	if !ok || !ok2 {
		return errors.New("handover: not a TCP connection over a Unix socket")
	}
	f, err := tc.File()
	if err != nil {
		return err
	}
	defer f.Close()
	return fdpass.Send(uc, handoverByte, int(f.Fd()))
}

// handoverListener accepts on a Unix socket and yields, for each
// connection, the socket handed over on it, or the connection itself with
// its first byte put back. Each first read runs apart, so that a client
// that writes nothing holds up no other.
type handoverListener struct {
	ln    net.Listener
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
	err   error // why it stopped, written before done is closed
}

func newHandoverListener(ln net.Listener) *handoverListener {
	l := &handoverListener{ln: ln, conns: make(chan net.Conn), done: make(chan struct{})}
	go l.loop()
	return l
}

func (l *handoverListener) loop() {
	for {
		c, err := l.ln.Accept()
		if err != nil {
			l.stop(err)
			return
		}
		go func() {
			nc := receive(c)
			if nc == nil {
				return
			}
			select {
			case l.conns <- nc:
			case <-l.done:
				nc.Close()
			}
		}()
	}
}

// Accept returns the next connection.
func (l *handoverListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, l.err
	}
}

// Close stops accepting.
func (l *handoverListener) Close() error {
	l.stop(net.ErrClosed)
	return l.ln.Close()
}

// stop ends Accept with err, the first time.
func (l *handoverListener) stop(err error) {
	l.once.Do(func() {
		l.err = err
		close(l.done)
	})
}

// Addr is the Unix socket's address.
func (l *handoverListener) Addr() net.Addr { return l.ln.Addr() }

// receive reads c's first byte: with a descriptor, the socket handed
// over (c is closed); without, c with that byte put back. nil when c
// ended or failed first.
func receive(c net.Conn) net.Conn {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return c
	}
	uc.SetReadDeadline(time.Now().Add(firstReadWait))
	first, fds, err := fdpass.Receive(uc)
	uc.SetReadDeadline(time.Time{})
	if err != nil || len(first) == 0 {
		fdpass.Close(fds)
		c.Close()
		return nil
	}
	if len(fds) == 0 {
		return &prefixed{Conn: c, first: first}
	}
	fdpass.Close(fds[1:])
	c.Close()
	f := os.NewFile(uintptr(fds[0]), "handed-over")
	defer f.Close()
	nc, err := net.FileConn(f)
	if err != nil || first[0] != handoverByte {
		if nc != nil {
			nc.Close()
		}
		return nil
	}
	return nc
}

// prefixed is a connection whose first bytes were read already.
type prefixed struct {
	net.Conn
	first []byte
}

func (p *prefixed) Read(b []byte) (int, error) {
	if len(p.first) > 0 {
		n := copy(b, p.first)
		p.first = p.first[n:]
		return n, nil
	}
	return p.Conn.Read(b)
}
