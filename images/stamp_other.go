//go:build !linux

package images

import "os"

// sysStamp: size, mode and mtime alone identify a file here.
func sysStamp(os.FileInfo) (uint64, int64) { return 0, 0 }
