package isolate

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nlx-dev/nlx/state"
)

// BenchmarkLaunch measures launch to exit of /bin/true through isolate
// (spec, cgroup, identity record, launch, wait, stop receipt) against the
// same bubblewrap command line (its seccomp program and bind handles
// included) and the same runc bundle run raw from Go, without cgroup or
// identity. Each iteration runs one raw launch and one isolated launch,
// alternating which goes first, so that a noisy machine slows both alike;
// the sub-benchmark reports the median of each (nlx-ms, raw-ms) and their
// ratio (x-raw). For bubblewrap it also runs the command line without the
// seccomp filter and with every source bound by path (bare-ms), so that
// what the filter and the handles cost bubblewrap shows on its own.
//
//	go test ./isolate -run '^$' -bench . -benchtime 30x
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

	db, err := stateDB(b)
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	// The launch as nlx exec makes it records its identity and receipt in
	// a real SQLite state on disk ("bwrap", "runc"); with an in-memory
	// recorder ("bwrap-memory", "runc-memory") the same launch shows what
	// those two transactions cost.
	type variant struct {
		name string
		be   Backend
		rec  Recorder
	}
	var variants []variant
	for _, be := range backends {
		variants = append(variants, variant{string(be), be, stateRecorder{db}}, variant{string(be) + "-memory", be, &fakeRecorder{}})
	}
	for _, v := range variants {
		be, rec := v.be, v.rec
		b.Run(v.name, func(b *testing.B) {
			needBackend(b, be)
			req := req
			req.Backend = be
			raw, cleanup := rawLaunch(b, be, req, state, false)
			defer cleanup()
			isolated := func() error {
				p, err := Launch(ctx, req, Options{Recorder: rec, StateDir: state})
				if err != nil {
					return err
				}
				st, err := p.Wait(ctx)
				if err != nil || st.ExitCode() != 0 {
					return fmt.Errorf("wait: %v %v", st, err)
				}
				_, err = Stop(ctx, p.Identity, time.Second, rec)
				return err
			}
			var rawT, nlxT []time.Duration
			timed := func(run func() error, into *[]time.Duration) {
				t0 := time.Now()
				if err := run(); err != nil {
					b.Fatal(err)
				}
				*into = append(*into, time.Since(t0))
			}
			i := 0
			for b.Loop() {
				if i%2 == 0 {
					timed(raw, &rawT)
					timed(isolated, &nlxT)
				} else {
					timed(isolated, &nlxT)
					timed(raw, &rawT)
				}
				i++
			}
			r, n := medianDuration(rawT), medianDuration(nlxT)
			b.ReportMetric(float64(n.Microseconds())/1e3, "nlx-ms")
			b.ReportMetric(float64(r.Microseconds())/1e3, "raw-ms")
			b.ReportMetric(float64(n)/float64(r), "x-raw")
		})
	}
}

// BenchmarkBwrapFilter is what the seccomp filter and the bind handles
// cost bubblewrap itself: its command line as nlx runs it against the same
// without the filter and with every source bound by path (bare-ms),
// interleaved as BenchmarkLaunch is.
func BenchmarkBwrapFilter(b *testing.B) {
	needBackend(b, Bwrap)
	f := newFixture(b)
	req := f.request(Bwrap, WorkspaceWrite, "/bin/true")
	full, c1 := rawLaunch(b, Bwrap, req, b.TempDir(), false)
	defer c1()
	bare, c2 := rawLaunch(b, Bwrap, req, b.TempDir(), true)
	defer c2()
	runs := []func() error{full, bare}
	times := make([][]time.Duration, 2)
	i := 0
	for b.Loop() {
		for j := range 2 {
			k := (i + j) % 2 // which goes first alternates
			t0 := time.Now()
			if err := runs[k](); err != nil {
				b.Fatal(err)
			}
			times[k] = append(times[k], time.Since(t0))
		}
		i++
	}
	fm, bm := medianDuration(times[0]), medianDuration(times[1])
	b.ReportMetric(float64(fm.Microseconds())/1e3, "filtered-ms")
	b.ReportMetric(float64(bm.Microseconds())/1e3, "bare-ms")
	b.ReportMetric(float64(fm-bm)/float64(bm), "x-extra")
}

// rawLaunch returns a function that runs req's sandbox with the backend
// alone: bwrap with the arguments and descriptors nlx would give it (with
// bare, no seccomp filter and every source bound by path), runc on a bundle
// of the compiled spec whose container cgroup runc makes and removes
// itself.
func rawLaunch(b testing.TB, be Backend, req Request, state string, bare bool) (func() error, func()) {
	s, h, err := compile(req)
	if err != nil {
		b.Fatal(err)
	}
	path, err := exec.LookPath(string(be))
	if err != nil {
		b.Fatal(err)
	}
	if be == Bwrap {
		cred := bwrapCredential(s)
		if bare {
			s.Linux.Seccomp = nil
			s.Linux.ReadonlyPaths = slices.DeleteFunc(s.Linux.ReadonlyPaths, func(p string) bool { return strings.HasPrefix(p, WorkspacePath+"/") })
		}
		return func() error {
			var pass []*os.File
			fds := bwrapFDs{seccomp: -1}
			if !bare {
				var err error
				if pass, fds, err = bwrapPass(s, h); err != nil {
					return err
				}
				defer pass[0].Close()
			}
			args, err := bwrapArgs(s, fds)
			if err != nil {
				return err
			}
			cmd := exec.Command(path, args...)
			cmd.ExtraFiles = append([]*os.File{nil, nil}, pass...)
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setsid: true}
			if out, err := cmd.CombinedOutput(); err != nil {
				return fmt.Errorf("%s: %v: %s", be, err, out)
			}
			return nil
		}, h.close
	}
	h.close()
	run := func(args ...string) error {
		if out, err := exec.Command(path, args...).CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %v: %s", be, err, out)
		}
		return nil
	}
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
	i := 0
	return func() error {
			i++
			return run(runcRunArgs(filepath.Join(dir, "state"), bundle, fmt.Sprintf("raw-%d", i))...)
		}, func() {
			if host, err := loadCgroupHost(); err == nil {
				if cg, err := openCgroup(host, parent); err == nil {
					cg.remove(context.Background())
				}
			}
		}
}

func medianDuration(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// stateDB is a real SQLite state on disk, as nlx exec records launches in.
func stateDB(b *testing.B) (*state.DB, error) {
	return state.Open(context.Background(), filepath.Join(b.TempDir(), "state.db"), state.Options{})
}

// stateRecorder records identities and receipts in the state as nlx exec
// does (launch.Recorder, which isolate's tests cannot import).
type stateRecorder struct{ db *state.DB }

func (r stateRecorder) Record(ctx context.Context, id Identity) error {
	data, err := json.Marshal(id)
	if err != nil {
		return err
	}
	return r.db.RecordProcess(ctx, state.ProcessRow{LaunchID: id.LaunchID, Workspace: id.Workspace, PID: id.PID,
		StartedAt: id.Started.UTC().Format(time.RFC3339Nano), Identity: string(data)})
}

func (r stateRecorder) Receipt(ctx context.Context, launchID string, rc Receipt) error {
	data, err := json.Marshal(rc)
	if err != nil {
		return err
	}
	return r.db.StopProcess(ctx, launchID, string(data), rc.Stopped.UTC().Format(time.RFC3339Nano))
}
