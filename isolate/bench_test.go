package isolate

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkLaunch measures launch to exit of /bin/true through isolate
// (spec, cgroup, identity record, launch, wait, stop receipt) against the
// same bubblewrap command line and the same runc bundle run raw from Go,
// without cgroup or identity, in the same run. The isolate sub-benchmarks
// report x-raw, their ratio to the raw one measured just before.
//
//	go test ./isolate -run '^$' -bench . -benchtime 20x
func BenchmarkLaunch(b *testing.B) {
	f := newFixture(b)
	// Bundles and runc state on tmpfs for both sides, as /run is on Debian
	// and Raspberry Pi OS (not on every VM).
	state, err := os.MkdirTemp("/dev/shm", "nlx-bench-")
	if err != nil {
		state = b.TempDir()
	} else {
		defer os.RemoveAll(state)
	}
	req := f.request(Auto, WorkspaceWrite, "/bin/true")
	req.Limits = Limits{MemoryBytes: 256 << 20, CPU: 1, Pids: 64}
	ctx := context.Background()
	raw := map[Backend]float64{}

	isolated := func(be Backend) func(*testing.B) {
		return func(b *testing.B) {
			needBackend(b, be)
			req := req
			req.Backend = be
			rec := &fakeRecorder{}
			for b.Loop() {
				p, err := Launch(ctx, req, Options{Recorder: rec, StateDir: state})
				if err != nil {
					b.Fatal(err)
				}
				st, err := p.Wait(ctx)
				if err != nil || st.ExitCode() != 0 {
					b.Fatalf("wait: %v %v", st, err)
				}
				if _, err := Stop(ctx, p.Identity, time.Second, rec); err != nil {
					b.Fatal(err)
				}
			}
			perOp := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
			if r := raw[be]; r > 0 {
				b.ReportMetric(perOp/r, "x-raw")
			}
		}
	}

	b.Run("bwrap-raw", func(b *testing.B) {
		needBackend(b, Bwrap)
		s, err := Compile(req)
		if err != nil {
			b.Fatal(err)
		}
		args, err := bwrapArgs(s)
		if err != nil {
			b.Fatal(err)
		}
		path, _ := exec.LookPath("bwrap")
		for b.Loop() {
			if out, err := exec.Command(path, args...).CombinedOutput(); err != nil {
				b.Fatalf("%v: %s", err, out)
			}
		}
		raw[Bwrap] = float64(b.Elapsed().Nanoseconds()) / float64(b.N)
	})
	b.Run("bwrap", isolated(Bwrap))

	b.Run("runc-raw", func(b *testing.B) {
		needBackend(b, Runc)
		s, err := Compile(req)
		if err != nil {
			b.Fatal(err)
		}
		// runc creates and removes the container cgroup itself.
		parent := DefaultCgroupParent + "/bench-raw-" + newID()
		s.Linux.CgroupsPath = parent + "/" + containerLeaf
		dir, err := os.MkdirTemp(state, "raw-")
		if err != nil {
			b.Fatal(err)
		}
		bundle := filepath.Join(dir, "bundle")
		if err := writeBundle(bundle, s); err != nil {
			b.Fatal(err)
		}
		path, _ := exec.LookPath("runc")
		i := 0
		for b.Loop() {
			i++
			args := runcRunArgs(filepath.Join(dir, "state"), bundle, fmt.Sprintf("raw-%d", i))
			if out, err := exec.Command(path, args...).CombinedOutput(); err != nil {
				b.Fatalf("%v: %s", err, out)
			}
		}
		raw[Runc] = float64(b.Elapsed().Nanoseconds()) / float64(b.N)
		b.StopTimer()
		if host, err := loadCgroupHost(); err == nil {
			if cg, err := openCgroup(host, parent); err == nil {
				cg.remove(ctx)
			}
		}
	})
	b.Run("runc", isolated(Runc))
	if os.Getenv("NLX_BENCH_VERBOSE") != "" {
		b.Logf("raw ns/op: %v", raw)
	}
}
