package launch

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"

	"github.com/nlx-dev/nlx/internal/reason"
	"github.com/nlx-dev/nlx/reconcile"
	"github.com/nlx-dev/nlx/schema"
)

// Tool is a tool (an MCP server) a launch's workspace may use.
type Tool struct {
	Name string
	Spec schema.Tool
	// Hash is the applied spec's: a changed tool is started anew.
	Hash string
}

// Tools reads the tools a launch of workspace on connection may use now,
// from the applied state, sorted by name: each tool the applied workspace
// is granted that is applied and active, a team tool of the workspace's
// team, a personal tool only in a personal workspace, its owner's, on its
// owner's connection. A personal tool is never a team workspace's, and
// whatever is not applied, held or unreadable is not granted (fail
// closed): the workspace or connection gone, or held, grants nothing.
// grant is a digest of the names and specs: it changes exactly when the
// grant does.
func Tools(ctx context.Context, st Applied, workspace, connection string) (tools []Tool, grant string, err error) {
	var w schema.Workspace
	var c schema.Connection
	for _, r := range []struct {
		kind schema.Kind
		name string
		v    any
	}{{schema.KindWorkspace, workspace, &w}, {schema.KindConnection, connection, &c}} {
		if err := read(ctx, st, r.kind, r.name, r.v); err != nil {
			if e := reason.Of(err); e != nil && e.Code != reason.Failure {
				return nil, grantDigest(nil), nil
			}
			return nil, "", err
		}
	}
	if c.Workspace != workspace {
		return nil, grantDigest(nil), nil
	}
	names := slices.Clone(w.Tools)
	slices.Sort(names)
	names = slices.Compact(names)
	for _, name := range names {
		addr := string(schema.KindTool) + "." + name
		spec, status, found, err := st.AppliedSpec(ctx, addr)
		if err != nil {
			return nil, "", err
		}
		var t schema.Tool
		if !found || status != reconcile.StatusActive || json.Unmarshal(spec, &t) != nil {
			continue // not granted: not applied, held, or unreadable
		}
		switch t.Scope {
		case "team":
			if t.Owner != w.Team {
				continue
			}
		case "personal":
			if w.Kind != "personal" || t.Owner != w.Owner || t.Owner != c.Owner {
				continue
			}
		default:
			continue
		}
		tools = append(tools, Tool{Name: name, Spec: t, Hash: reconcile.HashSpec(spec)})
	}
	return tools, grantDigest(tools), nil
}

// grantDigest is sha256:HEX of the tools' names and spec hashes.
func grantDigest(tools []Tool) string {
	h := sha256.New()
	for _, t := range tools {
		h.Write([]byte(t.Name))
		h.Write([]byte{0})
		h.Write([]byte(t.Hash))
		h.Write([]byte{0})
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}
