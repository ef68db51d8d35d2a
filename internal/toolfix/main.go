// Command toolfix is the MCP tool server of nlx's tests and benchmark: a
// real MCP server (the official Go SDK) over stdio, or over streamable
// HTTP on a loopback address or a Unix socket, whose echo tool says which
// server answered, and which appends every call it gets to a log file, so
// that a test can prove what reached it and what did not.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

type echoIn struct {
	Text string `json:"text" jsonschema:"the text to echo"`
}

func main() {
	name := flag.String("name", "toolfix", "the server's name, in every answer")
	logPath := flag.String("log", "", "append every call to this file")
	httpAddr := flag.String("http", "", "serve streamable HTTP on this loopback address instead of stdio")
	unixPath := flag.String("unix", "", "serve streamable HTTP on this Unix socket instead of stdio")
	flag.Parse()
	var mu sync.Mutex
	record := func(line string) {
		if *logPath == "" {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		f, err := os.OpenFile(*logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			log.Printf("toolfix: %v", err)
			return
		}
		fmt.Fprintln(f, line)
		f.Close()
	}
	s := mcp.NewServer(&mcp.Implementation{Name: *name, Version: "1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "echo", Description: "Echo a text, naming the server that answered."},
		func(ctx context.Context, r *mcp.CallToolRequest, in echoIn) (*mcp.CallToolResult, any, error) {
			record(*name + " echo " + in.Text)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: *name + ": " + in.Text}}}, nil, nil
		})
	switch {
	case *httpAddr != "" || *unixPath != "":
		h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)
		network, addr := "tcp", *httpAddr
		if *unixPath != "" {
			network, addr = "unix", *unixPath
			os.Remove(addr)
		}
		ln, err := net.Listen(network, addr)
		if err != nil {
			log.Fatal(err)
		}
		if network == "unix" {
			os.Chmod(addr, 0o666)
		}
		fmt.Println(ln.Addr().String())
		log.Fatal(http.Serve(ln, h))
	default:
		if err := s.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
			log.Fatal(err)
		}
	}
}
