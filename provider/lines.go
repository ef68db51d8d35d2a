package provider

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
)

// Both provider programs speak one JSON message per line over their
// stdio: these read and write such lines for the adapters.

// MaxLine bounds one line of a program's output.
const MaxLine = 64 << 20

// ErrLineTooLong is ReadLines' error for a line over MaxLine.
var ErrLineTooLong = errors.New("a line longer than 64 MiB")

// Line is one non-blank line of a program's output, or how its output
// ended (Err, io.EOF at the end).
type Line struct {
	Bytes []byte
	Err   error
}

// ReadLines sends each non-blank line of out to in, then how out ended,
// until stop is closed.
func ReadLines(out io.Reader, in chan<- Line, stop <-chan struct{}) {
	send := func(v Line) bool {
		select {
		case in <- v:
			return true
		case <-stop:
			return false
		}
	}
	br := bufio.NewReaderSize(out, 64<<10)
	for {
		line, err := readLine(br)
		if len(bytes.TrimSpace(line)) > 0 && !send(Line{Bytes: line}) {
			return
		}
		if err != nil {
			send(Line{Err: err})
			return
		}
	}
}

func readLine(br *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > MaxLine {
			return nil, ErrLineTooLong
		}
		if err != bufio.ErrBufferFull {
			return line, err
		}
	}
}

// ErrStdinClosed is LineWriter.Send's error once the program's stdin is
// closed.
var ErrStdinClosed = errors.New("the program's stdin is closed")

// LineWriter writes messages to a program's stdin, one JSON line each,
// from any goroutine. Name prefixes its errors.
type LineWriter struct {
	Name string
	W    io.WriteCloser

	mu     sync.Mutex
	closed bool
}

// Send writes v as one line.
func (w *LineWriter) Send(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("%s: encode: %w", w.Name, err)
	}
	b = append(b, '\n')
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return fmt.Errorf("%s: %w", w.Name, ErrStdinClosed)
	}
	if _, err := w.W.Write(b); err != nil {
		return fmt.Errorf("%s: write to stdin: %w", w.Name, err)
	}
	return nil
}

// Close closes stdin, once.
func (w *LineWriter) Close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.closed {
		w.closed = true
		w.W.Close()
	}
}
