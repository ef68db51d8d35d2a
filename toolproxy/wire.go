package toolproxy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"sync"

	"github.com/nlx-dev/nlx/internal/jsonrpc"
)

// The MCP wire, as the proxy speaks it on both sides: JSON-RPC 2.0
// messages, one JSON object a line on a stream (stdio, the sandbox's
// socket). The proxy reads only a message's envelope and the members it
// acts on; params and results pass through as they are.

// message is any JSON-RPC message: a request (ID and Method), a
// notification (Method only) or a response (ID, and Result or Error).
type message struct {
	ID     json.RawMessage `json:"id,omitempty"`
	Method string          `json:"method,omitempty"`
	Params json.RawMessage `json:"params,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  *rpcError       `json:"error,omitempty"`
}

func (m *message) isRequest() bool      { return m.Method != "" && hasID(m.ID) }
func (m *message) isNotification() bool { return m.Method != "" && !hasID(m.ID) }
func (m *message) isResponse() bool     { return m.Method == "" && hasID(m.ID) }

func hasID(id json.RawMessage) bool { return len(id) > 0 && string(id) != "null" }

// rpcError is a JSON-RPC error object.
type rpcError = jsonrpc.Error

// The JSON-RPC error codes the proxy answers with.
const (
	errParse          = jsonrpc.ParseError
	errInvalidRequest = jsonrpc.InvalidRequest
	errMethodNotFound = jsonrpc.MethodNotFound
	errInvalidParams  = jsonrpc.InvalidParams
	errInternal       = jsonrpc.InternalError
)

// The MCP methods the proxy serves or sends.
const (
	methodInitialize       = "initialize"
	methodInitialized      = "notifications/initialized"
	methodPing             = "ping"
	methodToolsList        = "tools/list"
	methodToolsCall        = "tools/call"
	methodCancelled        = "notifications/cancelled"
	methodToolsListChanged = "notifications/tools/list_changed"
)

// maxLine bounds one message: a tool's result may be large (a file's
// contents), never unbounded.
const maxLine = 32 << 20

// errLineTooLong is a message over maxLine: the stream cannot be read on.
var errLineTooLong = errors.New("an MCP message is longer than 32 MiB")

// lineReader reads one message a line.
type lineReader struct {
	r *bufio.Reader
}

func newLineReader(r io.Reader) *lineReader { return &lineReader{r: bufio.NewReaderSize(r, 64<<10)} }

// next returns the next non-empty line, without its newline. The slice
// is the reader's until the next call.
func (l *lineReader) next() ([]byte, error) {
	for {
		line, err := l.r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			// A long line: gather it whole, bounded.
			buf := append([]byte(nil), line...)
			for errors.Is(err, bufio.ErrBufferFull) {
				if len(buf) > maxLine {
					return nil, errLineTooLong
				}
				line, err = l.r.ReadSlice('\n')
				buf = append(buf, line...)
			}
			line = buf
		}
		if trimmed := bytes.TrimSpace(line); len(trimmed) > 0 {
			return trimmed, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// lineWriter writes messages a line each, one at a time.
type lineWriter struct {
	mu sync.Mutex
	w  io.Writer
}

// write writes the parts of one message and its newline in one write.
func (l *lineWriter) write(parts ...[]byte) error {
	buf := append(concat(parts...), '\n')
	l.mu.Lock()
	defer l.mu.Unlock()
	_, err := l.w.Write(buf)
	return err
}

// concat is parts joined, with room for a newline.
func concat(parts ...[]byte) []byte {
	n := 1
	for _, p := range parts {
		n += len(p)
	}
	buf := make([]byte, 0, n)
	for _, p := range parts {
		buf = append(buf, p...)
	}
	return buf
}

// The pieces of the messages the proxy writes by hand: a response's
// envelope around a result passed through untouched.
var (
	resultHead = []byte(`{"jsonrpc":"2.0","id":`)
	resultMid  = []byte(`,"result":`)
	errorMid   = []byte(`,"error":`)
	closeBrace = []byte(`}`)
)

// writeResult answers request id with a raw result.
func (l *lineWriter) writeResult(id, result json.RawMessage) error {
	return l.write(resultHead, id, resultMid, result, closeBrace)
}

// writeError answers request id with an error.
func (l *lineWriter) writeError(id json.RawMessage, code int64, msg string, data any) error {
	e := rpcError{Code: code, Message: msg}
	if data != nil {
		if b, err := json.Marshal(data); err == nil {
			e.Data = b
		}
	}
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	return l.write(resultHead, id, errorMid, b, closeBrace)
}

// writeMessage writes v, encoded.
func (l *lineWriter) writeMessage(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return l.write(b)
}

// request is a request the proxy sends.
type request struct {
	JSONRPC string `json:"jsonrpc"`
	ID      int64  `json:"id"`
	Method  string `json:"method"`
	Params  any    `json:"params,omitempty"`
}

// notification is a notification the proxy sends.
type notification struct {
	JSONRPC string `json:"jsonrpc"`
	Method  string `json:"method"`
	Params  any    `json:"params,omitempty"`
}

const jsonrpcVersion = "2.0"

// callParams are a tools/call's params: the name the proxy routes by, the
// rest passed on as they came.
type callParams struct {
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
	Meta      json.RawMessage `json:"_meta,omitempty"`
}

// appendCall is a tools/call request to an upstream server: id, its own
// tool name, and the provider's arguments and _meta as they came.
func appendCall(id int64, name string, args, meta json.RawMessage) []byte {
	b := make([]byte, 0, 96+len(name)+len(args)+len(meta))
	b = append(b, `{"jsonrpc":"2.0","id":`...)
	b = strconv.AppendInt(b, id, 10)
	b = append(b, `,"method":"tools/call","params":{"name":`...)
	quoted, _ := json.Marshal(name) // a string always encodes
	b = append(b, quoted...)
	if len(args) > 0 {
		b = append(b, `,"arguments":`...)
		b = append(b, args...)
	}
	if len(meta) > 0 {
		b = append(b, `,"_meta":`...)
		b = append(b, meta...)
	}
	return append(b, "}}"...)
}
