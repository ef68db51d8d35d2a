package images

import (
	"os"
	"syscall"
)

// sysStamp is a file's inode and change time: a file replaced or touched
// in any way has another.
func sysStamp(fi os.FileInfo) (uint64, int64) {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Ino, st.Ctim.Nano()
	}
	return 0, 0
}
