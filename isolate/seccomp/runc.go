package seccomp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/opencontainers/runtime-spec/specs-go/features"
)

const runcFix = "install a runc built with seccomp support (Debian's and Ubuntu's runc packages are)"

// RuncSupports reports whether the runc at runcPath can enforce Profile():
// `runc features` (runc 1.1 and later) must report seccomp enabled with
// every action, operator and the architecture the profile uses; a runc
// without that command must name its libseccomp in `runc --version`, as
// runc prints it only when built with seccomp. A runc that cannot is an
// *reason.Error with Code reason.SeccompUnavailable; one that does not run at all is a
// plain error.
//
// runc 1.1.5 here prints, for example, "libseccomp: 2.5.4" in --version
// and "seccomp": {"enabled": true, "actions": [...], ...} in features.
func RuncSupports(ctx context.Context, runcPath string) error {
	p, err := Profile()
	if err != nil {
		return err
	}
	return runcSupports(ctx, runcPath, p)
}

func runcSupports(ctx context.Context, runcPath string, p *specs.LinuxSeccomp) error {
	out, err := exec.CommandContext(ctx, runcPath, "features").Output()
	if err == nil {
		var f features.Features
		if err := json.Unmarshal(out, &f); err != nil {
			return fmt.Errorf("seccomp: %s features: %w", runcPath, err)
		}
		if f.Linux != nil && f.Linux.Seccomp != nil && f.Linux.Seccomp.Enabled != nil {
			return checkFeatures(runcPath, f.Linux.Seccomp, p)
		}
	} else if ctx.Err() != nil {
		return fmt.Errorf("seccomp: %s features: %w", runcPath, ctx.Err())
	}
	// Older runc, or features without a seccomp section.
	out, err = exec.CommandContext(ctx, runcPath, "--version").Output()
	if err != nil {
		return fmt.Errorf("seccomp: %s --version: %w", runcPath, err)
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "libseccomp:"); ok && strings.TrimSpace(v) != "" {
			return nil
		}
	}
	return unavailable(runcFix, "%s was built without seccomp (its --version names no libseccomp)", runcPath)
}

func checkFeatures(runcPath string, s *features.Seccomp, p *specs.LinuxSeccomp) error {
	if !*s.Enabled {
		return unavailable(runcFix, "%s was built without seccomp (runc features: seccomp not enabled)", runcPath)
	}
	var actions, ops []string
	actions = append(actions, string(p.DefaultAction))
	for _, r := range p.Syscalls {
		actions = append(actions, string(r.Action))
		for _, a := range r.Args {
			ops = append(ops, string(a.Op))
		}
	}
	var missing []string
	for _, a := range actions {
		if !slices.Contains(s.Actions, a) && !slices.Contains(missing, a) {
			missing = append(missing, a)
		}
	}
	for _, o := range ops {
		if !slices.Contains(s.Operators, o) && !slices.Contains(missing, o) {
			missing = append(missing, o)
		}
	}
	for _, a := range p.Architectures {
		if !slices.Contains(s.Archs, string(a)) {
			missing = append(missing, string(a))
		}
	}
	if len(missing) > 0 {
		return unavailable("install a newer runc built with a newer libseccomp",
			"%s's seccomp lacks %s, which nlx's profile uses", runcPath, strings.Join(missing, ", "))
	}
	return nil
}
