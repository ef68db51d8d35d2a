package providertest

import (
	"bytes"
	"io"
	"sync"

	"github.com/nlx-dev/nlx/provider"
)

// Tap returns pipes over a program's stdin and stdout that pass every
// complete line, as it goes by, to sent (what nlx wrote) and received
// (what the program wrote): the adapters' tests keep transcripts so.
func Tap(stdin io.WriteCloser, stdout io.Reader, sent, received func(line []byte)) provider.Pipes {
	return provider.Pipes{
		Stdin:  &tappedStdin{w: stdin, tap: &lineTap{add: sent}},
		Stdout: io.TeeReader(stdout, &lineTap{add: received}),
	}
}

// lineTap calls add for every complete line written through it.
type lineTap struct {
	mu  sync.Mutex
	buf []byte
	add func([]byte)
}

func (l *lineTap) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		l.add(l.buf[:i])
		l.buf = l.buf[i+1:]
	}
}

// tappedStdin is the program's stdin, recording every line written.
type tappedStdin struct {
	w   io.WriteCloser
	tap *lineTap
}

func (s *tappedStdin) Write(p []byte) (int, error) {
	s.tap.Write(p)
	return s.w.Write(p)
}

func (s *tappedStdin) Close() error { return s.w.Close() }
