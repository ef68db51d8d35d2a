//go:build !linux

package schema

import (
	"os"
	"syscall"
)

func executable() (string, error) { return os.Executable() }

func childAttr() *syscall.SysProcAttr { return nil }

func lockThread()   {}
func unlockThread() {}
