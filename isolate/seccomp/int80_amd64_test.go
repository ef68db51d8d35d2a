package seccomp

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// int80Getpid makes getpid through the i386 entry point (int 0x80) from
// this 64-bit process, as a filter-bypass attempt would: the kernel sees
// AUDIT_ARCH_I386 and i386's number 20. The code runs from an executable
// page, called as a Go func value (a pointer to a word holding the code's
// address); it touches only eax, which Go's calling convention does not
// keep across a call.
func int80Getpid() error {
	code := []byte{
		0xb8, 0x14, 0x00, 0x00, 0x00, // mov eax, 20 (__NR_getpid, i386)
		0xcd, 0x80, // int 0x80
		0xc3, // ret
	}
	mem, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		return fmt.Errorf("mmap: %w", err)
	}
	copy(mem, code)
	if err := unix.Mprotect(mem, unix.PROT_READ|unix.PROT_EXEC); err != nil {
		return fmt.Errorf("mprotect: %w", err)
	}
	entry := &mem[0]
	fv := &entry
	f := *(*func())(unsafe.Pointer(&fv))
	f()
	return nil
}
