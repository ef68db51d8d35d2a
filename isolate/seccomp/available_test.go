package seccomp

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nlx-dev/nlx/internal/reason"
	"github.com/nlx-dev/nlx/internal/testtool"
	"golang.org/x/sys/unix"
)

// TestAvailableHost: this host (and CI's) can enforce the filter.
func TestAvailableHost(t *testing.T) {
	if err := Available(); err != nil {
		t.Fatal(err)
	}
	// The fallback Available takes without actions_avail.
	for _, r := range required {
		if err := host.action(r.ret); err != nil {
			t.Errorf("SECCOMP_GET_ACTION_AVAIL %s: %v", r.name, err)
		}
	}
	if err := host.action(0x12340000); err == nil {
		t.Errorf("SECCOMP_GET_ACTION_AVAIL accepted an action that does not exist")
	}
}

func TestAvailable(t *testing.T) {
	ok := probes{
		mode:    func() (int, error) { return 0, nil },
		filter:  func() error { return unix.EFAULT },
		actions: func() (string, error) { return "kill_process kill_thread trap errno user_notif trace log allow\n", nil },
		action:  func(uint32) error { return nil },
	}
	noFile := func(p probes) probes {
		p.actions = func() (string, error) { return "", os.ErrNotExist }
		return p
	}
	for _, c := range []struct {
		name   string
		change func(p *probes)
		want   string // in Msg; "" for available
	}{
		{"available", func(*probes) {}, ""},
		{"already filtered", func(p *probes) { p.mode = func() (int, error) { return 2, nil } }, ""},
		{"no CONFIG_SECCOMP", func(p *probes) { p.mode = func() (int, error) { return 0, unix.EINVAL } }, "CONFIG_SECCOMP"},
		{"strict mode", func(p *probes) { p.mode = func() (int, error) { return 1, nil } }, "strict"},
		{"no CONFIG_SECCOMP_FILTER", func(p *probes) { p.filter = func() error { return unix.EINVAL } }, "CONFIG_SECCOMP_FILTER"},
		{"denied by an outer filter", func(p *probes) { p.filter = func() error { return unix.EPERM } }, "denied"},
		{"no errno action", func(p *probes) {
			p.actions = func() (string, error) { return "kill_process kill_thread trap allow", nil }
		}, "action errno"},
		{"no kill_process action", func(p *probes) {
			p.actions = func() (string, error) { return "kill_thread trap errno allow", nil }
		}, "action kill_process"},
		{"no actions_avail, kernel answers", func(p *probes) { *p = noFile(*p) }, ""},
		{"no actions_avail, kernel < 4.14", func(p *probes) {
			*p = noFile(*p)
			p.action = func(uint32) error { return unix.EINVAL }
		}, "4.14"},
		{"no actions_avail, no kill_process", func(p *probes) {
			*p = noFile(*p)
			p.action = func(r uint32) error {
				if r == unix.SECCOMP_RET_KILL_PROCESS {
					return unix.EOPNOTSUPP
				}
				return nil
			}
		}, "action kill_process"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := ok
			c.change(&p)
			err := p.available()
			if c.want == "" {
				if err != nil {
					t.Fatalf("available: %v, want nil", err)
				}
				return
			}
			var e *reason.Error
			if !errors.As(err, &e) {
				t.Fatalf("available: %v (%T), want an *reason.Error", err, err)
			}
			if e.Code != reason.SeccompUnavailable || !strings.Contains(e.Msg, c.want) {
				t.Errorf("got %s: %s, want %s with %q", e.Code, e.Msg, reason.SeccompUnavailable, c.want)
			}
			if !strings.HasPrefix(err.Error(), string(reason.SeccompUnavailable)+": ") {
				t.Errorf("Error() = %q, want it to start with the code", err.Error())
			}
		})
	}
}

// TestRuncSupports runs RuncSupports against stand-ins for runc that
// answer as runc builds with and without seccomp do, and against the
// real runc.
func TestRuncSupports(t *testing.T) {
	const features = `{"ociVersionMin":"1.0.0","linux":{"seccomp":{"enabled":%s,
		"actions":["SCMP_ACT_ALLOW","SCMP_ACT_ERRNO","SCMP_ACT_KILL"],
		"operators":["SCMP_CMP_EQ","SCMP_CMP_LT","SCMP_CMP_MASKED_EQ"%s],
		"archs":["SCMP_ARCH_AARCH64","SCMP_ARCH_X86_64"]}}}`
	const version = "runc version 1.1.5\ncommit: v1.1.5\nspec: 1.0.2-dev\ngo: go1.19.8\n"
	fake := func(featuresOut string, featuresExit int, versionOut string) string {
		dir := t.TempDir()
		script := "#!/bin/sh\ncase \"$1\" in\nfeatures) cat <<'EOF'\n" + featuresOut + "\nEOF\nexit " +
			strconv.Itoa(featuresExit) + ";;\n--version) cat <<'EOF'\n" + versionOut + "\nEOF\n;;\nesac\n"
		path := filepath.Join(dir, "runc")
		if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		return path
	}
	sprintf := func(enabled, extra string) string {
		return strings.Replace(strings.Replace(features, "%s", enabled, 1), "%s", extra, 1)
	}
	for _, c := range []struct {
		name string
		runc string
		want string // "" for supported, "plain" for a non-*reason.Error
	}{
		{"features, seccomp", fake(sprintf("true", ""), 0, version), ""},
		{"features, no seccomp", fake(sprintf("false", ""), 0, version+"libseccomp: 2.5.4"), "without seccomp"},
		{"features, an operator missing", fake(strings.Replace(sprintf("true", ""), `"SCMP_CMP_LT",`, "", 1), 0, version), "SCMP_CMP_LT"},
		{"no features, libseccomp", fake("No help topic for 'features'", 1, version+"libseccomp: 2.5.4"), ""},
		{"no features, no libseccomp", fake("No help topic for 'features'", 1, version), "without seccomp"},
		{"features without seccomp section", fake(`{"ociVersionMin":"1.0.0"}`, 0, version), "without seccomp"},
		{"missing", filepath.Join(t.TempDir(), "runc"), "plain"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err := RuncSupports(ctx, c.runc)
			var e *reason.Error
			switch {
			case c.want == "":
				if err != nil {
					t.Errorf("RuncSupports: %v, want nil", err)
				}
			case c.want == "plain":
				if err == nil || errors.As(err, &e) {
					t.Errorf("RuncSupports: %v, want a plain error", err)
				}
			case !errors.As(err, &e) || e.Code != reason.SeccompUnavailable || !strings.Contains(e.Msg, c.want):
				t.Errorf("RuncSupports: %v, want %s with %q", err, reason.SeccompUnavailable, c.want)
			}
		})
	}
	t.Run("real runc", func(t *testing.T) {
		path := lookRunc(t)
		if err := RuncSupports(context.Background(), path); err != nil {
			t.Error(err)
		}
	})
}

// lookRunc finds runc, skipping without it except under CI, which
// installs it.
func lookRunc(t *testing.T) string {
	t.Helper()
	return testtool.Need(t, "runc")
}
