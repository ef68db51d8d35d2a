package main

import (
	"fmt"
	"io"
	"os"
	"text/tabwriter"

	"github.com/nlx-dev/nlx/host"
	"github.com/nlx-dev/nlx/internal/reason"
	"github.com/nlx-dev/nlx/isolate"
	"github.com/spf13/cobra"
)

func newDoctorCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Report what this host can enforce for provider processes",
		Long: `Doctor checks namespaces, bubblewrap and runc (present and working), the
cgroup mode and its memory, pids and cpu controllers, and the architecture,
and says how to fix each gap. It exits 0 only when a provider can be
launched safely.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			r := isolate.Doctor(cmd.Context())
			r.Findings = append(r.Findings, providerUserFinding())
			if err := a.view.Render(document{
				Version: versionDoctor,
				JSON:    map[string]any{"can_launch": r.CanLaunch(), "report": r},
				Text:    func(w io.Writer) error { return printDoctor(w, r) },
			}); err != nil {
				return err
			}
			if !r.CanLaunch() || !r.Findings[len(r.Findings)-1].OK {
				return reason.New(reason.CannotLaunch, "this host cannot launch a provider safely; fix the gaps above")
			}
			return nil
		},
	}
	return cmd
}

func printDoctor(w io.Writer, r isolate.Report) error {
	fmt.Fprintf(w, "architecture %s, kernel %s, cgroups %s\n\n", r.Arch, r.Kernel, r.CgroupMode)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, f := range r.Findings {
		mark := "ok"
		if !f.OK {
			mark = "NO"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", mark, f.Name, f.Detail)
		if !f.OK && f.Fix != "" {
			fmt.Fprintf(tw, "\t\tfix: %s\n", f.Fix)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if r.CanLaunch() && r.Findings[len(r.Findings)-1].OK {
		fmt.Fprintln(w, "\nA provider can be launched safely on this host.")
	}
	return nil
}

// providerUserFinding reports who providers run as (last of the findings).
func providerUserFinding() isolate.Finding {
	f := isolate.Finding{Name: "provider.user"}
	if os.Geteuid() != 0 {
		f.OK, f.Detail = true, fmt.Sprintf("nlx is not root: providers run as its own user (uid %d)", os.Geteuid())
		return f
	}
	o, err := host.FindProviderUser()
	switch {
	case err != nil:
		f.Detail = err.Error()
		f.Fix = "create it (useradd --system --user-group --no-create-home --shell /usr/sbin/nologin NAME) or set NLX_PROVIDER_USER to a user (or UID:GID) that is not root"
	case o == nil:
		f.OK, f.Detail = true, host.DefaultProviderUser+" does not exist yet: nlx creates it at the first launch or apply"
	default:
		f.OK, f.Detail = true, fmt.Sprintf("providers run as %s (uid %d, gid %d)", o.Name, o.UID, o.GID)
	}
	return f
}
