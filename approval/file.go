package approval

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/nlx-dev/nlx/internal/atomicfile"
)

// sigExt is the extension of the signature beside a statement's file.
const sigExt = ".sig"

// WriteFile writes s's message to dir/FileName(s) and its armored signature
// beside it, with ".sig" added, creating dir if need be. Each file is
// written whole or not at all (a temporary file renamed into place), the
// signature first; a crash between the two leaves a pair ReadDir refuses,
// never a half-written file. It returns the path of the message.
func WriteFile(dir string, s *Signed) (string, error) {
	// Write only what ReadDir will read back, under the name its
	// statement gives.
	back, err := Parse(s.Message, s.Signature)
	if err != nil {
		return "", fmt.Errorf("write approval: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("write approval: %w", err)
	}
	path := filepath.Join(dir, FileName(back.Statement))
	if err := atomicfile.Write(path+sigExt, back.Signature, 0o644); err != nil {
		return "", fmt.Errorf("write approval: %w", err)
	}
	if err := atomicfile.Write(path, back.Message, 0o644); err != nil {
		return "", fmt.Errorf("write approval: %w", err)
	}
	syncDir(dir)
	return path, nil
}

// syncDir makes the renames durable where the file system allows it; some
// refuse to sync a directory, and the files are whole either way.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
}

// ReadDir reads every approval in dir: each *.json file (not in
// subdirectories), in name order, with the .sig beside it, parsed by Parse
// and with File set to the .json's path. A .json without its .sig, a .sig
// without its .json, a file whose name is not FileName of its statement, or
// one that Parse refuses is an error naming the file; ReadDir reports every
// such file at once. A missing dir is an error; an empty one gives an empty
// slice.
func ReadDir(dir string) ([]*Signed, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read approvals: %w", err)
	}
	names := map[string]bool{}
	for _, e := range entries {
		names[e.Name()] = true
	}
	out := []*Signed{}
	var errs []error
	for _, e := range entries { // sorted by name
		name := e.Name()
		path := filepath.Join(dir, name)
		switch {
		case strings.HasSuffix(name, ".json"):
			if !names[name+sigExt] {
				errs = append(errs, fmt.Errorf("approval %s: no signature %s beside it", path, name+sigExt))
				continue
			}
			s, err := readPair(path)
			if err != nil {
				errs = append(errs, fmt.Errorf("approval %s: %w", path, err))
				continue
			}
			out = append(out, s)
		case strings.HasSuffix(name, sigExt):
			if base := strings.TrimSuffix(name, sigExt); !strings.HasSuffix(base, ".json") || !names[base] {
				errs = append(errs, fmt.Errorf("approval signature %s: no statement %s beside it", path, base))
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("read approvals in %s: %w", dir, err)
	}
	return out, nil
}

// readPair reads and parses the statement at path and its signature.
func readPair(path string) (*Signed, error) {
	var data [2][]byte
	for i, p := range []string{path, path + sigExt} {
		fi, err := os.Stat(p)
		if err != nil {
			return nil, err
		}
		if !fi.Mode().IsRegular() {
			return nil, fmt.Errorf("%s is not a regular file", p)
		}
		if data[i], err = readFile(p); err != nil {
			return nil, err
		}
	}
	s, err := Parse(data[0], data[1])
	if err != nil {
		return nil, err
	}
	if want := FileName(s.Statement); filepath.Base(path) != want {
		return nil, fmt.Errorf("%w: the file's name is not its statement's (%s)", ErrInvalidStatement, want)
	}
	s.File = path
	return s, nil
}
