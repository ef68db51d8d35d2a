package seccomp

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// input is a struct seccomp_data.
type input struct {
	nr, arch uint32
	ip       uint64
	args     [6]uint64
}

// kernelBytes is the struct as the kernel lays it out on amd64 and arm64
// (little-endian).
func (in input) kernelBytes() []byte {
	b := make([]byte, 64)
	binary.LittleEndian.PutUint32(b[0:], in.nr)
	binary.LittleEndian.PutUint32(b[4:], in.arch)
	binary.LittleEndian.PutUint64(b[8:], in.ip)
	for i, a := range in.args {
		binary.LittleEndian.PutUint64(b[16+8*i:], a)
	}
	return b
}

// vmBytes turns the kernel's bytes into what x/net/bpf's VM must see: the
// VM loads words big-endian (network order), the kernel natively. The
// program only loads aligned words (checkInstructions), so swapping each
// word's bytes makes every load see the kernel's value.
func vmBytes(k []byte) []byte {
	b := slices.Clone(k)
	for i := 0; i < len(b); i += 4 {
		b[i], b[i+1], b[i+2], b[i+3] = b[i+3], b[i+2], b[i+1], b[i]
	}
	return b
}

// oracle decides as the kernel does with the profile compiled by runc
// and libseccomp (with nlx's bad-architecture action), written from the
// rules' meaning, not from the compiler's data structures.
type oracle struct {
	p      *specs.LinuxSeccomp
	a      *arch
	def    uint32
	stub   bool
	maxNr  uint32
	byName map[string][]int // name -> rule indices, in order
}

func newOracle(t testing.TB, p *specs.LinuxSeccomp, a *arch) *oracle {
	o := &oracle{p: p, a: a, byName: map[string][]int{}}
	o.def = mustRet(t, p.DefaultAction, p.DefaultErrnoRet)
	named := false
	for i, s := range p.Syscalls {
		for _, n := range s.Names {
			o.byName[n] = append(o.byName[n], i)
			if nr, ok := a.lookup(n); ok {
				named = true
				o.maxNr = max(o.maxNr, nr)
			}
		}
	}
	allowish := p.DefaultAction == specs.ActAllow || p.DefaultAction == specs.ActLog
	enosys := p.DefaultErrnoRet != nil && *p.DefaultErrnoRet == uint(unix.ENOSYS)
	o.stub = named && !allowish && !enosys
	return o
}

func mustRet(t testing.TB, act specs.LinuxSeccompAction, e *uint) uint32 {
	t.Helper()
	switch act {
	case specs.ActAllow:
		return 0x7fff0000
	case specs.ActLog:
		return 0x7ffc0000
	case specs.ActErrno:
		if e == nil {
			return 0x00050000 | 1
		}
		return 0x00050000 | uint32(*e)
	case specs.ActKill, specs.ActKillThread:
		return 0
	case specs.ActKillProcess:
		return 0x80000000
	case specs.ActTrap:
		return 0x00030000
	}
	t.Fatalf("oracle: action %s", act)
	return 0
}

func (o *oracle) decide(t testing.TB, in input) uint32 {
	if in.arch != o.a.audit {
		return 0x80000000
	}
	if o.a.x32 && in.nr&0x40000000 != 0 {
		return 0x80000000
	}
	if o.stub && in.nr > o.maxNr {
		return 0x00050000 | 38
	}
	name, ok := o.a.byNr[in.nr]
	if !ok {
		return o.def
	}
	for _, i := range o.byName[name] {
		s := o.p.Syscalls[i]
		r := mustRet(t, s.Action, s.ErrnoRet)
		if r == o.def {
			continue // runc drops rules whose action is the default
		}
		if holds(s.Args, in.args) {
			return r
		}
	}
	return o.def
}

func holds(conds []specs.LinuxSeccompArg, args [6]uint64) bool {
	for _, c := range conds {
		a := args[c.Index]
		var ok bool
		switch c.Op {
		case specs.OpNotEqual:
			ok = a != c.Value
		case specs.OpLessThan:
			ok = a < c.Value
		case specs.OpLessEqual:
			ok = a <= c.Value
		case specs.OpEqualTo:
			ok = a == c.Value
		case specs.OpGreaterEqual:
			ok = a >= c.Value
		case specs.OpGreaterThan:
			ok = a > c.Value
		case specs.OpMaskedEqual:
			ok = a&c.Value == c.ValueTwo
		}
		if !ok {
			return false
		}
	}
	return true
}

// interesting are argument values worth trying: the ones the issue names,
// and each boundary of every comparison in p.
func interesting(p *specs.LinuxSeccomp) []uint64 {
	const thread = unix.CLONE_VM | unix.CLONE_FS | unix.CLONE_FILES | unix.CLONE_SIGHAND |
		unix.CLONE_THREAD | unix.CLONE_SYSVSEM | unix.CLONE_SETTLS | unix.CLONE_PARENT_SETTID |
		unix.CLONE_CHILD_CLEARTID
	vs := []uint64{
		0, 1, 2, 3, 0xffffffff, 0xffffffff_ffffffff, 1 << 32, 1 << 63, 0x7fffffff, 0x80000000,
		// clone flags
		uint64(unix.SIGCHLD), thread, unix.CLONE_VM | unix.CLONE_VFORK | uint64(unix.SIGCHLD),
		unix.CLONE_PIDFD | uint64(unix.SIGCHLD), 0x80 /* CLONE_NEWTIME */, nsFlags, ^uint64(nsFlags),
		uint64(^uint32(nsFlags)), 1<<32 | unix.CLONE_NEWUSER, 0xffffffff_00000000,
		// personality
		0x8, 0x20000, 0x20008, 0x40000 /* ADDR_NO_RANDOMIZE */, 0x400000, /* READ_IMPLIES_EXEC */
		0x1_00000000, 0x1_00000008, 0xfffffffe, 9,
	}
	for _, f := range []uint64{unix.CLONE_NEWNS, unix.CLONE_NEWUTS, unix.CLONE_NEWIPC, unix.CLONE_NEWUSER,
		unix.CLONE_NEWPID, unix.CLONE_NEWNET, unix.CLONE_NEWCGROUP} {
		vs = append(vs, f, f|thread, f|uint64(unix.SIGCHLD), f|1<<32)
	}
	for af := uint64(0); af <= 50; af++ { // socket families
		vs = append(vs, af, af|1<<32)
	}
	for _, s := range p.Syscalls {
		for _, a := range s.Args {
			for _, v := range []uint64{a.Value, a.ValueTwo} {
				vs = append(vs, v-1, v, v+1, v^1<<32, v+1<<32, v-1<<32, v|1<<63, v&0xffffffff, v>>32,
					v^0xffffffff, v|a.ValueTwo, a.ValueTwo&^v)
			}
		}
	}
	slices.Sort(vs)
	return slices.Compact(vs)
}

// compare runs prog and o on every input and reports each disagreement.
func compare(t *testing.T, prog []bpf.Instruction, o *oracle, inputs []input) {
	t.Helper()
	vm, err := bpf.NewVM(prog)
	if err != nil {
		t.Fatalf("VM refuses the program: %v", err)
	}
	bad := 0
	for _, in := range inputs {
		got, err := vm.Run(vmBytes(in.kernelBytes()))
		if err != nil {
			t.Fatalf("VM: %v", err)
		}
		if want := o.decide(t, in); uint32(got) != want {
			bad++
			if bad <= 20 {
				t.Errorf("nr %d (%s) arch %#x args %#x: program %#08x, profile %#08x",
					in.nr, o.a.byNr[in.nr], in.arch, in.args, uint32(got), want)
			}
		}
	}
	if bad > 20 {
		t.Errorf("... %d disagreements in all, of %d inputs", bad, len(inputs))
	}
}

// inputsFor is every syscall number of a's table and the gaps up to a few
// past the last, each with plain argument sets and every interesting
// value as its first argument (at every position, for the syscalls that
// have conditions), and the numbers and architectures that must never
// reach the rules.
func inputsFor(p *specs.LinuxSeccomp, a *arch, r *rand.Rand) []input {
	a.index()
	conditional := map[uint32]bool{}
	for _, s := range p.Syscalls {
		if len(s.Args) == 0 {
			continue
		}
		for _, n := range s.Names {
			if nr, ok := a.lookup(n); ok {
				conditional[nr] = true
			}
		}
	}
	var top uint32
	for _, s := range a.table {
		top = max(top, s.nr)
	}
	vals := interesting(p)
	var ins []input
	randArgs := func() (v [6]uint64) {
		for i := range v {
			v[i] = r.Uint64()
		}
		return v
	}
	plain := func(nr, ar uint32) {
		ins = append(ins,
			input{nr: nr, arch: ar},
			input{nr: nr, arch: ar, ip: r.Uint64(), args: [6]uint64{^uint64(0), ^uint64(0), ^uint64(0), ^uint64(0), ^uint64(0), ^uint64(0)}},
			input{nr: nr, arch: ar, ip: r.Uint64(), args: randArgs()},
			input{nr: nr, arch: ar, ip: r.Uint64(), args: randArgs()},
		)
	}
	sweep := func(nr uint32) {
		for _, v := range vals {
			for i := range 6 {
				var args [6]uint64
				args[i] = v
				ins = append(ins, input{nr: nr, arch: a.audit, ip: r.Uint64(), args: args})
				args = randArgs()
				args[i] = v
				ins = append(ins, input{nr: nr, arch: a.audit, ip: r.Uint64(), args: args})
			}
		}
	}
	for nr := uint32(0); nr <= top+8; nr++ {
		plain(nr, a.audit)
		if conditional[nr] {
			sweep(nr)
			continue
		}
		// Every other syscall with each value as its first argument,
		// which is what the rules compare: the answer must not change.
		for _, v := range vals {
			args := randArgs()
			args[0] = v
			ins = append(ins, input{nr: nr, arch: a.audit, ip: r.Uint64(), args: args})
		}
	}
	// A few unconditional syscalls get the sweep too: their answer must
	// not depend on the arguments.
	for _, n := range []string{"read", "keyctl", "mount", "openat", "clone3"} {
		if nr, ok := a.lookup(n); ok {
			sweep(nr)
		}
	}
	for _, nr := range []uint32{0x3fffffff, 0x40000000, 0x7fffffff, 0x80000000, 0xbfffffff, 0xc0000000, 0xfffffffe, 0xffffffff} {
		plain(nr, a.audit)
	}
	foreign := []uint32{unix.AUDIT_ARCH_I386, unix.AUDIT_ARCH_ARM, unix.AUDIT_ARCH_X86_64, unix.AUDIT_ARCH_AARCH64, 0, 0xffffffff, a.audit ^ 0x80000000}
	for _, s := range a.table {
		// x32: the same numbers with bit 30 set.
		plain(s.nr|x32Bit, a.audit)
		for _, ar := range foreign {
			if ar != a.audit {
				plain(s.nr, ar)
			}
		}
	}
	return ins
}

// checkInstructions holds the program to what the kernel's checker and
// the word-swapping VM input assume.
func checkInstructions(t *testing.T, prog []bpf.Instruction) {
	t.Helper()
	if len(prog) > unix.BPF_MAXINSNS {
		t.Errorf("%d instructions, the kernel takes at most %d", len(prog), unix.BPF_MAXINSNS)
	}
	for i, ins := range prog {
		switch x := ins.(type) {
		case bpf.LoadAbsolute:
			if x.Size != 4 || x.Off%4 != 0 || x.Off+4 > 64 {
				t.Errorf("instruction %d: %v is not an aligned word of seccomp_data", i, x)
			}
		case bpf.JumpIf, bpf.Jump, bpf.RetConstant, bpf.ALUOpConstant:
		default:
			t.Errorf("instruction %d: %T is not used by this compiler", i, ins)
		}
	}
	if _, ok := prog[len(prog)-1].(bpf.RetConstant); !ok {
		t.Errorf("the program does not end in a return")
	}
}

// TestOracle compares each architecture's compiled program, run by
// x/net/bpf's VM, with the plain evaluation of nlx's profile for every
// syscall number and the interesting arguments, on any host.
func TestOracle(t *testing.T) {
	k, err := hostKernel()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range []*arch{archAMD64, archARM64} {
		t.Run(a.goarch, func(t *testing.T) {
			p, err := profileFor(a, k)
			if err != nil {
				t.Fatal(err)
			}
			prog, err := compile(p, a)
			if err != nil {
				t.Fatal(err)
			}
			checkInstructions(t, prog)
			r := rand.New(rand.NewPCG(1, uint64(len(a.table))))
			ins := inputsFor(p, a, r)
			compare(t, prog, newOracle(t, p, a), ins)
			t.Logf("%d instructions, %d inputs", len(prog), len(ins))
		})
	}
}

// TestOracleOperators does the same for profiles that use every
// operator, 64-bit values, conjunctions, alternatives and every action
// the compiler takes, which nlx's profile does not all use.
func TestOracleOperators(t *testing.T) {
	u := func(v uint) *uint { return &v }
	hi := uint64(0x1_00000005)
	base := specs.LinuxSeccomp{DefaultAction: specs.ActErrno, DefaultErrnoRet: u(1)}
	rules := []specs.LinuxSyscall{
		{Names: []string{"read", "write", "no_such_call"}, Action: specs.ActAllow},
		{Names: []string{"openat"}, Action: specs.ActAllow, Args: []specs.LinuxSeccompArg{{Index: 2, Op: specs.OpNotEqual, Value: hi}}},
		{Names: []string{"close"}, Action: specs.ActAllow, Args: []specs.LinuxSeccompArg{{Index: 0, Op: specs.OpLessThan, Value: hi}}},
		{Names: []string{"dup"}, Action: specs.ActAllow, Args: []specs.LinuxSeccompArg{{Index: 5, Op: specs.OpLessEqual, Value: hi}}},
		{Names: []string{"dup3"}, Action: specs.ActAllow, Args: []specs.LinuxSeccompArg{{Index: 1, Op: specs.OpEqualTo, Value: hi}}},
		{Names: []string{"fcntl"}, Action: specs.ActAllow, Args: []specs.LinuxSeccompArg{{Index: 3, Op: specs.OpGreaterEqual, Value: hi}}},
		{Names: []string{"getpid"}, Action: specs.ActAllow, Args: []specs.LinuxSeccompArg{{Index: 4, Op: specs.OpGreaterThan, Value: hi}}},
		{Names: []string{"gettid"}, Action: specs.ActAllow, Args: []specs.LinuxSeccompArg{{Index: 0, Op: specs.OpMaskedEqual, Value: 0xff00_0000_ff00, ValueTwo: 0x1200_0000_3400}}},
		{Names: []string{"getuid"}, Action: specs.ActAllow, Args: []specs.LinuxSeccompArg{{Index: 0, Op: specs.OpMaskedEqual, Value: 0xf0, ValueTwo: 0x1_00000000}}},
		{Names: []string{"getgid"}, Action: specs.ActAllow, Args: []specs.LinuxSeccompArg{{Index: 0, Op: specs.OpMaskedEqual, Value: 0xf_00000000, ValueTwo: 0x3_00000000}}},
		// A conjunction, and alternatives for one syscall.
		{Names: []string{"kill"}, Action: specs.ActErrno, ErrnoRet: u(13), Args: []specs.LinuxSeccompArg{
			{Index: 1, Op: specs.OpEqualTo, Value: 9}, {Index: 0, Op: specs.OpGreaterThan, Value: 100}}},
		{Names: []string{"kill"}, Action: specs.ActErrno, ErrnoRet: u(13), Args: []specs.LinuxSeccompArg{{Index: 1, Op: specs.OpEqualTo, Value: 15}}},
		{Names: []string{"kill"}, Action: specs.ActErrno, ErrnoRet: u(13), Args: []specs.LinuxSeccompArg{{Index: 1, Op: specs.OpLessThan, Value: 3}}},
		{Names: []string{"keyctl"}, Action: specs.ActKillProcess},
		{Names: []string{"add_key"}, Action: specs.ActKill},
		{Names: []string{"request_key"}, Action: specs.ActTrap},
		{Names: []string{"uname"}, Action: specs.ActLog},
		{Names: []string{"mount"}, Action: specs.ActErrno, ErrnoRet: u(4095)},
		// The default's action: dropped, as runc drops it.
		{Names: []string{"getppid"}, Action: specs.ActErrno, ErrnoRet: u(1)},
	}
	cases := map[string]specs.LinuxSeccomp{}
	p := base
	p.Syscalls = rules
	cases["errno default"] = p
	p.DefaultAction, p.DefaultErrnoRet = specs.ActKillProcess, nil
	cases["kill default"] = p
	p.DefaultAction, p.DefaultErrnoRet = specs.ActErrno, u(38)
	cases["enosys default, no stub"] = p
	p.DefaultAction, p.DefaultErrnoRet = specs.ActAllow, nil
	p.Syscalls = slices.DeleteFunc(slices.Clone(rules), func(s specs.LinuxSyscall) bool { return slices.Contains(s.Names, "no_such_call") })
	cases["allow default"] = p
	for name, p := range cases {
		for _, a := range []*arch{archAMD64, archARM64} {
			t.Run(fmt.Sprintf("%s/%s", name, a.goarch), func(t *testing.T) {
				prog, err := compile(&p, a)
				if err != nil {
					t.Fatal(err)
				}
				checkInstructions(t, prog)
				r := rand.New(rand.NewPCG(2, 3))
				compare(t, prog, newOracle(t, &p, a), inputsFor(&p, a, r))
			})
		}
	}
}
