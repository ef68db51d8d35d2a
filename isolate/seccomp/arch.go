package seccomp

import (
	"fmt"
	"sync"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// sysnum is one entry of an architecture's syscall table, named as the
// kernel's headers, libseccomp and Docker's profile name it.
type sysnum struct {
	name string
	nr   uint32
}

// arch is one architecture a filter can be built for. Both are
// little-endian, which the program's argument loads rely on.
type arch struct {
	goarch string
	docker string     // the name Docker's includes/excludes use
	scmp   specs.Arch // the native entry of linux.seccomp.architectures
	sub    []specs.Arch
	audit  uint32 // seccomp_data.arch of a native syscall
	// x32: on amd64 a syscall number with bit 30 set is the x32 ABI, which
	// shares AUDIT_ARCH_X86_64 and so passes the arch check.
	x32   bool
	table []sysnum // zsysnum.go, from golang.org/x/sys/unix

	once   sync.Once
	byName map[string]uint32
	byNr   map[uint32]string
}

// x32Bit is __X32_SYSCALL_BIT.
const x32Bit = 0x40000000

var (
	archAMD64 = &arch{
		goarch: "amd64", docker: "amd64",
		scmp: specs.ArchX86_64, sub: []specs.Arch{specs.ArchX86, specs.ArchX32},
		audit: unix.AUDIT_ARCH_X86_64, x32: true, table: sysnumAMD64[:],
	}
	archARM64 = &arch{
		goarch: "arm64", docker: "arm64",
		scmp: specs.ArchAARCH64, sub: []specs.Arch{specs.ArchARM},
		audit: unix.AUDIT_ARCH_AARCH64, table: sysnumARM64[:],
	}
)

func archFor(goarch string) (*arch, error) {
	switch goarch {
	case "amd64":
		return archAMD64, nil
	case "arm64":
		return archARM64, nil
	}
	return nil, fmt.Errorf("seccomp: no syscall table for GOARCH %s (nlx supports amd64 and arm64)", goarch)
}

func (a *arch) index() {
	a.once.Do(func() {
		a.byName = make(map[string]uint32, len(a.table))
		a.byNr = make(map[uint32]string, len(a.table))
		for _, s := range a.table {
			a.byName[s.name] = s.nr
			a.byNr[s.nr] = s.name
		}
	})
}

func (a *arch) lookup(name string) (uint32, bool) {
	a.index()
	nr, ok := a.byName[name]
	return nr, ok
}
