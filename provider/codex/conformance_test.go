package codex

import (
	"testing"

	"github.com/nlx-dev/nlx/internal/fakemodel"
	"github.com/nlx-dev/nlx/internal/testtool"
	"github.com/nlx-dev/nlx/provider"
	"github.com/nlx-dev/nlx/provider/providertest"
)

// TestConformance runs the adapter conformance suite against the real
// codex app-server; what nlx sends is checked against the pinned schema
// on every turn.
func TestConformance(t *testing.T) {
	testtool.NeedProvider(t, "codex")
	providertest.Run(t, providertest.Harness{
		Adapter: &Adapter{},
		Start: func(tb testing.TB, model *fakemodel.Server, home, cwd string, turn provider.Turn) (provider.Pipes, func()) {
			p := startCodex(tb, model, home, cwd, turn)
			return p.pipes, func() { p.wait(tb) }
		},
	})
}
