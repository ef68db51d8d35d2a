package claude

import (
	"testing"
	"time"

	"github.com/nlx-dev/nlx/internal/fakemodel"
	"github.com/nlx-dev/nlx/internal/testtool"
	"github.com/nlx-dev/nlx/provider"
	"github.com/nlx-dev/nlx/provider/providertest"
)

// TestConformance runs the adapter conformance suite against the real
// Claude Code. Its exit status is not the suite's business: Claude Code
// exits 1 after a failed or interrupted turn.
func TestConformance(t *testing.T) {
	testtool.NeedProvider(t, "claude")
	providertest.Run(t, providertest.Harness{
		Adapter: &Adapter{},
		Start: func(tb testing.TB, model *fakemodel.Server, home, cwd string, turn provider.Turn) (provider.Pipes, func()) {
			p := startClaude(tb, model, home, cwd, turn)
			return p.pipes, func() {
				done := make(chan struct{})
				go func() { p.cmd.Wait(); close(done) }()
				select {
				case <-done:
				case <-time.After(10 * time.Second):
					p.cmd.Process.Kill()
					<-done
					tb.Errorf("claude did not exit within 10s of its stdin closing")
				}
				p.waited = true
			}
		},
	})
}
