//go:build !amd64

package seccomp

import "errors"

func int80Getpid() error { return errors.New("int 0x80 is amd64's") }
