package main

import (
	"github.com/nlx-dev/nlx/provider"
	"github.com/nlx-dev/nlx/provider/claude"
	"github.com/nlx-dev/nlx/provider/codex"
)

// adapters are the provider programs nlx can drive, by kind.
func adapters() map[provider.Kind]provider.Adapter {
	return map[provider.Kind]provider.Adapter{
		provider.KindCodex:  &codex.Adapter{},
		provider.KindClaude: &claude.Adapter{},
	}
}
