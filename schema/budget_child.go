package schema

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"

	"golang.org/x/sys/unix"
)

// ServeChild must be the first thing main (and the TestMain of any package
// whose tests call LoadBudgeted) does. In the load child LoadBudgeted starts
// it loads the config under the budget, hands the result to the parent and
// exits; otherwise it returns at once.
func ServeChild() {
	if os.Getenv(childEnv) != "1" {
		serving.Store(true)
		return
	}
	os.Exit(serveChild(os.Args))
}

// serveChild is the child: argv is childArg0 DIR MEMORY CPU-SECONDS STACK.
// Its stderr goes to the parent only, which reads the runtime's reason for
// a fatal error there and shows nobody the trace.
func serveChild(argv []string) int {
	debug.SetTraceback("none")
	fail := func(format string, args ...any) int {
		fmt.Fprintf(os.Stderr, "panic: "+format+"\n", args...)
		return 1
	}
	if len(argv) != 5 {
		return fail("config load child: %d arguments", len(argv))
	}
	var n [3]int64
	for i, a := range argv[2:] {
		v, err := strconv.ParseInt(a, 10, 64)
		if err != nil || v < 0 {
			return fail("config load child: argument %q", a)
		}
		n[i] = v
	}
	memory, cpu, stack := n[0], n[1], n[2]
	if cpu > 0 {
		// SIGXCPU at the soft limit; Go ignores it unless asked, so say so
		// and exit. The hard limit a second later is the kernel's SIGKILL.
		xcpu := make(chan os.Signal, 1)
		signal.Notify(xcpu, unix.SIGXCPU)
		go func() {
			<-xcpu
			os.Exit(exitCPU)
		}()
		if err := setLimit(unix.RLIMIT_CPU, uint64(cpu), uint64(cpu)+1); err != nil {
			return fail("config load child: RLIMIT_CPU: %v", err)
		}
	}
	if memory > 0 {
		// RLIMIT_DATA, not RLIMIT_AS: the Go runtime reserves far more
		// address space than it uses (a 200 MiB load has ~1.7 GB of it,
		// more on some platforms), while private writable mappings are
		// what it actually allocates. The soft limit of the garbage
		// collector keeps a big but legitimate heap under the hard one.
		if err := setLimit(unix.RLIMIT_DATA, dataLimit(memory), dataLimit(memory)); err != nil {
			return fail("config load child: RLIMIT_DATA: %v", err)
		}
		debug.SetMemoryLimit(memory / 8 * 7)
	}
	if stack > 0 {
		debug.SetMaxStack(int(min(stack, int64(^uint(0)>>1))))
	}
	cfg, err := LoadWith(context.Background(), argv[1], Options{})
	out := os.NewFile(resultFD, "result")
	if _, werr := out.Write(encodeResult(cfg, err)); werr != nil {
		return fail("config load child: write the result: %v", werr)
	}
	// The parent takes the result at end of file. Closing it now, not at
	// exit, spares the parent the wait for the kernel to tear down the
	// evaluation's memory, tens of milliseconds for a large config.
	if werr := out.Close(); werr != nil {
		return fail("config load child: write the result: %v", werr)
	}
	return 0
}

// setLimit lowers a resource limit to soft and hard, never above the hard
// limit the process already has (which it could not raise).
func setLimit(resource int, soft, hard uint64) error {
	var cur unix.Rlimit
	if err := unix.Getrlimit(resource, &cur); err != nil {
		return err
	}
	hard = min(hard, cur.Max)
	return unix.Setrlimit(resource, &unix.Rlimit{Cur: min(soft, hard), Max: hard})
}

// dataLimit is RLIMIT_DATA for a memory budget. Under the race detector (in
// tests: go test -race) the process starts with ~300 MB of shadow and maps
// several times what the program maps on top, so the budget is scaled to
// keep what the program itself may use about the same.
func dataLimit(memory int64) uint64 {
	if raceDetector {
		return uint64(memory)*8 + 1<<30
	}
	return uint64(memory)
}
