// Package jsonrpc holds what nlx's JSON-RPC 2.0 peers share (the Codex
// app-server client and the MCP tool proxy): the error object and the
// error codes the specification reserves.
package jsonrpc

import (
	"encoding/json"
	"fmt"
)

// Error is a JSON-RPC error object.
type Error struct {
	Code    int64           `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
}

func (e *Error) Error() string { return fmt.Sprintf("%s (JSON-RPC error %d)", e.Message, e.Code) }

// The error codes JSON-RPC 2.0 reserves.
const (
	ParseError     = -32700
	InvalidRequest = -32600
	MethodNotFound = -32601
	InvalidParams  = -32602
	InternalError  = -32603
)
