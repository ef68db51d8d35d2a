package seccomp

import (
	"runtime"
	"testing"
)

func benchSetup(b *testing.B) (*arch, kernelVersion) {
	a, err := archFor(runtime.GOARCH)
	if err != nil {
		b.Skip(err)
	}
	k, err := hostKernel()
	if err != nil {
		b.Fatal(err)
	}
	return a, k
}

// BenchmarkResolve is what Profile costs the first time in a process:
// Docker's profile built and resolved, the deviations applied and checked.
func BenchmarkResolve(b *testing.B) {
	a, k := benchSetup(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := profileFor(a, k); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkProfile is every later call: a copy of the resolved profile.
func BenchmarkProfile(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Profile(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCompile is the profile compiled into instructions (the first
// Program call in a process, with BenchmarkEncode).
func BenchmarkCompile(b *testing.B) {
	a, k := benchSetup(b)
	p, err := profileFor(a, k)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := compile(p, a); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEncode is the instructions assembled into struct sock_filter
// bytes.
func BenchmarkEncode(b *testing.B) {
	a, k := benchSetup(b)
	p, err := profileFor(a, k)
	if err != nil {
		b.Fatal(err)
	}
	ins, err := compile(p, a)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := encode(ins); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkProgramCached is what a launch pays: Profile, then Program
// finding the cached bytes by the profile's content.
func BenchmarkProgramCached(b *testing.B) {
	benchSetup(b)
	b.ReportAllocs()
	for b.Loop() {
		p, err := Profile()
		if err != nil {
			b.Fatal(err)
		}
		if _, err := Program(p); err != nil {
			b.Fatal(err)
		}
	}
}
