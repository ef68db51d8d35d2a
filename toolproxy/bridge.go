package toolproxy

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"github.com/nlx-dev/nlx/internal/fdpass"
)

// BridgeMode is the helper mode nlx runs in inside the sandbox as the
// provider's one MCP server: BRIDGE SOCKET. It hands its stdio over to
// the proxy at SOCKET (or, when they are not pipes, copies them to it and
// back), and exits when the proxy ends the session.
const BridgeMode = "__mcp-bridge"

// Main runs the bridge when os.Args names it; then it never returns.
func Main() {
	if len(os.Args) < 2 || os.Args[1] != BridgeMode {
		return
	}
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: nlx "+BridgeMode+" SOCKET")
		os.Exit(2)
	}
	// A provider's stdio is two pipes: handed over to the proxy, which
	// then reads and writes them itself. Anything else (a file, a
	// terminal) is copied through.
	run := func() error { return Bridge(os.Stdin, os.Stdout, os.Args[2]) }
	if streamFD(int(os.Stdin.Fd())) && streamFD(int(os.Stdout.Fd())) {
		run = func() error { return Handoff(os.Stdin, os.Stdout, os.Args[2]) }
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "nlx tools:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// Handoff connects to the proxy at socket and hands it in and out (the
// provider's pipes: its MCP server's stdio): the proxy reads and writes
// them itself, and closes the connection when the session ends, which
// ends Handoff. Nothing is copied through the bridge.
func Handoff(in, out *os.File, socket string) error {
	c, err := net.DialTimeout("unix", socket, 10*time.Second)
	if err != nil {
		return fmt.Errorf("the tool proxy: %w", err)
	}
	uc := c.(*net.UnixConn)
	defer uc.Close()
	if err := fdpass.Send(uc, handoffByte, int(in.Fd()), int(out.Fd())); err != nil {
		return fmt.Errorf("the tool proxy: hand over the provider's stdio: %w", err)
	}
	_, err = io.Copy(io.Discard, uc)
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

// Bridge connects to the proxy at socket and copies in to it and its
// answers to out, until the proxy closes the connection or in ends.
func Bridge(in io.Reader, out io.Writer, socket string) error {
	c, err := net.DialTimeout("unix", socket, 10*time.Second)
	if err != nil {
		return fmt.Errorf("the tool proxy: %w", err)
	}
	uc := c.(*net.UnixConn)
	defer uc.Close()
	go func() {
		io.Copy(uc, in)
		uc.CloseWrite() // the provider closed our stdin: the proxy ends the session
	}()
	_, err = io.Copy(out, uc)
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}
