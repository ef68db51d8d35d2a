package main

import (
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strings"
)

// writeIdentities writes dir/zz_identities.cue, in CUE package pkg, giving
// each actor the OS user running the bench as its identity (host.actors):
// the bench's nlx turn, nlx run and nlx approve prove the actor by the
// calling OS user, as a person on the host does. It is applied with the
// config's first apply, which needs no approval for it.
func writeIdentities(dir, pkg string, actors ...string) error {
	u, err := user.Current()
	if err != nil {
		return fmt.Errorf("the OS user running the bench: %w", err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "package %s\n\nhost: actors: {\n", pkg)
	for _, a := range actors {
		fmt.Fprintf(&b, "\t%s: unix: %q\n", a, u.Username)
	}
	b.WriteString("}\n")
	return os.WriteFile(filepath.Join(dir, "zz_identities.cue"), []byte(b.String()), 0o644)
}
