package toolproxy

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"
)

// BridgeMode is the helper mode nlx runs in inside the sandbox as the
// provider's one MCP server: BRIDGE SOCKET. It copies its stdio to the
// proxy's socket and back, and exits when either side ends.
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
	if err := Bridge(os.Stdin, os.Stdout, os.Args[2]); err != nil {
		fmt.Fprintln(os.Stderr, "nlx tools:", err)
		os.Exit(1)
	}
	os.Exit(0)
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
