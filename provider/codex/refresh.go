package codex

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/nlx-dev/nlx/internal/reason"
	"github.com/nlx-dev/nlx/provider"
)

// A worker's catalog refresh, between turns, through the session's own
// connection (never a new one): config/read, one config/batchWrite of
// nlx's MCP server entry with the version read, config/mcpServer/reload,
// then mcpServerStatus/list, which discovers the server's tools afresh
// from the configuration. Checked on 0.169.0: reload answers {}, and
// applies to a loaded thread at its next turn; a stale expectedVersion is
// JSON-RPC error -32600 with data.config_write_error_code
// configVersionConflict; status list without a threadId starts the
// server anew to list its tools.

var _ provider.ConfigWriter = (*run)(nil)

// The config and MCP methods of a refresh.
const (
	methodConfigRead       method = "config/read"
	methodConfigBatchWrite method = "config/batchWrite"
	methodMCPReload        method = "config/mcpServer/reload"
	methodMCPStatusList    method = "mcpServerStatus/list"
)

// layerUser is the user layer's type in config/read: $CODEX_HOME/config.toml,
// the only layer config writes may edit.
const layerUser = "user"

// mergeUpsert merges an edit's value into what the key path holds.
const mergeUpsert = "upsert"

// writeStatus is config/batchWrite's status.
type writeStatus string

// The write statuses: okOverridden is written but overridden by a layer
// above the user's (a -c flag), which nlx never sets for mcp_servers.
const (
	writeOK         writeStatus = "ok"
	writeOverridden writeStatus = "okOverridden"
)

// configVersionConflict is the config_write_error_code of a stale
// expectedVersion.
const configVersionConflict = "configVersionConflict"

// statusDetail is mcpServerStatus/list's detail: tools, without resources.
const statusDetail = "toolsAndAuthOnly"

type configReadParams struct {
	IncludeLayers bool `json:"includeLayers"`
}

type configLayer struct {
	Name struct {
		Type string `json:"type"`
		File string `json:"file"`
	} `json:"name"`
	Version string `json:"version"`
}

type configReadResult struct {
	Layers []configLayer `json:"layers"`
}

type configEdit struct {
	KeyPath       string `json:"keyPath"`
	Value         any    `json:"value"`
	MergeStrategy string `json:"mergeStrategy"`
}

type configBatchWriteParams struct {
	Edits           []configEdit `json:"edits"`
	ExpectedVersion string       `json:"expectedVersion"`
}

type configWriteResult struct {
	Status   writeStatus `json:"status"`
	Version  string      `json:"version"`
	FilePath string      `json:"filePath"`
}

type mcpStatusListParams struct {
	ServerName string  `json:"serverName,omitempty"`
	Detail     string  `json:"detail,omitempty"`
	Cursor     *string `json:"cursor,omitempty"`
}

type mcpStatusListResult struct {
	Data []struct {
		Name       string                     `json:"name"`
		Tools      map[string]json.RawMessage `json:"tools"`
		ToolsError *string                    `json:"toolsError"`
	} `json:"data"`
	NextCursor *string `json:"nextCursor"`
}

// request sends one request between turns and waits for its answer.
func (r *run) request(ctx context.Context, m method, params any) (message, error) {
	wait, err := r.send(m, params)
	if err != nil {
		return message{}, err
	}
	return wait(ctx)
}

// send sends one request between turns and returns the wait for its
// answer, which reads the session's output until it comes: notifications
// are not a turn's and are dropped; a request of the server's is
// refused. When ctx has ended (before the wait, or while it waits) the
// answer is lost (ErrNoAnswer): it is read and dropped whenever it comes.
func (r *run) send(m method, params any) (func(ctx context.Context) (message, error), error) {
	if !r.initialized || r.thread == "" {
		return nil, fmt.Errorf("codex: the session has no thread yet: nothing to refresh")
	}
	r.call(m, params)
	id := r.nextID
	return func(ctx context.Context) (message, error) {
		lost := func() (message, error) {
			// The request stays pending: its late answer is dropped.
			return message{}, fmt.Errorf("codex did not answer %s: %v: %w", m, context.Cause(ctx), provider.ErrNoAnswer)
		}
		if ctx.Err() != nil {
			return lost()
		}
		for {
			select {
			case in := <-r.in:
				if in.Err != nil {
					return message{}, fmt.Errorf("codex ended before it answered %s: %v: %w", m, in.Err, provider.ErrNoAnswer)
				}
				var msg message
				if json.Unmarshal(in.Bytes, &msg) != nil {
					continue
				}
				hasID := len(msg.ID) > 0 && string(msg.ID) != "null"
				switch {
				case msg.Method != "" && hasID:
					// No turn runs: nothing is asked of anyone.
					r.refuse(msg.ID, errMethodNotFound, "nlx answers nothing between turns")
				case msg.Method == "" && hasID:
					n, err := strconv.ParseInt(string(msg.ID), 10, 64)
					if err != nil {
						continue
					}
					delete(r.pending, n)
					if n == id {
						return msg, nil
					}
				}
			case <-ctx.Done():
				return lost()
			}
		}
	}, nil
}

// ReadConfig reads the user layer's version.
func (r *run) ReadConfig(ctx context.Context) (provider.ConfigVersion, error) {
	m, err := r.request(ctx, methodConfigRead, configReadParams{IncludeLayers: true})
	if err != nil {
		return provider.ConfigVersion{}, err
	}
	if m.Error != nil {
		return provider.ConfigVersion{}, fmt.Errorf("codex refused config/read: %w", m.Error)
	}
	var res configReadResult
	if err := json.Unmarshal(m.Result, &res); err != nil {
		return provider.ConfigVersion{}, fmt.Errorf("codex: config/read: %w", err)
	}
	for _, l := range res.Layers {
		if l.Name.Type == layerUser && l.Version != "" {
			return provider.ConfigVersion{Version: l.Version, File: l.Name.File}, nil
		}
	}
	return provider.ConfigVersion{}, errors.New("codex: config/read names no user layer")
}

// WriteMCPServer sends server's entry (mcp_servers.NAME) with
// config/batchWrite, expecting version.
func (r *run) WriteMCPServer(server provider.MCPServer, version string) (provider.Answer, error) {
	return r.answer(methodConfigBatchWrite, configBatchWriteParams{ExpectedVersion: version,
		Edits: []configEdit{{KeyPath: "mcp_servers." + server.Name, Value: mcpEntry(server), MergeStrategy: mergeUpsert}}},
		func(m message) (string, error) {
			if m.Error != nil {
				var data struct {
					Code string `json:"config_write_error_code"`
				}
				if json.Unmarshal(m.Error.Data, &data) == nil && data.Code == configVersionConflict {
					return "", fmt.Errorf("codex: %s: %w", m.Error.Message, provider.ErrConfigConflict)
				}
				return "", fmt.Errorf("codex refused config/batchWrite: %w", m.Error)
			}
			var res configWriteResult
			if err := json.Unmarshal(m.Result, &res); err != nil || res.Version == "" {
				return "", fmt.Errorf("codex: config/batchWrite answered without a version (%v)", err)
			}
			if res.Status == writeOverridden {
				return res.Version, reason.New(reason.RefreshUnverified, "codex wrote %s, but a layer above it overrides mcp_servers.%s", res.FilePath, server.Name)
			}
			if res.Status != writeOK {
				return res.Version, fmt.Errorf("codex: config/batchWrite status %q", res.Status)
			}
			return res.Version, nil
		})
}

// ReloadMCPServers sends config/mcpServer/reload. The schema has no
// params for it (null), though {} is taken too.
func (r *run) ReloadMCPServers() (provider.Answer, error) {
	return r.answer(methodMCPReload, nil, func(m message) (string, error) {
		if m.Error != nil {
			return "", fmt.Errorf("codex refused config/mcpServer/reload: %w", m.Error)
		}
		return "", nil
	})
}

// answer sends m and returns its Answer: read reads the answer once it
// came.
func (r *run) answer(m method, params any, read func(message) (string, error)) (provider.Answer, error) {
	wait, err := r.send(m, params)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) (string, error) {
		msg, err := wait(ctx)
		if err != nil {
			return "", err
		}
		return read(msg)
	}, nil
}

// MCPServerTools lists server name's tools with mcpServerStatus/list.
func (r *run) MCPServerTools(ctx context.Context, name string) ([]string, error) {
	p := mcpStatusListParams{ServerName: name, Detail: statusDetail}
	var tools []string
	found := false
	for page := 0; page < 100; page++ {
		m, err := r.request(ctx, methodMCPStatusList, p)
		if err != nil {
			return nil, err
		}
		if m.Error != nil {
			return nil, fmt.Errorf("codex refused mcpServerStatus/list: %w", m.Error)
		}
		var res mcpStatusListResult
		if err := json.Unmarshal(m.Result, &res); err != nil {
			return nil, fmt.Errorf("codex: mcpServerStatus/list: %w", err)
		}
		for _, s := range res.Data {
			if s.Name != name {
				continue
			}
			found = true
			if s.ToolsError != nil && *s.ToolsError != "" {
				return nil, fmt.Errorf("codex could not list server %s's tools: %s", name, *s.ToolsError)
			}
			for t := range s.Tools {
				tools = append(tools, t)
			}
		}
		if res.NextCursor == nil || *res.NextCursor == "" {
			break
		}
		p.Cursor = res.NextCursor
	}
	if !found {
		return nil, fmt.Errorf("codex lists no MCP server %s", name)
	}
	slices.Sort(tools)
	return tools, nil
}
