package main

import (
	"context"
	"io"
	"os"
	"testing"
	"time"

	"github.com/nlx-dev/nlx/plan"
	"github.com/nlx-dev/nlx/reconcile"
	"github.com/nlx-dev/nlx/reconcile/state"
	"github.com/nlx-dev/nlx/schema"
)

func TestPhases(t *testing.T) {
	ctx := context.Background()
	t0 := time.Now()
	cfg, err := schema.Load(ctx, "/tmp/fleet")
	if err != nil {
		t.Fatal(err)
	}
	t1 := time.Now()
	os.RemoveAll("/tmp/ph")
	db, _ := state.Open(ctx, "/tmp/ph/s.db", state.Options{})
	snap, _ := db.Snapshot(ctx)
	t2 := time.Now()
	p, _ := reconcile.Plan(reconcile.PlanInput{Config: cfg, Snapshot: snap})
	t3 := time.Now()
	plan.WriteFile("/tmp/ph/p.json", p)
	t4 := time.Now()
	plan.View{Format: plan.FormatText}.Render(io.Discard, p)
	t5 := time.Now()
	t.Logf("load %v state %v plan %v write %v render %v", t1.Sub(t0), t2.Sub(t1), t3.Sub(t2), t4.Sub(t3), t5.Sub(t4))
}
