package main

import (
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"
	"golang.org/x/term"

	"github.com/nlx-dev/nlx/images"
	"github.com/nlx-dev/nlx/internal/bytesize"
)

// progress shows long work on stderr while results go to stdout: on a
// terminal a live line per step (mpb), elsewhere one line as each step
// begins and one as it ends, so a CI log says what nlx is doing and how
// long each step took.
type progress struct {
	w    io.Writer
	live *mpb.Progress // nil off a terminal

	mu    sync.Mutex // guards steps; never held while calling mpb
	steps map[string]*liveStep
}

// liveStep is one step under way.
type liveStep struct {
	begun   time.Time
	bar     *mpb.Bar
	outcome atomic.Value // string: how it ended, shown on its live line
}

// newProgress returns the progress of a command; Wait it before the
// command prints its result.
func (a *app) newProgress() *progress {
	p := &progress{w: a.io.Err, steps: map[string]*liveStep{}}
	if a.io.ErrTerminal && termWidth(a.io.Err) > 0 {
		p.live = mpb.New(mpb.WithOutput(a.io.Err), mpb.WithWidth(32), mpb.WithRefreshRate(120*time.Millisecond))
	}
	return p
}

// Wait ends the live lines (they stay on the terminal as a record).
func (p *progress) Wait() {
	if p.live != nil {
		p.live.Wait()
	}
}

// Step is images' progress callback for one build step.
func (p *progress) Step(s images.Step) {
	name := fmt.Sprintf("image %s %s: %s", s.Image, s.Platform, s.Layer)
	if !s.Done {
		st := &liveStep{begun: time.Now()}
		st.outcome.Store("")
		p.mu.Lock()
		p.steps[name] = st
		p.mu.Unlock()
		if p.live == nil {
			fmt.Fprintf(p.w, "%s: building\n", name)
			return
		}
		st.bar = p.live.New(1, mpb.SpinnerStyle(), mpb.BarFillerClearOnComplete(),
			mpb.PrependDecorators(decor.Name(name+" ")),
			mpb.AppendDecorators(decor.Any(func(decor.Statistics) string { return st.outcome.Load().(string) })))
		return
	}
	p.mu.Lock()
	st := p.steps[name]
	delete(p.steps, name)
	p.mu.Unlock()
	if st == nil {
		st = &liveStep{begun: time.Now()}
	}
	took := time.Since(st.begun).Round(100 * time.Millisecond)
	outcome := fmt.Sprintf("built, %s in %s", bytesize.Human(s.Size), took)
	switch {
	case s.Err != nil:
		outcome = "failed (the error follows)"
	case s.Cached:
		outcome = fmt.Sprintf("cached, %s", bytesize.Human(s.Size))
	}
	if st.bar == nil {
		fmt.Fprintf(p.w, "%s: %s\n", name, outcome)
		return
	}
	st.outcome.Store(outcome)
	st.bar.SetCurrent(1) // the spinner goes; the line stays, with the outcome
}

// Push shows a push's bytes: a live bar on a terminal, the start and the
// end elsewhere. The returned channel takes go-containerregistry's
// updates; done waits for the last line.
func (p *progress) Push(ref string) (chan v1.Update, func()) {
	ch := make(chan v1.Update, 16)
	finished := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(finished)
		var bar *mpb.Bar
		var last v1.Update
		if p.live == nil {
			fmt.Fprintf(p.w, "push %s: started\n", ref)
		}
		for u := range ch {
			last = u
			if p.live == nil || u.Total == 0 {
				continue
			}
			if bar == nil {
				bar = p.live.New(u.Total, mpb.BarStyle(),
					mpb.PrependDecorators(decor.Name("push "+ref+" ")),
					mpb.AppendDecorators(decor.CountersKibiByte("% .1f / % .1f")))
			}
			bar.SetCurrent(u.Complete)
		}
		if bar != nil {
			bar.SetTotal(last.Total, true)
		}
		if p.live == nil {
			fmt.Fprintf(p.w, "push %s: %s pushed in %s\n", ref, bytesize.Human(last.Complete), time.Since(start).Round(100*time.Millisecond))
		}
	}()
	return ch, func() { <-finished }
}

// termWidth is the width of the terminal w writes to, 0 when unknown (a
// pseudo-terminal nobody sized shows no live lines: it gets the lines a
// log gets).
func termWidth(w io.Writer) int {
	f, ok := w.(*os.File)
	if !ok {
		return 0
	}
	width, _, err := term.GetSize(int(f.Fd()))
	if err != nil {
		return 0
	}
	return width
}

// Line reports one step of long work as a line on stderr, terminal or not
// (preservation steps are few and long: a line each says enough).
func (p *progress) Line(s string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintln(p.w, s)
}
