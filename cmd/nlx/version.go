package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/nlx-dev/nlx/plan"
	"github.com/nlx-dev/nlx/state"
)

// version is set at link time (-ldflags "-X main.version=v1.2.3").
var version = ""

// nlxVersion is this binary's version: the link-time one, else the module
// version the Go tool stamped (a release's tag, or a pseudo-version naming
// the commit of a build in a checkout, "+dirty" when it had changes), else
// "dev" with the VCS revision when known (go build -buildvcs=false stamps
// neither; go run stamps no revision).
func nlxVersion() string {
	if version != "" {
		return version
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "dev"
	}
	if v := info.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	rev, dirty := "", false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if len(rev) < 12 {
		return "dev"
	}
	v := "dev-" + rev[:12]
	if dirty {
		v += "+dirty"
	}
	return v
}

func newVersionCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print nlx's version and the formats it reads",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.view.Render(document{
				Version: versionVersion,
				JSON: map[string]any{
					"version": nlxVersion(), "go": runtime.Version(), "os": runtime.GOOS, "arch": runtime.GOARCH,
					"plan_format_version": plan.FormatVersion, "state_schema_version": state.SchemaVersion(),
				},
				Text: func(w io.Writer) error {
					_, err := fmt.Fprintf(w, "nlx version %s (%s %s/%s; plan format %d, state schema %d)\n",
						nlxVersion(), runtime.Version(), runtime.GOOS, runtime.GOARCH, plan.FormatVersion, state.SchemaVersion())
					return err
				},
			})
		},
	}
	return cmd
}
