// Package atomicfile writes a file whole or not at all: a reader sees the
// old file or the new one, never half of either. It imports nothing of nlx.
package atomicfile

import (
	"os"
	"path/filepath"
)

// Write writes data to path with permissions perm through a temporary file
// in the same directory, synced, then renamed over path. On any error the
// temporary file is removed and path is untouched.
func Write(path string, data []byte, perm os.FileMode) (err error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if _, err := f.Write(data); err != nil {
		return err
	}
	if err := f.Chmod(perm); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
