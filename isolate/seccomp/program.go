package seccomp

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"runtime"
	"slices"
	"sort"
	"sync"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// The compiler is nlx's own, on golang.org/x/net/bpf's instruction types
// and assembler. github.com/elastic/go-seccomp-bpf was the candidate: it
// compiles argument conditions, but only for runtime.GOARCH (its arch is an
// unexported field), has no masked equality with a non-zero value, answers
// x32 with ENOSYS and a foreign architecture with the default action
// (neither chosen here), and its arm64 table names syscall 79 "fstatat"
// where Docker and libseccomp say "newfstatat", which would deny stat(2).

// badArch is what a syscall of another ABI gets: i386 (int 0x80) and x32
// on amd64, 32-bit arm on arm64. Killing the process, not EPERM: such a
// call from a native process is an attempt to get past the filter, and a
// foreign-ABI program would only spin on EPERM (exit_group included). runc
// compiles the same profile with libseccomp, whose bad-architecture action
// is SCMP_ACT_KILL: it kills the thread, not the process.
const badArch = unix.SECCOMP_RET_KILL_PROCESS

// retENOSYS answers a syscall numbered above every syscall the profile
// names, as runc does (its -ENOSYS stub): such a call is newer than the
// profile, and libc falls back from ENOSYS where it would fail on EPERM.
const retENOSYS = unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)

// maxErrno is the largest errno the kernel returns as such (MAX_ERRNO).
const maxErrno = 4095

// seccomp_data: int nr; u32 arch; u64 instruction_pointer; u64 args[6].
const (
	offNr   = 0
	offArch = 4
	offArgs = 16
)

// Program compiles p into a classic BPF seccomp program for the running
// architecture, as the raw struct sock_filter array (native byte order)
// bubblewrap reads from --seccomp FD. The program decides as the kernel
// decides on the same profile compiled by runc with libseccomp:
//
//   - a syscall of another architecture or ABI is killed (badArch);
//   - a number above every syscall the profile names gets ENOSYS;
//   - otherwise the profile's rules apply: rules for one syscall with the
//     same action are alternatives, the conditions of one rule all hold,
//     arguments compare as 64-bit values; a rule whose action is the
//     default is dropped, as runc drops it; a name the architecture does
//     not have is skipped when the default denies (as runc skips it);
//   - anything else gets the default action.
//
// What it cannot express is an error, not a looser program: actions other
// than allow, errno, kill, trap and log; architectures but the native one;
// filter flags; a listener; one syscall with two different actions; one
// argument compared twice in a rule (runc would split such a rule into
// alternatives); an errno above 4095; more than 4096 instructions.
//
// Compiled programs are cached per process by the profile's content; each
// call returns a copy.
func Program(p *specs.LinuxSeccomp) ([]byte, error) {
	if p == nil {
		return nil, fmt.Errorf("seccomp: no profile")
	}
	a, err := archFor(runtime.GOARCH)
	if err != nil {
		return nil, err
	}
	key, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("seccomp: profile: %w", err)
	}
	programs.Lock()
	b, ok := programs.m[string(key)]
	programs.Unlock()
	if ok {
		return slices.Clone(b), nil
	}
	ins, err := compile(p, a)
	if err != nil {
		return nil, err
	}
	b, err = encode(ins)
	if err != nil {
		return nil, err
	}
	programs.Lock()
	if len(programs.m) >= maxCached {
		clear(programs.m)
	}
	programs.m[string(key)] = b
	programs.Unlock()
	return slices.Clone(b), nil
}

// maxCached bounds the cache: nlx uses one profile; a caller that builds
// many would otherwise grow it without end.
const maxCached = 8

var programs = struct {
	sync.Mutex
	m map[string][]byte
}{m: map[string][]byte{}}

// encode assembles ins into struct sock_filter records. Both supported
// architectures are little-endian.
func encode(ins []bpf.Instruction) ([]byte, error) {
	raw, err := bpf.Assemble(ins)
	if err != nil {
		return nil, fmt.Errorf("seccomp: assemble: %w", err)
	}
	b := make([]byte, 0, 8*len(raw))
	for _, r := range raw {
		b = binary.LittleEndian.AppendUint16(b, r.Op)
		b = append(b, r.Jt, r.Jf)
		b = binary.LittleEndian.AppendUint32(b, r.K)
	}
	return b, nil
}

// condition is one argument comparison.
type condition struct {
	index    uint
	op       specs.LinuxSeccompOperator
	value    uint64
	valueTwo uint64
}

// decision is what one syscall number gets: ret when any of alts holds
// (an empty alternative always holds), otherwise the default.
type decision struct {
	ret  uint32
	alts [][]condition
}

func (d *decision) unconditional() bool {
	return slices.ContainsFunc(d.alts, func(c []condition) bool { return len(c) == 0 })
}

func (d *decision) equal(e *decision) bool {
	if d == nil || e == nil {
		return d == e
	}
	if d.ret != e.ret || d.unconditional() != e.unconditional() {
		return false
	}
	if d.unconditional() {
		return true
	}
	return slices.EqualFunc(d.alts, e.alts, func(x, y []condition) bool { return slices.Equal(x, y) })
}

// compile builds the program for a.
func compile(p *specs.LinuxSeccomp, a *arch) ([]bpf.Instruction, error) {
	def, err := ret(p.DefaultAction, p.DefaultErrnoRet)
	if err != nil {
		return nil, fmt.Errorf("seccomp: default action: %w", err)
	}
	for _, x := range p.Architectures {
		if x != a.scmp {
			return nil, fmt.Errorf("seccomp: architecture %s: the program is for %s only", x, a.scmp)
		}
	}
	if len(p.Flags) > 0 {
		return nil, fmt.Errorf("seccomp: filter flags %v cannot be passed to bubblewrap", p.Flags)
	}
	if p.ListenerPath != "" || p.ListenerMetadata != "" {
		return nil, fmt.Errorf("seccomp: a seccomp listener cannot be compiled")
	}
	defDenies := def != unix.SECCOMP_RET_ALLOW && def != unix.SECCOMP_RET_LOG

	decisions := map[uint32]*decision{}
	var maxNr uint32
	named := false
	for i, s := range p.Syscalls {
		r, err := ret(s.Action, s.ErrnoRet)
		if err != nil {
			return nil, fmt.Errorf("seccomp: rule %d (%v): %w", i, s.Names, err)
		}
		conds, err := conditions(s.Args)
		if err != nil {
			return nil, fmt.Errorf("seccomp: rule %d (%v): %w", i, s.Names, err)
		}
		for _, name := range s.Names {
			nr, ok := a.lookup(name)
			if !ok {
				if defDenies {
					continue
				}
				return nil, fmt.Errorf("seccomp: %s has no syscall %s, and the default allows", a.goarch, name)
			}
			if !named || nr > maxNr {
				maxNr, named = nr, true
			}
			if r == def {
				continue
			}
			d := decisions[nr]
			if d == nil {
				d = &decision{ret: r}
				decisions[nr] = d
			}
			if d.ret != r {
				return nil, fmt.Errorf("seccomp: %s has rules with two actions (%#x, %#x)", name, d.ret, r)
			}
			d.alts = append(d.alts, conds)
		}
	}

	// runc prepends its ENOSYS stub unless the default allows or its
	// errno is already ENOSYS.
	stub := named && defDenies && (p.DefaultErrnoRet == nil || *p.DefaultErrnoRet != uint(unix.ENOSYS))

	// Ranges of syscall numbers, each with one decision (nil: the
	// default), merged where neighbours decide alike. Every number with a
	// decision is named, so none is above maxNr.
	var ranges []nrRange
	add := func(lo uint32, d *decision) {
		if n := len(ranges); n == 0 || !ranges[n-1].d.equal(d) {
			ranges = append(ranges, nrRange{lo: lo, d: d})
		}
	}
	for nr := uint32(0); nr <= maxNr; nr++ {
		add(nr, decisions[nr])
	}
	if stub {
		add(maxNr+1, &decision{ret: retENOSYS, alts: [][]condition{nil}})
	} else {
		add(maxNr+1, nil)
	}

	prog := []bpf.Instruction{
		bpf.LoadAbsolute{Off: offArch, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: a.audit, SkipTrue: 1},
		bpf.RetConstant{Val: badArch},
		bpf.LoadAbsolute{Off: offNr, Size: 4},
	}
	if a.x32 {
		prog = append(prog,
			bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: x32Bit, SkipFalse: 1},
			bpf.RetConstant{Val: badArch},
		)
	}
	tree, err := search(ranges, def)
	if err != nil {
		return nil, err
	}
	prog = append(prog, tree...)
	if len(prog) > unix.BPF_MAXINSNS {
		return nil, fmt.Errorf("seccomp: program has %d instructions, the kernel takes %d", len(prog), unix.BPF_MAXINSNS)
	}
	return prog, nil
}

// nrRange is syscall numbers from lo up to the next range's lo.
type nrRange struct {
	lo uint32
	d  *decision
}

// search is a binary search over ranges on the syscall number (in A),
// ending in each range's decision. Every path ends in a return, and jumps
// are relative, so subtrees are concatenated as they are.
func search(ranges []nrRange, def uint32) ([]bpf.Instruction, error) {
	if len(ranges) == 1 {
		return leaf(ranges[0].d, def)
	}
	mid := len(ranges) / 2
	lo, err := search(ranges[:mid], def)
	if err != nil {
		return nil, err
	}
	hi, err := search(ranges[mid:], def)
	if err != nil {
		return nil, err
	}
	var out []bpf.Instruction
	if len(lo) <= 255 {
		out = append(out, bpf.JumpIf{Cond: bpf.JumpGreaterOrEqual, Val: ranges[mid].lo, SkipTrue: uint8(len(lo))})
	} else {
		out = append(out,
			bpf.JumpIf{Cond: bpf.JumpGreaterOrEqual, Val: ranges[mid].lo, SkipFalse: 1},
			bpf.Jump{Skip: uint32(len(lo))},
		)
	}
	out = append(out, lo...)
	return append(out, hi...), nil
}

// leaf is one range's decision: each alternative's conditions, failing to
// the next alternative, then the default.
func leaf(d *decision, def uint32) ([]bpf.Instruction, error) {
	if d == nil {
		return []bpf.Instruction{bpf.RetConstant{Val: def}}, nil
	}
	if d.unconditional() {
		return []bpf.Instruction{bpf.RetConstant{Val: d.ret}}, nil
	}
	var b block
	for _, alt := range d.alts {
		fail := b.newLabel()
		for _, c := range alt {
			next := b.newLabel()
			c.emit(&b, next, fail)
			b.mark(next)
		}
		b.add(bpf.RetConstant{Val: d.ret})
		b.mark(fail)
	}
	b.add(bpf.RetConstant{Val: def})
	return b.resolve()
}

// emit tests c: on to t when it holds, to f when not. The argument's low
// word is at its offset, the high word 4 bytes on (little-endian).
func (c condition) emit(b *block, t, f label) {
	lo := uint32(offArgs + 8*c.index)
	hi := lo + 4
	vhi, vlo := uint32(c.value>>32), uint32(c.value)
	ld := func(off uint32) { b.add(bpf.LoadAbsolute{Off: off, Size: 4}) }
	next := b.newLabel
	switch c.op {
	case specs.OpEqualTo, specs.OpNotEqual:
		yes, no := t, f
		if c.op == specs.OpNotEqual {
			yes, no = f, t
		}
		n := next()
		ld(hi)
		b.jumpIf(bpf.JumpEqual, vhi, n, no)
		b.mark(n)
		ld(lo)
		b.jumpIf(bpf.JumpEqual, vlo, yes, no)
	case specs.OpGreaterThan, specs.OpGreaterEqual:
		// hi > vhi, or hi == vhi and lo > (>=) vlo.
		n1, n2 := next(), next()
		ld(hi)
		b.jumpIf(bpf.JumpGreaterThan, vhi, t, n1)
		b.mark(n1)
		b.jumpIf(bpf.JumpEqual, vhi, n2, f)
		b.mark(n2)
		ld(lo)
		cmp := bpf.JumpGreaterThan
		if c.op == specs.OpGreaterEqual {
			cmp = bpf.JumpGreaterOrEqual
		}
		b.jumpIf(cmp, vlo, t, f)
	case specs.OpLessThan, specs.OpLessEqual:
		// The negation of >= (>).
		n1, n2 := next(), next()
		ld(hi)
		b.jumpIf(bpf.JumpGreaterThan, vhi, f, n1)
		b.mark(n1)
		b.jumpIf(bpf.JumpEqual, vhi, n2, t)
		b.mark(n2)
		ld(lo)
		cmp := bpf.JumpGreaterOrEqual
		if c.op == specs.OpLessEqual {
			cmp = bpf.JumpGreaterThan
		}
		b.jumpIf(cmp, vlo, f, t)
	case specs.OpMaskedEqual:
		// (arg & value) == valueTwo, word by word; a zero mask word needs
		// no load.
		for i, w := range []struct{ off, mask, want uint32 }{
			{hi, vhi, uint32(c.valueTwo >> 32)},
			{lo, vlo, uint32(c.valueTwo)},
		} {
			yes := t
			if i == 0 {
				yes = next()
			}
			switch {
			case w.mask == 0 && w.want != 0:
				b.jump(f)
			case w.mask == 0:
				b.jump(yes)
			default:
				ld(w.off)
				b.add(bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: w.mask})
				b.jumpIf(bpf.JumpEqual, w.want, yes, f)
			}
			if i == 0 {
				b.mark(yes)
			}
		}
	}
}

// conditions validates a rule's arguments.
func conditions(args []specs.LinuxSeccompArg) ([]condition, error) {
	out := make([]condition, 0, len(args))
	seen := map[uint]bool{}
	for _, a := range args {
		if a.Index > 5 {
			return nil, fmt.Errorf("argument index %d (a syscall has 6)", a.Index)
		}
		if seen[a.Index] {
			return nil, fmt.Errorf("argument %d compared twice (runc would make the comparisons alternatives)", a.Index)
		}
		seen[a.Index] = true
		switch a.Op {
		case specs.OpNotEqual, specs.OpLessThan, specs.OpLessEqual, specs.OpEqualTo,
			specs.OpGreaterEqual, specs.OpGreaterThan, specs.OpMaskedEqual:
		default:
			return nil, fmt.Errorf("operator %q", a.Op)
		}
		out = append(out, condition{index: a.Index, op: a.Op, value: a.Value, valueTwo: a.ValueTwo})
	}
	// The order does not change the result; sorting lets equal rules
	// written differently share a range.
	sort.Slice(out, func(i, j int) bool { return out[i].index < out[j].index })
	return out, nil
}

// ret is the filter's return value for an action.
func ret(act specs.LinuxSeccompAction, errnoRet *uint) (uint32, error) {
	switch act {
	case specs.ActAllow:
		return unix.SECCOMP_RET_ALLOW, nil
	case specs.ActLog:
		return unix.SECCOMP_RET_LOG, nil
	case specs.ActErrno:
		e := uint(unix.EPERM)
		if errnoRet != nil {
			e = *errnoRet
		}
		if e > maxErrno {
			return 0, fmt.Errorf("errno %d is above %d", e, maxErrno)
		}
		return unix.SECCOMP_RET_ERRNO | uint32(e), nil
	case specs.ActKill, specs.ActKillThread:
		return unix.SECCOMP_RET_KILL_THREAD, nil
	case specs.ActKillProcess:
		return unix.SECCOMP_RET_KILL_PROCESS, nil
	case specs.ActTrap:
		return unix.SECCOMP_RET_TRAP, nil
	}
	return 0, fmt.Errorf("action %q cannot be compiled for bubblewrap", act)
}

// block assembles a leaf with forward jumps to labels.
type block struct {
	ins    []bpf.Instruction
	labels []int // label -> instruction index; -1 until marked
	fixes  []fix
}

type label int

type fix struct {
	at   int
	t, f label
	long bool // an unconditional jump (bpf.Jump) to t
}

func (b *block) newLabel() label {
	b.labels = append(b.labels, -1)
	return label(len(b.labels) - 1)
}

func (b *block) mark(l label) { b.labels[l] = len(b.ins) }

func (b *block) add(i bpf.Instruction) { b.ins = append(b.ins, i) }

func (b *block) jumpIf(cond bpf.JumpTest, k uint32, t, f label) {
	b.fixes = append(b.fixes, fix{at: len(b.ins), t: t, f: f})
	b.add(bpf.JumpIf{Cond: cond, Val: k})
}

func (b *block) jump(t label) {
	b.fixes = append(b.fixes, fix{at: len(b.ins), t: t, long: true})
	b.add(bpf.Jump{})
}

func (b *block) resolve() ([]bpf.Instruction, error) {
	skip := func(at int, l label) (int, error) {
		to := b.labels[l]
		if to < 0 {
			return 0, fmt.Errorf("seccomp: internal error: unmarked label")
		}
		n := to - at - 1
		if n < 0 {
			return 0, fmt.Errorf("seccomp: internal error: backward jump")
		}
		return n, nil
	}
	for _, x := range b.fixes {
		st, err := skip(x.at, x.t)
		if err != nil {
			return nil, err
		}
		if x.long {
			b.ins[x.at] = bpf.Jump{Skip: uint32(st)}
			continue
		}
		sf, err := skip(x.at, x.f)
		if err != nil {
			return nil, err
		}
		if st > 255 || sf > 255 {
			return nil, fmt.Errorf("seccomp: a syscall's conditions need a jump of %d instructions (at most 255)", max(st, sf))
		}
		j := b.ins[x.at].(bpf.JumpIf)
		j.SkipTrue, j.SkipFalse = uint8(st), uint8(sf)
		b.ins[x.at] = j
	}
	return b.ins, nil
}
